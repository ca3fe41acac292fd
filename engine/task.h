// engine/task.h: one task (one submitted request), its slices and its word.
//
// The task word (one atomic 64-bit value) holds:
//   bits  0-31  unresolved: slices not yet final (RESOLVED or WITHDRAWN)
//   bit   32    failed: some slice ended FAILED
//   bits 40-47  latch: 0, or CANCELED / TIMEOUT (the first one latched wins)
//   bits 48-55  published status: PENDING (0) until the one publish
// A slice becoming final decrements `unresolved` by CAS; the CAS that takes
// it to 0 also writes the published status in the same word, so a task
// publishes exactly once, by one CAS, and only when every slice is RESOLVED
// or WITHDRAWN with no retry pending (a retry is a slice back in QUEUED,
// still counted as unresolved) (docs/design.md section 4, C1).
//
// Terminal status rule: the latched CANCELED/TIMEOUT if any; else FAILED if
// any slice failed; else COMPLETED. A late success never changes a latched
// status, and nothing changes after the publish.
//
// Cancel/timeout (C2): TryLatch, then WithdrawQueued. The owner, after each
// PostRejected or Requeue, reads the latch and withdraws the slice itself if
// the task is latched. Both sides use seq_cst, so a slice that returns to
// QUEUED is withdrawn by one of the two: it is never posted again and never
// left behind.
//
// Thread safety: status(), latched(), TryLatch(), TryWithdrawSlice() and
// WithdrawQueued() from any thread; the other slice transitions only on the
// owner worker (as in slice.h). Geometry fields are immutable.
#ifndef FERRY_ENGINE_TASK_H_
#define FERRY_ENGINE_TASK_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/attributes.h"
#include "base/check.h"
#include "base/mutation.h"
#include "engine/slice.h"
#include "ferry/types.h"

namespace ferry::engine {

struct TaskWord {
  uint32_t unresolved = 0;
  bool failed = false;
  TaskStatus latch = TaskStatus::kPending;      // kPending = nothing latched
  TaskStatus published = TaskStatus::kPending;  // kPending = not published

  static constexpr uint64_t kUnresolvedMask = 0xffffffffull;
  static constexpr uint64_t kFailedBit = 1ull << 32;
  static constexpr int kLatchShift = 40;
  static constexpr int kPublishedShift = 48;

