// engine/pending_queue.h: a key's queued slices on its owner worker, oldest
// first, and the count of the owner's pointers each one stands for.
//
// An entry names its route by a plain pointer: the owner's task list holds
// the route's one shared_ptr (Worker::tasks_) and keeps it while the route's
// `owner_refs` is nonzero (engine/task_route.h). Every push here adds one to
// the entry's route's count and every pop takes one off, so no caller can
// forget it; before session 39 each entry held a shared_ptr, two atomic
// reference count changes per slice on the hot path.
//
// Thread safety: none (owner worker only, as the routes' counts).
//
// What must stay true: for every route, owner_refs >= the entries here that
// name it; entries leave in the order base::RingQueue gives (a push_front
// leaves first); front() is read-only, so an entry's route never changes
// while it is queued.
#ifndef FERRY_ENGINE_PENDING_QUEUE_H_
#define FERRY_ENGINE_PENDING_QUEUE_H_

#include <cstddef>
#include <cstdint>

#include "base/check.h"
#include "base/ring_queue.h"
#include "engine/task_route.h"

namespace ferry::engine {

// One queued slice (or one taken off a queue, in a chain being built).
struct Pending {
  TaskRoute* route = nullptr;
  uint32_t slice = 0;
};

class PendingQueue {
 public:
  size_t size() const { return q_.size(); }
  bool empty() const { return q_.empty(); }
  size_t capacity() const { return q_.capacity(); }
  void ReleaseStorage() { q_.ReleaseStorage(); }
  const Pending& front() const { return q_.front(); }
  const Pending& operator[](size_t i) const { return q_[i]; }

  void push_back(const Pending& p) {
    Ref(p.route);
    q_.push_back(p);
  }
  void push_front(const Pending& p) {
    Ref(p.route);
    q_.push_front(p);
  }
  void pop_front() {
    TaskRoute* r = q_.front().route;
    FERRY_CHECK_GT(r->owner_refs, 0u);
    --r->owner_refs;
    q_.pop_front();
  }

 private:
  static void Ref(TaskRoute* r) {
    FERRY_CHECK(r != nullptr);
    ++r->owner_refs;
  }
  base::RingQueue<Pending> q_;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_PENDING_QUEUE_H_
