// engine/slice.h: one slice of a task and its attempt state machine.
//
// A task (one request) is cut into slices of at most slice_size_bytes; each
// slice becomes one signalled WR per attempt. The slice word (one atomic
// 64-bit value) holds the attempt's state, its outcome and the attempt
// number; every contended state change is a compare-and-swap on it
// (docs/design.md section 4):
//
//   QUEUED(a) --TryBeginPost--> POSTING(a) --PostAccepted--> POSTED(a)
//   POSTING(a) --PostRejected--> QUEUED(a)        (post_send refused the WR)
//   POSTED(a) --Resolve(success|failed)--> RESOLVED(a)        final
//   POSTED(a) --Requeue--> QUEUED(a+1)   (attempt a resolved retryably: a
//                                          retry; never "pending" outside
//                                          the word)
//   QUEUED(a) --TryWithdraw(reason)--> WITHDRAWN(a)            final
//
// Leaving QUEUED is the only contended transition: the owner worker
// (TryBeginPost) races cancel / timeout (TryWithdraw), and exactly one CAS
// wins. POSTING and POSTED belong to the owner alone; the methods that leave
// them are a checked load and a store (FERRY_CHECK that the word is in the
// state they leave), since another state there is a bug, never a race. Withdraw reasons: CANCELED,
// TIMEOUT, or FAILED for a slice that could not be posted at all (no endpoint, out of retries): no
// WR exists for a withdrawn attempt, so it needs no evidence (C1).
//
// Thread safety: Load/TryWithdraw from any thread; every other mutator only
// on the owner worker. The owner-only counters below are plain fields.
// Memory order: the compare-and-swaps and the owner's stores back to
// QUEUED (Requeue, PostRejected) are seq_cst, so "requeue, then read the
// task latch" and "latch, then sweep QUEUED slices" cannot both miss
// (task.h); the owner's stores to POSTED and RESOLVED are release stores
// that readers acquire.
// Use slices through Task, which keeps the task's unresolved count in step.
#ifndef FERRY_ENGINE_SLICE_H_
#define FERRY_ENGINE_SLICE_H_

#include <atomic>
#include <cstdint>
#include <string_view>

#include "base/check.h"
#include "hal/types.h"

namespace ferry::engine {

enum class SliceState : uint8_t {
  kQueued = 0,
  kPosting = 1,
  kPosted = 2,
  kResolved = 3,
  kWithdrawn = 4,
};
std::string_view SliceStateName(SliceState s);

// Why an attempt is final. kNone while not final.
enum class SliceOutcome : uint8_t {
  kNone = 0,
  kSuccess = 1,   // RESOLVED by its own success CQE
  kFailed = 2,    // RESOLVED by an error CQE (non-retryable or out of
                  // retries), or WITHDRAWN because it could not be posted
  kCanceled = 3,  // WITHDRAWN by cancel
  kTimeout = 4,   // WITHDRAWN by the timeout sweep
};
std::string_view SliceOutcomeName(SliceOutcome o);

// The decoded slice word.
struct SliceWord {
  SliceState state = SliceState::kQueued;
  SliceOutcome outcome = SliceOutcome::kNone;
  uint16_t attempt = 0;

  bool final() const { return state == SliceState::kResolved || state == SliceState::kWithdrawn; }
  static constexpr uint64_t Pack(SliceWord w) {
    return uint64_t{static_cast<uint8_t>(w.state)} |
           (uint64_t{static_cast<uint8_t>(w.outcome)} << 8) | (uint64_t{w.attempt} << 16);
  }
  static SliceWord Unpack(uint64_t raw) {  // inline: several calls per slice
    const auto state = static_cast<uint8_t>(raw & 0xff);
    const auto outcome = static_cast<uint8_t>((raw >> 8) & 0xff);
    FERRY_CHECK_LE(state, static_cast<uint8_t>(SliceState::kWithdrawn));
    FERRY_CHECK_LE(outcome, static_cast<uint8_t>(SliceOutcome::kTimeout));
    FERRY_CHECK_EQ(raw >> 32, 0u);
    return SliceWord{static_cast<SliceState>(state), static_cast<SliceOutcome>(outcome),
                     static_cast<uint16_t>((raw >> 16) & 0xffff)};
  }
  friend bool operator==(const SliceWord&, const SliceWord&) = default;
};

inline constexpr uint32_t kSliceAttemptsMax = 1u << 16;

class Slice {
 public:
  Slice() = default;
  Slice(const Slice&) = delete;
  Slice& operator=(const Slice&) = delete;

  SliceWord Load() const { return SliceWord::Unpack(word_.load(std::memory_order_seq_cst)); }

