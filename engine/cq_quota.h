// engine/cq_quota.h: the CQE quota ledger of one CQ (docs/design.md section 4,
// "CQ quota"; contract C4).
//
// Every WR Ferry posts is signalled, so each posted WR will produce exactly
// one CQE on its QP's CQ. The ledger reserves one CQE of the CQ per WR
// before post_send and returns it when:
//   - that WR's CQE is polled (ReleaseOnCqe), or
//   - post_send rejected the WR (Unreserve), or
//   - its QP was destroyed successfully AND the owner then polled the CQ
//     empty once, in a poll that started after destroy returned
//     (OnDestroyResult + PollStarted/PollFinished). rxe can leave CQEs of a
//     destroyed QP in the CQ; the empty poll proves none is left.
// A QP whose destroy failed keeps its quota (it may still produce CQEs).
//
// QP lifecycle in the ledger:
//   AddQp -> LIVE --MarkRetiring--> RETIRING --destroy OK--> DESTROYED
//            LIVE ------------------destroy OK------------> DESTROYED
//            LIVE/RETIRING --destroy failed--> RETIRING (keeps its quota)
//            DESTROYED --empty poll started after destroy--> forgotten
// Quota held by RETIRING and DESTROYED QPs is zombie quota; past
// zombie_quota_max the owner must escalate (ZombieOverCap).
//
// Thread safety: none. One ledger per CQ, used only by the CQ's owner worker
// (C5), like the CQ itself.
// What must stay true (CheckInvariants, also checked after every operation
// when constructed with check_every_op):
// - 0 <= reserved <= capacity: Ferry's own traffic never overruns the CQ;
// - reserved == sum of per-QP held; zombie == sum held of RETIRING and
//   DESTROYED QPs; destroyed_ == the number of DESTROYED QPs (so an empty
//   poll with none, the common case, walks no QP list);
// - a QP's quota is returned once: after its release it is forgotten, and
//   late CQEs or repeated polls, sweeps or destroys change nothing.
// Test-only: base::Mutation::kEngineC4DoubleRelease keeps a released QP's
// entry, so the next empty poll returns its quota a second time; the
// invariant checks catch it (tests/engine/cq_quota_test.cc).
#ifndef FERRY_ENGINE_CQ_QUOTA_H_
#define FERRY_ENGINE_CQ_QUOTA_H_

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutation.h"
#include "hal/types.h"

namespace ferry::engine {

enum class QuotaQpState : uint8_t { kLive, kRetiring, kDestroyed };
std::string_view QuotaQpStateName(QuotaQpState s);

class CqQuota {
 private:
  struct Entry;

 public:
  // A caller's memo of where one QP's entry sits, kept with the QP (the
  // worker keeps one per data QP): Reserve and ReleaseOnCqe take it to skip
  // the lookup, once per chain and once per CQE. Valid while it names this
  // ledger and no QP was added or forgotten since it was filled (entries
  // move only then); otherwise the call looks up and fills it again.
  struct QpHint {
    const CqQuota* ledger = nullptr;
    uint64_t qp_id = 0;
    uint64_t layout = 0;
    Entry* entry = nullptr;
  };

  // `capacity`: the CQ's actual size (hal::CqInfo::cqe). `mutations` may be
  // null and must outlive the ledger. With `check_every_op`, every mutating
  // call FERRY_CHECKs CheckInvariants() (tests, sim).
  CqQuota(uint32_t capacity, uint32_t zombie_quota_max, const base::Mutations* mutations,
          bool check_every_op = false);
  // Not copyable or movable: a QpHint names its ledger by address.
  CqQuota(const CqQuota&) = delete;
  CqQuota& operator=(const CqQuota&) = delete;

  // Starts tracking `qp` (LIVE, nothing held). kInvalidArgument for an
  // invalid handle, kAlreadyExists if tracked (handles are never reused).
  absl::Status AddQp(hal::QpHandle qp);

