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
// What must stay true: for every route, owner_refs >= the slices here of
// it; slices leave in the order base::RingQueue gives their runs (a
// push_front leaves first), each run's slices in ascending order; every
// run holds at least one slice; size() is the sum of the runs' counts.
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

// The queue holds runs of consecutive slices of one route: a task's
// slices enter as one run at submit (one entry, not one per slice), a
// pop takes the front run's first slice, and a slice pushed next to the
// run it continues joins it. The slices leave in exactly the order
// single entries would.
class PendingQueue {
 public:
  // Slices queued (not runs).
  size_t size() const { return slices_; }
  bool empty() const { return slices_ == 0; }
  size_t capacity() const { return q_.capacity(); }
  void ReleaseStorage() { q_.ReleaseStorage(); }
  Pending front() const {
    const Run& r = q_.front();
    return Pending{r.route, r.first};
  }

  void push_back(const Pending& p) {
    Ref(p.route, 1);
    ++slices_;
    if (!q_.empty()) {
      Run& back = q_.back();
      if (back.route == p.route && back.first + back.count == p.slice) {
        ++back.count;
        return;
      }
    }
    q_.push_back(Run{p.route, p.slice, 1});
  }
  // Slices [0, n) of `route`, in order, at the back.
  void PushAll(TaskRoute* route, uint32_t n) {
    FERRY_CHECK_GT(n, 0u);
    Ref(route, n);
    slices_ += n;
    q_.push_back(Run{route, 0, n});
  }
  void push_front(const Pending& p) {
    Ref(p.route, 1);
    ++slices_;
    if (!q_.empty()) {
      Run& front = q_.front();
      if (front.route == p.route && p.slice + 1 == front.first) {
        --front.first;
        ++front.count;
        return;
      }
    }
    q_.push_front(Run{p.route, p.slice, 1});
  }
  void pop_front() {
    Run& r = q_.front();
    FERRY_CHECK_GT(r.route->owner_refs, 0u);
    FERRY_CHECK_GT(r.count, 0u);
    --r.route->owner_refs;
    --slices_;
    ++r.first;
    if (--r.count == 0) q_.pop_front();
  }

 private:
  struct Run {
    TaskRoute* route = nullptr;
    uint32_t first = 0;
    uint32_t count = 0;  // > 0 while queued
  };
  static void Ref(TaskRoute* r, uint32_t n) {
    FERRY_CHECK(r != nullptr);
    r->owner_refs += n;
  }
  base::RingQueue<Run> q_;
  size_t slices_ = 0;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_PENDING_QUEUE_H_