  // Inline: both run several times per slice on the hot path.
  static uint64_t Pack(const TaskWord& w) {
    return uint64_t{w.unresolved} | (w.failed ? kFailedBit : 0) |
           (uint64_t{static_cast<uint8_t>(w.latch)} << kLatchShift) |
           (uint64_t{static_cast<uint8_t>(w.published)} << kPublishedShift);
  }
  static TaskWord Unpack(uint64_t raw) {
    TaskWord w;
    w.unresolved = static_cast<uint32_t>(raw & kUnresolvedMask);
    w.failed = (raw & kFailedBit) != 0;
    const auto latch = static_cast<uint8_t>((raw >> kLatchShift) & 0xff);
    const auto published = static_cast<uint8_t>((raw >> kPublishedShift) & 0xff);
    FERRY_CHECK_LE(latch, static_cast<uint8_t>(TaskStatus::kInvalid));
    FERRY_CHECK_LE(published, static_cast<uint8_t>(TaskStatus::kInvalid));
    w.latch = static_cast<TaskStatus>(latch);
    w.published = static_cast<TaskStatus>(published);
    return w;
  }
};

struct TaskGeometry {
  uint64_t length_bytes = 0;      // > 0
  uint64_t slice_size_bytes = 0;  // > 0
  uint64_t submit_ns = 0;
  uint64_t deadline_ns = 0;  // submit_ns + slice_timeout_ns
};

// Told once, on whichever thread publishes the task, right after the
// publishing CAS (engine/notify.h: a Submit's notification countdown and a
// notification's send slot). Must not block; may move other tasks.
class PublishHook {
 public:
  virtual ~PublishHook() = default;
  virtual void OnPublished(TaskStatus status) = 0;
};

class Task {
 public:
  // A task of ceil(length / slice_size) slices (1..kSlicesPerTaskMax), all
  // QUEUED in attempt 0. `mutations` may be null (none); it must outlive
  // the task.
  Task(const TaskGeometry& geometry, const base::Mutations* mutations);
  // The same with its slices in `storage` (at least SlicesOf(geometry)
  // default-constructed slices that outlive the task; engine/task_block.h
  // keeps them in the task's own allocation), or, when null, its own.
  Task(const TaskGeometry& geometry, const base::Mutations* mutations, Slice* storage);
  // The slice count of a task of this geometry (checked as the constructor does).
  static uint32_t SlicesOf(const TaskGeometry& geometry);
  // An INVALID task: no slices, published INVALID from the start.
  static std::unique_ptr<Task> MakeInvalid();

  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  // ------------------------------------------------------------ readers
  // (Inline: these run on every post and completion.)
  TaskStatus status() const { return LoadWord().published; }  // PENDING before publish
  TaskWord LoadWord() const { return TaskWord::Unpack(word_.load(std::memory_order_seq_cst)); }
  // The latched CANCELED/TIMEOUT, if any (also after publish).
  // (Reads the latch byte alone: BeginPost and every completion ask.)
  std::optional<TaskStatus> latched() const {
    const auto latch = static_cast<uint8_t>(
        (word_.load(std::memory_order_seq_cst) >> TaskWord::kLatchShift) & 0xff);
    FERRY_CHECK_LE(latch, static_cast<uint8_t>(TaskStatus::kInvalid));
    if (latch == static_cast<uint8_t>(TaskStatus::kPending)) return std::nullopt;
    return static_cast<TaskStatus>(latch);
  }
  uint32_t slice_count() const { return slice_count_; }
  const Slice& slice(uint32_t i) const {
    FERRY_CHECK_LT(i, slice_count_);
    return slices_[i];
  }
  Slice& mutable_slice(uint32_t i) {  // owner only (owner-only counters)
    FERRY_CHECK_LT(i, slice_count_);
    return slices_[i];
  }
  // Slice i's offset in the task's range and its length (the last slice
  // may be shorter), with one bounds check: FillWr takes both per post.
  struct SliceBytes {
    uint64_t offset = 0;
    uint32_t length = 0;
  };
  SliceBytes SliceSpanBytes(uint32_t i) const {
    FERRY_CHECK_LT(i, slice_count_);
    const uint64_t off = uint64_t{i} * geometry_.slice_size_bytes;
    const uint64_t rest = geometry_.length_bytes - off;
    return SliceBytes{
        off, static_cast<uint32_t>(rest < geometry_.slice_size_bytes ? rest
                                                                     : geometry_.slice_size_bytes)};
  }
  uint64_t SliceOffsetBytes(uint32_t i) const { return SliceSpanBytes(i).offset; }
  uint32_t SliceLengthBytes(uint32_t i) const { return SliceSpanBytes(i).length; }
  const TaskGeometry& geometry() const { return geometry_; }
  // Set once, before the task is shared with any other thread.
  void set_publish_hook(std::shared_ptr<PublishHook> hook) { hook_ = std::move(hook); }
  bool Expired(uint64_t now_ns) const { return now_ns >= geometry_.deadline_ns; }

  // ------------------------------------------------------------ any thread
  // Latches `why` (kCanceled or kTimeout) if nothing is latched and the task
  // is not published. True if this call latched it.
  bool TryLatch(TaskStatus why);
  // Withdraws slice i if it is QUEUED. `published` is set if this call
  // published the task.
  struct Step {
    bool moved = false;
    std::optional<TaskStatus> published;
  };
  Step TryWithdrawSlice(uint32_t i, SliceOutcome reason);
  // Withdraws every QUEUED slice (with the latched reason, which must be
  // set). Returns how many this call withdrew; `*published` (optional) gets
  // the status if this call published.
  uint32_t WithdrawQueued(std::optional<TaskStatus>* published);

