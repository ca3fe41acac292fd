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

void Slice::OwnerMove(SliceWord from, SliceWord to) {
  // Only the owner moves a slice out of POSTING or POSTED (TryWithdraw acts
  // on QUEUED only), so this is a checked store, not a compare-and-swap: a
  // word that is not `from` here is a bug. Release: a reader that acquires
  // the new word sees what the owner did before.
  const SliceWord seen = SliceWord::Unpack(word_.load(std::memory_order_acquire));
  FERRY_CHECK_EQ(static_cast<int>(seen.state), static_cast<int>(from.state));
  FERRY_CHECK(seen.state == SliceState::kPosting || seen.state == SliceState::kPosted);
  FERRY_CHECK_EQ(seen.attempt, from.attempt);
  word_.store(SliceWord::Pack(to), std::memory_order_release);
}

bool Slice::TryBeginPost(uint16_t attempt) {
  uint64_t expected = SliceWord::Pack(SliceWord{SliceState::kQueued, SliceOutcome::kNone, attempt});
  const uint64_t desired =
      SliceWord::Pack(SliceWord{SliceState::kPosting, SliceOutcome::kNone, attempt});
  return word_.compare_exchange_strong(expected, desired, std::memory_order_seq_cst);
}

void Slice::PostRejected() {
  const SliceWord w = Load();
  FERRY_CHECK(w.state == SliceState::kPosting);
  OwnerMove(w, SliceWord{SliceState::kQueued, SliceOutcome::kNone, w.attempt});
}

void Slice::PostAccepted() {
  const SliceWord w = Load();
  FERRY_CHECK(w.state == SliceState::kPosting);
  OwnerMove(w, SliceWord{SliceState::kPosted, SliceOutcome::kNone, w.attempt});
}

void Slice::Resolve(SliceOutcome outcome) {
  FERRY_CHECK(outcome == SliceOutcome::kSuccess || outcome == SliceOutcome::kFailed);
  const SliceWord w = Load();
  FERRY_CHECK(w.state == SliceState::kPosted);
  OwnerMove(w, SliceWord{SliceState::kResolved, outcome, w.attempt});
}

void Slice::Requeue() {
  const SliceWord w = Load();
  FERRY_CHECK(w.state == SliceState::kPosted);
  FERRY_CHECK_LT(uint32_t{w.attempt} + 1, kSliceAttemptsMax);
  OwnerMove(
      w, SliceWord{SliceState::kQueued, SliceOutcome::kNone, static_cast<uint16_t>(w.attempt + 1)});
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
