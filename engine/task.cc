// engine/task.cc: the task word and its one publish (see task.h).
//
// What must stay true: the publish happens in the same CAS that resolves the
// last slice (or, only under the test mutation kEngineC1EarlyPublish, at
// latch time: the bug C1 scenarios must catch); nothing changes after it.
#include "engine/task.h"

#include "base/check.h"
#include "ferry/config.h"

namespace ferry::engine {
namespace {

uint32_t SliceCountOf(const TaskGeometry& g) {
  FERRY_CHECK_GT(g.length_bytes, 0u);
  FERRY_CHECK_GT(g.slice_size_bytes, 0u);
  const uint64_t n = (g.length_bytes + g.slice_size_bytes - 1) / g.slice_size_bytes;
  FERRY_CHECK_LE(n, uint64_t{kSlicesPerTaskMax});
  FERRY_CHECK_LE(g.slice_size_bytes, uint64_t{UINT32_MAX});
  return static_cast<uint32_t>(n);
}

}  // namespace

TaskStatus TerminalStatusOf(const TaskWord& w) {
  if (w.latch != TaskStatus::kPending) return w.latch;
  if (w.failed) return TaskStatus::kFailed;
  return TaskStatus::kCompleted;
}

uint32_t Task::SlicesOf(const TaskGeometry& geometry) { return SliceCountOf(geometry); }

Task::Task(const TaskGeometry& geometry, const base::Mutations* mutations)
    : geometry_(geometry),
      slice_count_(SliceCountOf(geometry)),
      mutations_(mutations),
      owned_slices_(std::make_unique<Slice[]>(slice_count_)),
      slices_(owned_slices_.get()) {
  FERRY_CHECK_GE(geometry.deadline_ns, geometry.submit_ns);
  TaskWord w;
  w.unresolved = slice_count_;
  word_.store(TaskWord::Pack(w), std::memory_order_seq_cst);
}

Task::Task(const TaskGeometry& geometry, const base::Mutations* mutations, Slice* storage)
    : geometry_(geometry),
      slice_count_(SliceCountOf(geometry)),
      mutations_(mutations),
      owned_slices_(storage == nullptr ? std::make_unique<Slice[]>(slice_count_) : nullptr),
      slices_(storage == nullptr ? owned_slices_.get() : storage) {
  FERRY_CHECK_GE(geometry.deadline_ns, geometry.submit_ns);
  TaskWord w;
  w.unresolved = slice_count_;
  word_.store(TaskWord::Pack(w), std::memory_order_seq_cst);
}

Task::Task() {
  TaskWord w;
  w.published = TaskStatus::kInvalid;
  word_.store(TaskWord::Pack(w), std::memory_order_seq_cst);
}

std::unique_ptr<Task> Task::MakeInvalid() { return std::unique_ptr<Task>(new Task()); }

bool Task::TryLatch(TaskStatus why) {
  FERRY_CHECK(why == TaskStatus::kCanceled || why == TaskStatus::kTimeout);
  uint64_t raw = word_.load(std::memory_order_seq_cst);
  for (uint32_t round = 0; round <= slice_count_ + 2; ++round) {  // bounded: each failed CAS
    TaskWord w = TaskWord::Unpack(raw);                           // means a slice moved
    if (w.published != TaskStatus::kPending || w.latch != TaskStatus::kPending) return false;
    w.latch = why;
    if (mutations_ != nullptr && mutations_->on(base::Mutation::kEngineC1EarlyPublish)) {
      w.published = why;  // the bug: publish without evidence
    }
    if (word_.compare_exchange_strong(raw, TaskWord::Pack(w), std::memory_order_seq_cst)) {
      if (w.published != TaskStatus::kPending && hook_ != nullptr) hook_->OnPublished(w.published);
      return true;
    }
  }
  FERRY_UNREACHABLE();
}

std::optional<TaskStatus> Task::OnSliceFinalSlow(bool failed) {
  uint64_t raw = word_.load(std::memory_order_seq_cst);
  for (uint32_t round = 0; round <= slice_count_ + 2; ++round) {
    TaskWord w = TaskWord::Unpack(raw);
    FERRY_CHECK_GT(w.unresolved, 0u);  // each slice is final once
    const bool early = w.published != TaskStatus::kPending;
    // Only the C1 mutation (or the fail-early one) can have published before
    // the last slice.
    FERRY_CHECK(!early || (mutations_ != nullptr &&
                           (mutations_->on(base::Mutation::kEngineC1EarlyPublish) ||
                            mutations_->on(base::Mutation::kEngineFailPublishesEarly))));
    --w.unresolved;
    w.failed = w.failed || failed;
    // Test-only: the bug of publishing FAILED at the first failed slice, its
    // other slices still queued or posted (they are posted after publish).
    const bool fail_early = failed && !early && mutations_ != nullptr &&
                            mutations_->on(base::Mutation::kEngineFailPublishesEarly);
    const bool publish = (w.unresolved == 0 || fail_early) && !early;
    if (publish) w.published = TerminalStatusOf(w);
    if (word_.compare_exchange_strong(raw, TaskWord::Pack(w), std::memory_order_seq_cst)) {
      if (!publish) return std::nullopt;
      if (hook_ != nullptr) hook_->OnPublished(w.published);
      return w.published;
    }
  }
  FERRY_UNREACHABLE();
}

Task::Step Task::TryWithdrawSlice(uint32_t i, SliceOutcome reason) {
  Step step;
  if (!mutable_slice(i).TryWithdraw(reason)) return step;
  step.moved = true;
  step.published = OnSliceFinal(reason == SliceOutcome::kFailed);
  return step;
}

uint32_t Task::WithdrawQueued(std::optional<TaskStatus>* published) {
  const std::optional<TaskStatus> why = latched();
  FERRY_CHECK(why.has_value());
  const SliceOutcome reason =
      *why == TaskStatus::kCanceled ? SliceOutcome::kCanceled : SliceOutcome::kTimeout;
  uint32_t withdrawn = 0;
  for (uint32_t i = 0; i < slice_count_; ++i) {
    const Step step = TryWithdrawSlice(i, reason);
    if (!step.moved) continue;
    ++withdrawn;
    if (step.published.has_value() && published != nullptr) *published = step.published;
  }
  return withdrawn;
}

Task::Step Task::WithdrawIfLatched(uint32_t i) {
  const std::optional<TaskStatus> why = latched();
  if (!why.has_value()) return Step{};
  return TryWithdrawSlice(
      i, *why == TaskStatus::kCanceled ? SliceOutcome::kCanceled : SliceOutcome::kTimeout);
}

Task::Step Task::PostRejected(uint32_t i) {
  mutable_slice(i).PostRejected();
  return WithdrawIfLatched(i);
}

Task::Step Task::Requeue(uint32_t i) {
  mutable_slice(i).Requeue();
  // Test-only: the bug C2 forbids, a latched task's slice goes back to be
  // posted again (the oracle's posted_after_latch names it).
  if (mutations_ != nullptr && mutations_->on(base::Mutation::kEngineC2RepostLatched)) return {};
  return WithdrawIfLatched(i);
}

}  // namespace ferry::engine