  // Reserves n CQEs for WRs about to be posted on `qp`. kResourceExhausted
  // (nothing reserved) if that would pass the capacity; kNotFound for an
  // untracked QP; kFailedPrecondition unless LIVE (never post on a retiring
  // QP). n == 0 is a no-op.
  // The common case (a hinted, LIVE QP with room) is inline: once per chain.
  absl::Status Reserve(hal::QpHandle qp, uint32_t n, QpHint* hint = nullptr) {
    Entry* e = Find(qp.id, hint);
    if (e == nullptr || e->state != QuotaQpState::kLive ||
        reserved_ + int64_t{n} > int64_t{capacity_})
      return ReserveRefused(qp, n, e);
    e->held += n;
    reserved_ += n;
    AfterOp();
    return absl::OkStatus();
  }
  // Returns n reserved CQEs of WRs post_send rejected. kNotFound, or
  // kFailedPrecondition if n exceeds what `qp` holds (nothing changes).
  absl::Status Unreserve(hal::QpHandle qp, uint32_t n);
  // One CQE of `qp` was polled: returns one CQE. kNotFound when the QP is
  // not tracked (e.g. already forgotten) and kFailedPrecondition when it
  // holds nothing: nothing changes and the call is counted in stray_cqes().
  // The common case (a hinted QP holding quota) is inline: once per CQE.
  absl::Status ReleaseOnCqe(hal::QpHandle qp, QpHint* hint = nullptr) {
    return ReleaseOnCqes(qp, 1, hint);
  }
  // The same for n >= 1 CQEs of `qp` polled in one batch (the worker returns
  // a poll batch's success CQEs per QP at once). When `qp` holds fewer than
  // n nothing changes: kNotFound or kFailedPrecondition as above (counted
  // as one stray).
  absl::Status ReleaseOnCqes(hal::QpHandle qp, uint32_t n, QpHint* hint = nullptr) {
    Entry* e = Find(qp.id, hint);
    if (e == nullptr || e->held < int64_t{n} || n == 0) return StrayCqes(qp, n, e);
    e->held -= n;
    reserved_ -= n;
    if (IsZombie(e->state)) zombie_ -= n;
    AfterOp();
    return absl::OkStatus();
  }

  // `qp` started retiring (moved to ERR, or about to be destroyed): its
  // quota now counts as zombie. Idempotent; kNotFound if untracked.
  absl::Status MarkRetiring(hal::QpHandle qp);
  // Records the result of destroy_qp. destroyed == true: DESTROYED, its
  // remaining quota returns after the next empty poll that starts after
  // this call. false: RETIRING, quota kept. kNotFound if untracked;
  // kFailedPrecondition for a second successful destroy (nothing changes).
  absl::Status OnDestroyResult(hal::QpHandle qp, bool destroyed);

  // Bracket one PollCq of this CQ: PollStarted right before the call,
  // PollFinished right after with the number of CQEs it returned (each of
  // which the caller releases with ReleaseOnCqe). An empty poll forgets
  // every DESTROYED QP destroyed before `ticket` was taken and returns its
  // quota; those QPs are returned (ordered by handle) so the owner detaches
  // their WRs. kInvalidArgument for a ticket not from PollStarted.
  uint64_t PollStarted();
  absl::StatusOr<std::vector<hal::QpHandle>> PollFinished(uint64_t ticket, uint32_t polled);

  // CQ_ERR recovery (docs/design.md section 4): the CQ's CQEs are lost, so every
  // QP on it is retired and destroyed (destroy is the only evidence), then
  // the CQ is recreated. Call after that: every tracked QP must be
  // DESTROYED (else kFailedPrecondition naming one, nothing changes); all
  // are forgotten (returned, ordered by handle, for the owner to detach
  // their WRs) and the ledger adopts the new CQ's `capacity`
  // (kInvalidArgument if 0 or below zombie_quota_max).
  absl::StatusOr<std::vector<hal::QpHandle>> ResetForRecreatedCq(uint32_t capacity);

