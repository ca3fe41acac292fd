// engine/task_block.h: a submitted task in one allocation, recycled.
//
// A request becomes a TaskRoute (where and how its slices go), its Task
// (the task word) and the Task's slices. MakeTaskRoute puts all three in one
// block (slices inline up to kTaskInlineSlices; a longer task's slices are
// one more allocation) and takes the block from a TaskPool, whose free list
// gets it back when the last shared_ptr to the route (a batch, an owner's
// queue, a posted WR's slot, a TaskOf() handle) lets go. So a steady-state
// Submit allocates nothing per request (tests/engine/sim/alloc_count_test).
//
// Thread safety: a TaskPool may be used from any thread (its free list is
// under a mutex): blocks are taken under the engine lock by Submit and
// given back wherever the last reference drops (user threads, owners).
// What must stay true:
// - every block of a pool has one size (the pool's first); a request of
//   another size is served by operator new and given back to it;
// - the free list holds at most kTaskPoolFreeMax blocks (memory stays
//   bounded after a burst); beyond, blocks go back to operator delete;
// - each block holds a shared_ptr to its pool (in its allocator), so the
//   pool outlives every block, whatever the engine's teardown order;
// - a route's `task` points into its own block: the block lives while
//   either the route or a TaskOf() handle (an aliasing shared_ptr) does.
#ifndef FERRY_ENGINE_TASK_BLOCK_H_
#define FERRY_ENGINE_TASK_BLOCK_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/mutation.h"
#include "base/mutex.h"
#include "engine/task.h"
#include "engine/worker.h"

namespace ferry::engine {

inline constexpr uint32_t kTaskInlineSlices = 4;
inline constexpr size_t kTaskPoolFreeMax = 4096;

class TaskPool {
 public:
  TaskPool();
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  void* Allocate(size_t bytes);
  void Deallocate(void* p, size_t bytes);

  struct Stats {
    uint64_t taken = 0;     // blocks served from the free list
    uint64_t made = 0;      // blocks served by operator new
    uint64_t given = 0;     // blocks given back to the free list
    uint64_t released = 0;  // blocks given back to operator delete
  };
  Stats stats() const;

 private:
  mutable base::Mutex mu_;
  size_t block_bytes_ ABSL_GUARDED_BY(mu_) = 0;   // 0 until the first Allocate
  std::vector<void*> free_ ABSL_GUARDED_BY(mu_);  // capacity kTaskPoolFreeMax
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

// The allocator allocate_shared uses for blocks (rebound to its control
// block type): copies share the pool.
template <typename T>
struct TaskPoolAllocator {
  using value_type = T;
  explicit TaskPoolAllocator(std::shared_ptr<TaskPool> p) : pool(std::move(p)) {}
  template <typename U>
  TaskPoolAllocator(const TaskPoolAllocator<U>& o) : pool(o.pool) {}  // NOLINT: rebind
  T* allocate(size_t n) { return static_cast<T*>(pool->Allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { pool->Deallocate(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const TaskPoolAllocator<U>& o) const {
    return pool == o.pool;
  }
  std::shared_ptr<TaskPool> pool;
};

// A route with its task of geometry `g` in one block from `pool`.
std::shared_ptr<TaskRoute> MakeTaskRoute(const std::shared_ptr<TaskPool>& pool,
                                         const TaskGeometry& g, const base::Mutations* mutations);

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_TASK_BLOCK_H_
