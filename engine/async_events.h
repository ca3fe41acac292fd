// engine/async_events.h: the one reader of every context's async events:
// gets each event, acknowledges it at once, and hands it to the owners
// (docs/design.md section 4, "Ownership").
//
// Thread safety: Step() from one thread (the async reader's runtime slot).
// What must stay true: every event returned by GetAsyncEvent is
// acknowledged exactly once, before anything else happens to it (destroying
// a QP or CQ with unacknowledged events would block in real verbs); the
// reader never touches a QP or CQ itself, it only pushes to inboxes.
#ifndef FERRY_ENGINE_ASYNC_EVENTS_H_
#define FERRY_ENGINE_ASYNC_EVENTS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/context.h"
#include "engine/worker.h"

namespace ferry::engine {

class AsyncReader {
 public:
  AsyncReader(hal::Verbs* verbs, std::vector<Context*> contexts, std::vector<Worker*> workers,
              std::function<void(uint32_t)> wake)
      : verbs_(verbs),
        contexts_(std::move(contexts)),
        workers_(std::move(workers)),
        wake_(std::move(wake)) {}
  // Reads up to `max` events over all contexts; returns how many.
  size_t Step(size_t max);
  uint64_t events() const { return events_; }

 private:
  hal::Verbs* verbs_;
  std::vector<Context*> contexts_;
  std::vector<Worker*> workers_;
  std::function<void(uint32_t)> wake_;
  uint64_t events_ = 0;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_ASYNC_EVENTS_H_
