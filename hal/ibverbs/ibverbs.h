// hal/ibverbs/ibverbs.h: the production Verbs backend over rdma-core's
// libibverbs.
//
// Only Ferry types appear here; <infiniband/verbs.h> is included by
// hal/ibverbs/*.cc and convert.h only, never by the engine.
//
// Thread safety: as hal/verbs.h: calls on different objects may run on
// different threads at once. The handle tables sit behind one mutex that is
// never held across a libibverbs call that may block.
// What must stay true (see docs/hal.md):
// - A handle is a 64-bit id from one counter per instance, never reused; it
//   maps to its ibv_* pointer in a table. Unknown ids get kInvalidArgument.
// - A failed destroy leaves the handle valid; CloseDevice destroys what the
//   context still holds (QPs, CQs, MRs, PDs, channels) and closes it.
// - GetCqEvent / GetAsyncEvent never block (their fds are O_NONBLOCK).
// - Every errno goes through hal::ErrnoToStatus("ibv_<call>", errno).
#ifndef FERRY_HAL_IBVERBS_IBVERBS_H_
#define FERRY_HAL_IBVERBS_IBVERBS_H_

#include <memory>

#include "hal/verbs.h"

namespace ferry::hal {

// A Verbs over libibverbs. Cheap to create (no device is opened until
// OpenDevice).
std::unique_ptr<Verbs> NewIbverbsVerbs();

}  // namespace ferry::hal

#endif  // FERRY_HAL_IBVERBS_IBVERBS_H_
