// engine/slice.cc: the slice attempt state machine (see slice.h).
//
// What must stay true: every transition is one CAS on word_; owner-only
// transitions assert they won; a final word never changes again.
#include "engine/slice.h"

#include "base/check.h"

namespace ferry::engine {

std::string_view SliceStateName(SliceState s) {
  switch (s) {
    case SliceState::kQueued:
      return "QUEUED";
    case SliceState::kPosting:
      return "POSTING";
    case SliceState::kPosted:
      return "POSTED";
    case SliceState::kResolved:
      return "RESOLVED";
    case SliceState::kWithdrawn:
      return "WITHDRAWN";
  }
  return "?";
}

std::string_view SliceOutcomeName(SliceOutcome o) {
  switch (o) {
    case SliceOutcome::kNone:
      return "none";
    case SliceOutcome::kSuccess:
      return "success";
    case SliceOutcome::kFailed:
      return "failed";
    case SliceOutcome::kCanceled:
      return "canceled";
    case SliceOutcome::kTimeout:
      return "timeout";
  }
  return "?";
}

void Slice::PostRejected() {
  const SliceWord w = OwnerLoad(SliceState::kPosting);
  // seq_cst, as Requeue's: the caller then reads the latch (Task::PostRejected).
  OwnerStore(SliceWord{SliceState::kQueued, SliceOutcome::kNone, w.attempt},
             std::memory_order_seq_cst);
}

void Slice::Requeue() {
  const SliceWord w = OwnerLoad(SliceState::kPosted);
  FERRY_CHECK_LT(uint32_t{w.attempt} + 1, kSliceAttemptsMax);
  // seq_cst: the caller then reads the task's latch (Task::Requeue), and a
  // canceler latches and then sweeps QUEUED slices; with both seq_cst one
  // of them sees the other (a release store could pass the later load).
  OwnerStore(
      SliceWord{SliceState::kQueued, SliceOutcome::kNone, static_cast<uint16_t>(w.attempt + 1)},
      std::memory_order_seq_cst);
}

bool Slice::TryWithdraw(SliceOutcome reason) {
  FERRY_CHECK(reason == SliceOutcome::kFailed || reason == SliceOutcome::kCanceled ||
              reason == SliceOutcome::kTimeout);
  uint64_t expected = word_.load(std::memory_order_seq_cst);
  for (int spins = 0; spins < 4; ++spins) {  // bounded: the attempt can change at most by requeue
    const SliceWord w = SliceWord::Unpack(expected);
    if (w.state != SliceState::kQueued) return false;
    const uint64_t desired = SliceWord::Pack(SliceWord{SliceState::kWithdrawn, reason, w.attempt});
    if (word_.compare_exchange_strong(expected, desired, std::memory_order_seq_cst)) return true;
  }
  // Still contended after several rounds: the owner keeps moving it, which
  // means it is being posted; report "not withdrawn" (the caller's latch
  // makes the owner withdraw it instead, see task.h).
  return false;
}

}  // namespace ferry::engine
