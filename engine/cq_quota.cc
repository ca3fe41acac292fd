// engine/cq_quota.cc: the per-CQ quota ledger (see cq_quota.h).
//
// What must stay true: every change of an entry's `held` is mirrored in
// reserved_ (and in zombie_ for zombie entries) in the same call; a call that
// returns an error changed nothing.
#include "engine/cq_quota.h"

#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "base/check.h"

namespace ferry::engine {

std::string_view QuotaQpStateName(QuotaQpState s) {
  switch (s) {
    case QuotaQpState::kLive:
      return "LIVE";
    case QuotaQpState::kRetiring:
      return "RETIRING";
    case QuotaQpState::kDestroyed:
      return "DESTROYED";
  }
  return "?";
}

CqQuota::CqQuota(uint32_t capacity, uint32_t zombie_quota_max, const base::Mutations* mutations,
                 bool check_every_op)
    : capacity_(capacity),
      zombie_quota_max_(zombie_quota_max),
      mutations_(mutations),
      check_every_op_(check_every_op) {
  FERRY_CHECK_GT(capacity, 0u);
  FERRY_CHECK_LE(zombie_quota_max, capacity);
}

void CqQuota::CheckAfterOp() const {
  const absl::Status s = CheckInvariants();
  if (!s.ok()) {
    std::fprintf(stderr, "CqQuota invariant: %s\n", std::string(s.message()).c_str());
    FERRY_CHECK(s.ok());
  }
}

CqQuota::Entry* CqQuota::Find(uint64_t qp_id) const {
  // Fibonacci hashing: handle ids of one CQ's QPs can share their low bits
  // (QPs made round-robin over a worker's CQs), which a plain mask would map
  // to one line.
  CacheLine& line = cache_[(qp_id * 0x9E3779B97F4A7C15ull) >> (64 - kCacheLineBits)];
  if (line.qp_id == qp_id && line.layout == layout_) return line.entry;
  auto it = qps_.find(qp_id);
  if (it == qps_.end()) return nullptr;
  // const_cast: the cache hands out the entry a non-const caller owns.
  line = CacheLine{qp_id, layout_, const_cast<Entry*>(&it->second)};
  return line.entry;
}

CqQuota::Entry* CqQuota::Refill(uint64_t qp_id, QpHint* hint) const {
  if (hint == nullptr) return Find(qp_id);
  Entry* e = Find(qp_id);
  *hint = e == nullptr ? QpHint{} : QpHint{this, qp_id, layout_, e};
  return e;
}

absl::Status CqQuota::AddQp(hal::QpHandle qp) {
  if (!qp.valid()) return absl::InvalidArgumentError("CqQuota::AddQp: invalid QP handle");
  if (qps_.contains(qp.id))
    return absl::AlreadyExistsError(absl::StrFormat("CqQuota: QP %d already tracked", qp.id));
  qps_.emplace(qp.id, Entry{});
  LayoutChanged();
  AfterOp();
  return absl::OkStatus();
}

absl::Status CqQuota::ReserveRefused(hal::QpHandle qp, uint32_t n, const Entry* e) const {
  if (e == nullptr)
    return absl::NotFoundError(absl::StrFormat("CqQuota::Reserve: QP %d not tracked", qp.id));
  if (e->state != QuotaQpState::kLive)
    return absl::FailedPreconditionError(
        absl::StrFormat("CqQuota::Reserve: QP %d is %s", qp.id, QuotaQpStateName(e->state)));
  FERRY_CHECK_GT(reserved_ + int64_t{n}, int64_t{capacity_});
  return absl::ResourceExhaustedError(
      absl::StrFormat("CqQuota::Reserve: %d + %d CQEs exceed CQ size %d", reserved_, n, capacity_));
}

absl::Status CqQuota::Unreserve(hal::QpHandle qp, uint32_t n) {
  Entry* found = Find(qp.id);
  if (found == nullptr)
    return absl::NotFoundError(absl::StrFormat("CqQuota::Unreserve: QP %d not tracked", qp.id));
  Entry& e = *found;
  if (int64_t{n} > e.held)
    return absl::FailedPreconditionError(absl::StrFormat(
        "CqQuota::Unreserve: QP %d holds %d, asked to return %d", qp.id, e.held, n));
  e.held -= n;
  reserved_ -= n;
  if (IsZombie(e.state)) zombie_ -= n;
  AfterOp();
  return absl::OkStatus();
}

absl::Status CqQuota::StrayCqes(hal::QpHandle qp, uint32_t n, const Entry* found) {
  FERRY_CHECK_GT(n, 0u);  // a batch of none is the caller's bug
  ++stray_cqes_;
  if (found == nullptr)
    return absl::NotFoundError(
        absl::StrFormat("CqQuota: CQE of QP %d, which holds no quota here", qp.id));
  FERRY_CHECK_LT(found->held, int64_t{n});
  return absl::FailedPreconditionError(absl::StrFormat(
      "CqQuota: %u CQEs of QP %d beyond its reserved WRs (%d held)", n, qp.id, found->held));
}

absl::Status CqQuota::MarkRetiring(hal::QpHandle qp) {
  Entry* found = Find(qp.id);
  if (found == nullptr)
    return absl::NotFoundError(absl::StrFormat("CqQuota::MarkRetiring: QP %d not tracked", qp.id));
  Entry& e = *found;
  if (e.state == QuotaQpState::kLive) {
    e.state = QuotaQpState::kRetiring;
    zombie_ += e.held;
  }
  AfterOp();
  return absl::OkStatus();
}

bool CqQuota::AwaitsEmptyPoll() const { return destroyed_ > 0; }

absl::Status CqQuota::OnDestroyResult(hal::QpHandle qp, bool destroyed) {
  Entry* found = Find(qp.id);
  if (found == nullptr)
    return absl::NotFoundError(
        absl::StrFormat("CqQuota::OnDestroyResult: QP %d not tracked", qp.id));
  Entry& e = *found;
  if (e.state == QuotaQpState::kDestroyed)
    return absl::FailedPreconditionError(
        absl::StrFormat("CqQuota::OnDestroyResult: QP %d already destroyed", qp.id));
  if (e.state == QuotaQpState::kLive) {
    e.state = QuotaQpState::kRetiring;
    zombie_ += e.held;
  }
  if (destroyed) {
    e.state = QuotaQpState::kDestroyed;
    e.destroy_seq = ++seq_;
    ++destroyed_;
  } else if (mutations_ != nullptr &&
             mutations_->on(base::Mutation::kEngineC4ReleaseFailedDestroy)) {
    // The bug C4 forbids: a failed destroy is taken as the end of the QP's
    // CQEs and its quota returns, though the QP may still produce them.
    reserved_ -= e.held;
    zombie_ -= e.held;
    e.held = 0;
  }
  AfterOp();
  return absl::OkStatus();
}

uint64_t CqQuota::PollStarted() { return ++seq_; }

void CqQuota::Forget(uint64_t qp_id, Entry& e) {
  reserved_ -= e.held;
  zombie_ -= e.held;
  if (mutations_ != nullptr && mutations_->on(base::Mutation::kEngineC4DoubleRelease)) {
    // The bug C4 forbids: the entry stays, so the next empty poll returns
    // the same quota again. The caller erases nothing.
    e.destroy_seq = 0;
    return;
  }
  e.held = 0;
  FERRY_CHECK_GT(destroyed_, 0u);  // only DESTROYED entries are forgotten
  --destroyed_;
  qps_.erase(qp_id);
  LayoutChanged();
}

absl::StatusOr<std::vector<hal::QpHandle>> CqQuota::PollFinished(uint64_t ticket, uint32_t polled) {
  if (ticket == 0 || ticket > seq_)
    return absl::InvalidArgumentError(
        absl::StrFormat("CqQuota::PollFinished: ticket %d was never issued", ticket));
  std::vector<hal::QpHandle> released;
  // Nothing to forget without a DESTROYED entry: no walk over the QPs.
  if (polled != 0 || destroyed_ == 0) return released;
  std::vector<uint64_t> ids;
  for (const auto& [id, e] : qps_) {
    if (e.state == QuotaQpState::kDestroyed && e.destroy_seq < ticket) ids.push_back(id);
  }
  for (uint64_t id : ids) {
    Forget(id, qps_.find(id)->second);
    released.push_back(hal::QpHandle{id});
  }
  AfterOp();
  return released;
}

absl::StatusOr<std::vector<hal::QpHandle>> CqQuota::ResetForRecreatedCq(uint32_t capacity) {
  if (capacity == 0 || capacity < zombie_quota_max_)
    return absl::InvalidArgumentError(
        absl::StrFormat("CqQuota::ResetForRecreatedCq: capacity %d (zombie_quota_max %d)", capacity,
                        zombie_quota_max_));
  for (const auto& [id, e] : qps_) {
    if (e.state != QuotaQpState::kDestroyed)
      return absl::FailedPreconditionError(
          absl::StrFormat("CqQuota::ResetForRecreatedCq: QP %d is %s, not destroyed", id,
                          QuotaQpStateName(e.state)));
  }
  std::vector<hal::QpHandle> released;
  released.reserve(qps_.size());
  for (const auto& [id, e] : qps_) released.push_back(hal::QpHandle{id});
  qps_.clear();
  destroyed_ = 0;
  LayoutChanged();
  reserved_ = 0;
  zombie_ = 0;
  capacity_ = capacity;
  AfterOp();
  return released;
}

int64_t CqQuota::held(hal::QpHandle qp) const {
  const Entry* e = Find(qp.id);
  return e == nullptr ? 0 : e->held;
}

absl::Status CqQuota::CheckInvariants() const {
  if (reserved_ < 0)
    return absl::InternalError(absl::StrFormat("CqQuota: reserved %d < 0", reserved_));
  if (reserved_ > int64_t{capacity_})
    return absl::InternalError(
        absl::StrFormat("CqQuota: reserved %d > CQ size %d", reserved_, capacity_));
  int64_t sum = 0;
  int64_t zombie = 0;
  size_t destroyed = 0;
  for (const auto& [id, e] : qps_) {
    if (e.held < 0)
      return absl::InternalError(absl::StrFormat("CqQuota: QP %d holds %d < 0", id, e.held));
    sum += e.held;
    if (IsZombie(e.state)) zombie += e.held;
    if (e.state == QuotaQpState::kDestroyed) ++destroyed;
  }
  if (destroyed != destroyed_)
    return absl::InternalError(
        absl::StrFormat("CqQuota: %d DESTROYED QPs counted as %d", destroyed, destroyed_));
  if (sum != reserved_)
    return absl::InternalError(absl::StrFormat(
        "CqQuota: reserved %d != sum of per-QP held %d (quota returned twice or lost)", reserved_,
        sum));
  if (zombie != zombie_)
    return absl::InternalError(
        absl::StrFormat("CqQuota: zombie %d != sum of zombie QPs' held %d", zombie_, zombie));
  return absl::OkStatus();
}

}  // namespace ferry::engine
