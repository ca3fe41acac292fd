// engine/task_block.cc: the task pool and the one-block route (see
// task_block.h for what must stay true).
#include "engine/task_block.h"

#include <new>
#include <utility>

#include "base/check.h"

namespace ferry::engine {
namespace {

// A route, its task and up to kTaskInlineSlices slices: one block. The
// slices come before the task (the task is built over them).
struct TaskBlock {
  TaskBlock(const TaskGeometry& g, const base::Mutations* mutations)
      : task(g, mutations, Task::SlicesOf(g) <= kTaskInlineSlices ? slices.data() : nullptr) {
    route.task = &task;
  }
  std::array<Slice, kTaskInlineSlices> slices;
  Task task;
  TaskRoute route;
};

}  // namespace

TaskPool::TaskPool() {
  base::MutexLock l(&mu_);
  free_.reserve(kTaskPoolFreeMax);
}

TaskPool::~TaskPool() {
  base::MutexLock l(&mu_);
  for (void* p : free_) ::operator delete(p);
}

void* TaskPool::Allocate(size_t bytes) {
  {
    base::MutexLock l(&mu_);
    if (block_bytes_ == 0) block_bytes_ = bytes;
    if (bytes == block_bytes_ && !free_.empty()) {
      void* p = free_.back();
      free_.pop_back();
      ++stats_.taken;
      return p;
    }
    ++stats_.made;
  }
  return ::operator new(bytes);
}

void TaskPool::Deallocate(void* p, size_t bytes) {
  {
    base::MutexLock l(&mu_);
    if (bytes == block_bytes_ && free_.size() < kTaskPoolFreeMax) {
      free_.push_back(p);  // within the reserved capacity: no allocation
      ++stats_.given;
      return;
    }
    ++stats_.released;
  }
  ::operator delete(p);
}

TaskPool::Stats TaskPool::stats() const {
  base::MutexLock l(&mu_);
  return stats_;
}

std::shared_ptr<TaskRoute> MakeTaskRoute(const std::shared_ptr<TaskPool>& pool,
                                         const TaskGeometry& g, const base::Mutations* mutations) {
  FERRY_CHECK(pool != nullptr);
  auto block = std::allocate_shared<TaskBlock>(TaskPoolAllocator<TaskBlock>(pool), g, mutations);
  FERRY_CHECK(block->route.task == &block->task);
  TaskRoute* route = &block->route;
  return std::shared_ptr<TaskRoute>(std::move(block), route);
}

}  // namespace ferry::engine