  // QUEUED(attempt) -> POSTING(attempt). False if the slice is not QUEUED
  // in that attempt (withdrawn meanwhile). Owner only.
  bool TryBeginPost(uint16_t attempt);
  // POSTING(a) -> QUEUED(a). Owner only; CHECKs the slice is POSTING.
  void PostRejected();
  // POSTING(a) -> POSTED(a). Owner only; CHECKs.
  void PostAccepted();
  // POSTED(a) -> RESOLVED(a, outcome); outcome is kSuccess or kFailed.
  // Owner only; CHECKs.
  void Resolve(SliceOutcome outcome);
  // POSTED(a) -> QUEUED(a + 1). Owner only; CHECKs, and CHECKs that the
  // attempt counter stays below kSliceAttemptsMax.
  void Requeue();
  // QUEUED(any) -> WITHDRAWN(reason); reason is kFailed, kCanceled or
  // kTimeout. False when the slice is not QUEUED (someone else moved it).
  // Any thread.
  bool TryWithdraw(SliceOutcome reason);

  // Owner-only bookkeeping (not part of the word).
  uint32_t retries_used = 0;   // retryable failures charged (<= slice_retries)
  uint32_t reposts_used = 0;   // attempts after the first (<= slice_attempts_max)
  uint32_t wr_generation = 0;  // generation armed for the current post
  // What resolved the last attempt: its CQE's status, or a destroy's
  // evidence (why a slice failed, for Pending() readers and the oracle).
  hal::WcStatus last_status = hal::WcStatus::kSuccess;
  bool last_by_destroy = false;

 private:
  // Owner transitions out of POSTING or POSTED, which cannot race
  // (TryWithdraw acts on QUEUED only), so they are one load and one store,
  // not a compare-and-swap: OwnerLoad reads the word once and CHECKs it is
  // in state `expect` (a word in any other state here is a bug);
  // OwnerStore publishes the new word (release: a reader that acquires it
  // sees what the owner did before; the stores back to QUEUED are seq_cst,
  // see above).
  SliceWord OwnerLoad(SliceState expect) const;
  uint64_t OwnerLoadRaw(SliceState expect) const;
  void OwnerStore(SliceWord to, std::memory_order order = std::memory_order_release);

  std::atomic<uint64_t> word_{SliceWord::Pack(SliceWord{})};
};

// The owner's transitions of every post and completion, inline (out of
// line they were five calls per slice; docs/operations.md 3.2, session 38).
inline SliceWord Slice::OwnerLoad(SliceState expect) const {
  const SliceWord seen = SliceWord::Unpack(word_.load(std::memory_order_acquire));
  FERRY_CHECK_EQ(static_cast<int>(seen.state), static_cast<int>(expect));
  return seen;
}

inline void Slice::OwnerStore(SliceWord to, std::memory_order order) {
  word_.store(SliceWord::Pack(to), order);
}

inline bool Slice::TryBeginPost(uint16_t attempt) {
  uint64_t expected = SliceWord::Pack(SliceWord{SliceState::kQueued, SliceOutcome::kNone, attempt});
  const uint64_t desired =
      SliceWord::Pack(SliceWord{SliceState::kPosting, SliceOutcome::kNone, attempt});
  return word_.compare_exchange_strong(expected, desired, std::memory_order_seq_cst);
}

// The two transitions of every post and completion work on the raw word:
// one check that its state and outcome bytes are exactly (expect, kNone)
// and its high half is clear (what OwnerLoad's checks establish, as
// strictly), then the new state and outcome written over those bytes (the
// attempt kept).
inline uint64_t Slice::OwnerLoadRaw(SliceState expect) const {
  const uint64_t raw = word_.load(std::memory_order_acquire);
  FERRY_CHECK_EQ(raw & 0xffffffff0000ffffull,
                 SliceWord::Pack(SliceWord{expect, SliceOutcome::kNone, 0}));
  return raw;
}

inline void Slice::PostAccepted() {
  const uint64_t raw = OwnerLoadRaw(SliceState::kPosting);
  word_.store((raw & ~0xffffull) | SliceWord::Pack(SliceWord{SliceState::kPosted}),
              std::memory_order_release);
}

inline void Slice::Resolve(SliceOutcome outcome) {
  FERRY_CHECK(outcome == SliceOutcome::kSuccess || outcome == SliceOutcome::kFailed);
  const uint64_t raw = OwnerLoadRaw(SliceState::kPosted);
  word_.store((raw & ~0xffffull) | SliceWord::Pack(SliceWord{SliceState::kResolved, outcome, 0}),
              std::memory_order_release);
}

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_SLICE_H_