  // ------------------------------------------------------------ owner only
  // QUEUED -> POSTING for the slice's current attempt. False if the task is
  // latched (then the caller should TryWithdrawSlice) or the slice is no
  // longer QUEUED.
  bool BeginPost(uint32_t i);
  void PostAccepted(uint32_t i);
  // POSTING -> QUEUED, then withdraws the slice if the task is latched.
  Step PostRejected(uint32_t i);
  // POSTED -> RESOLVED(kSuccess | kFailed).
  ABSL_ATTRIBUTE_ALWAYS_INLINE Step Resolve(uint32_t i, SliceOutcome outcome) {
    return Resolve(mutable_slice(i), outcome);
  }
  // The same for a slice the caller holds (one of this task's, from
  // mutable_slice: checked here by address).
  ABSL_ATTRIBUTE_ALWAYS_INLINE Step Resolve(Slice& s, SliceOutcome outcome);
  // POSTED -> QUEUED(next attempt), then withdraws if latched.
  Step Requeue(uint32_t i);

 private:
  Task();  // invalid task
  // Records slice i as final (failed or not); publishes on the last one.
  // Inline for the common case (a success that leaves slices unresolved:
  // one CAS that only decrements); the rest is OnSliceFinalSlow.
  std::optional<TaskStatus> OnSliceFinal(bool failed);
  std::optional<TaskStatus> OnSliceFinalSlow(bool failed);
  Step WithdrawIfLatched(uint32_t i);

  const TaskGeometry geometry_{};
  const uint32_t slice_count_ = 0;
  const base::Mutations* const mutations_ = nullptr;
  std::unique_ptr<Slice[]> owned_slices_;  // when no storage was given
  Slice* const slices_ = nullptr;
  std::shared_ptr<PublishHook> hook_;  // immutable once shared
  std::atomic<uint64_t> word_{0};
};

// The terminal status a task with this word publishes.
TaskStatus TerminalStatusOf(const TaskWord& w);

// The owner's per-slice transitions, inline (every post and completion).
inline bool Task::BeginPost(uint32_t i) {
  const bool repost_latched =
      mutations_ != nullptr && mutations_->on(base::Mutation::kEngineC2RepostLatched);
  if (latched().has_value() && !repost_latched) return false;
  Slice& s = mutable_slice(i);
  const SliceWord w = s.Load();
  if (w.state != SliceState::kQueued) return false;
  return s.TryBeginPost(w.attempt);
}

inline void Task::PostAccepted(uint32_t i) { mutable_slice(i).PostAccepted(); }

inline std::optional<TaskStatus> Task::OnSliceFinal(bool failed) {
  uint64_t raw = word_.load(std::memory_order_seq_cst);
  const bool unpublished =
      ((raw >> TaskWord::kPublishedShift) & 0xff) == static_cast<uint8_t>(TaskStatus::kPending);
  // Not the last slice, not failed, not published: nothing else changes
  // (a failed CAS, e.g. a latch meanwhile, goes the whole way).
  if (!failed && unpublished && (raw & TaskWord::kUnresolvedMask) > 1 &&
      word_.compare_exchange_strong(raw, raw - 1, std::memory_order_seq_cst)) {
    return std::nullopt;
  }
  return OnSliceFinalSlow(failed);
}

inline Task::Step Task::Resolve(Slice& s, SliceOutcome outcome) {
  FERRY_CHECK(&s >= slices_ && &s < slices_ + slice_count_);
  s.Resolve(outcome);
  Step step;
  step.moved = true;
  step.published = OnSliceFinal(outcome == SliceOutcome::kFailed);
  return step;
}

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_TASK_H_
