// engine/task_route.h: one request as its owner worker needs it.
//
// What it owns: the request's task (in the route's own allocation,
// engine/task_block.h, or through task_holder), its addresses and keys, and
// the owner's per-request bookkeeping (the WRs posted for the timeout sweep,
// the count of the owner's plain pointers to it).
//
// Thread safety: the fields above "owner only" are immutable once the route
// is submitted (lkey/lkey_epoch aside: the owner refreshes them after a
// context re-enable); the rest only on the owner worker.
//
// What must stay true: `owner_refs` equals the number of pending-queue
// entries and in-use slots of the owner that point at this route, and the
// owner keeps a shared_ptr to the route while it is nonzero (Worker's
// PruneFinishedTasks).
#ifndef FERRY_ENGINE_TASK_ROUTE_H_
#define FERRY_ENGINE_TASK_ROUTE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/inlined_vector.h"
#include "engine/task.h"
#include "ferry/types.h"

namespace ferry::engine {

// One request as the owner needs it (immutable after submit).
struct TaskRoute {
  // The route's task: in the route's own allocation (engine/task_block.h),
  // or owned by task_holder (a notification's, a test's).
  Task* task = nullptr;
  std::shared_ptr<Task> task_holder;
  void HoldTask(std::shared_ptr<Task> t) {
    task = t.get();
    task_holder = std::move(t);
  }
  OpKind op = OpKind::kRead;
  uint64_t local_addr = 0;
  uint64_t remote_addr = 0;
  uint32_t context = 0;                          // local context index (rail)
  std::shared_ptr<const std::string> peer_path;  // "host:port@nic", shared per segment
  // EndpointKeyHash(context's device, *peer_path) when Submit computed it
  // (to choose the owner); the owner's store lookup reuses it.
  std::optional<uint64_t> key_hash;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint64_t region = 0;           // local MR table id (lkey refreshed after a re-enable)
  uint64_t segment = 0;          // SegmentHandle id the rkey came from
  uint64_t segment_version = 0;  // that segment descriptor's version
  uint64_t peer_incarnation =
      0;  // that descriptor's peer incarnation (its rkeys are that process's)
  // The peer range's window id when the peer's device reaches it through
  // memory windows only (rkey is 0 then): each WR takes the rkey of the
  // window bound on its QP (docs/security.md section 6).
  uint64_t window = 0;
  // A notification: one SEND of the `local_addr` slot (engine/notify.h),
  // no remote address.
  bool send = false;
  // ---- owner only: one entry per WR posted for this task (the timeout
  // sweep checks each against its QP's FIFO before retiring, C3).
  struct PostedWr {
    uint32_t slot = 0;
    uint32_t generation = 0;
    uint64_t qp_uid = 0;
  };
  absl::InlinedVector<PostedWr, 2> posted;  // inline: a small task allocates nothing
  bool timeout_handled = false;
  uint64_t lkey_epoch = 0;  // context epoch `lkey` belongs to
  // ---- owner only: the owner's plain pointers to this route, each
  // counted: entries in its pending queues (engine/pending_queue.h keeps
  // the count) and slots of WRs on its QPs (Worker::SetSlotRoute and
  // ClearSlotRoute). The owner's task list holds the one shared_ptr; it drops
  // the route only once the task is terminal and this is 0, so no pointer
  // the owner keeps ever dangles.
  uint32_t owner_refs = 0;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_TASK_ROUTE_H_