  // ------------------------------------------------------------ readers
  uint32_t capacity() const { return capacity_; }
  int64_t reserved() const { return reserved_; }
  int64_t free() const { return int64_t{capacity_} - reserved_; }
  int64_t zombie_held() const { return zombie_; }
  bool ZombieOverCap() const { return zombie_ > int64_t{zombie_quota_max_}; }
  // What `qp` holds; 0 when untracked.
  int64_t held(hal::QpHandle qp) const;
  bool tracked(hal::QpHandle qp) const { return qps_.contains(qp.id); }
  size_t tracked_qps() const { return qps_.size(); }
  uint64_t stray_cqes() const { return stray_cqes_; }
  // A DESTROYED QP waits for the empty poll that forgets it (a poll is due
  // even when the CQ holds nothing).
  bool AwaitsEmptyPoll() const;

  // OK, or kInternal describing the first broken invariant.
  absl::Status CheckInvariants() const;

 private:
  struct Entry {
    QuotaQpState state = QuotaQpState::kLive;
    int64_t held = 0;
    uint64_t destroy_seq = 0;  // seq_ when destroy returned OK
  };
  static bool IsZombie(QuotaQpState s) { return s != QuotaQpState::kLive; }
  // qps_'s entry for `qp_id`, or null. Per CQE this is the ledger's one
  // lookup, so a direct-mapped cache of entry pointers (256 lines, by a
  // Fibonacci hash of the id) sits in front of the btree (entries of a
  // btree move only when an entry is inserted or erased: every cached
  // pointer dies with `layout_` at each such change).
  Entry* Find(uint64_t qp_id) const;
  // Find through the caller's hint (null: none), which it refreshes. The
  // hint's hit is inline (once per chain and per CQE).
  Entry* Find(uint64_t qp_id, QpHint* hint) const {
    if (hint != nullptr && hint->ledger == this && hint->qp_id == qp_id && hint->layout == layout_)
      return hint->entry;
    return Refill(qp_id, hint);
  }
  Entry* Refill(uint64_t qp_id, QpHint* hint) const;
  // The errors of Reserve (nothing reserved) and ReleaseOnCqe (counted in
  // stray_cqes_); `e`: Find's result.
  absl::Status ReserveRefused(hal::QpHandle qp, uint32_t n, const Entry* e) const;
  absl::Status StrayCqes(hal::QpHandle qp, uint32_t n, const Entry* e);
  void LayoutChanged() { ++layout_; }
  void AfterOp() const {
    if (check_every_op_) CheckAfterOp();
  }
  void CheckAfterOp() const;
  void Forget(uint64_t qp_id, Entry& e);

  uint32_t capacity_;  // changes only in ResetForRecreatedCq
  const uint32_t zombie_quota_max_;
  const base::Mutations* const mutations_;
  const bool check_every_op_;
  absl::btree_map<uint64_t, Entry> qps_;  // by QP handle id (deterministic order)
  struct CacheLine {
    uint64_t qp_id = 0;  // 0: empty (0 is never a valid handle)
    uint64_t layout = 0;
    Entry* entry = nullptr;
  };
  static constexpr uint32_t kCacheLineBits = 8;
  static constexpr uint32_t kCacheLines = 1u << kCacheLineBits;
  uint64_t layout_ = 1;  // bumped by every insert or erase in qps_
  mutable std::array<CacheLine, kCacheLines> cache_{};
  int64_t reserved_ = 0;
  int64_t zombie_ = 0;
  size_t destroyed_ = 0;  // entries in state DESTROYED (they await an empty poll)
  uint64_t seq_ = 0;      // orders destroys and poll starts
  uint64_t stray_cqes_ = 0;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_CQ_QUOTA_H_
