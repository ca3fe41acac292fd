// tests/softroce/probe/hold_verbs.cc: HoldVerbs (hold_verbs.h).
#include "tests/softroce/probe/hold_verbs.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ferry::probe {

std::optional<QpRecord> HoldVerbs::NewestLiveRts() const {
  base::MutexLock l(&mu_);
  const QpRecord* best = nullptr;
  for (const auto& [h, r] : qps_)
    if (!r.destroyed && r.state == hal::QpState::kRts &&
        (best == nullptr || r.rts_seq > best->rts_seq))
      best = &r;
  if (best == nullptr) return std::nullopt;
  return *best;
}

std::optional<QpRecord> HoldVerbs::PairedWith(uint32_t remote_qp_num) const {
  base::MutexLock l(&mu_);
  for (const auto& [h, r] : qps_)
    if (!r.destroyed && r.rtr_mask != 0 && r.rtr_attr.dest_qp_num == remote_qp_num) return r;
  return std::nullopt;
}

std::optional<QpRecord> HoldVerbs::RecordOf(uint64_t handle) const {
  base::MutexLock l(&mu_);
  auto it = qps_.find(handle);
  if (it == qps_.end()) return std::nullopt;
  return it->second;
}

QpRecord* HoldVerbs::FindLocked(uint64_t handle) {
  auto it = qps_.find(handle);
  return it == qps_.end() ? nullptr : &it->second;
}

QpRecord* HoldVerbs::FindByNumLocked(uint32_t qp_num) {
  for (auto& [h, r] : qps_)
    if (r.qp_num == qp_num && !r.destroyed) return &r;
  return nullptr;
}

std::optional<hal::QpState> HoldVerbs::QueryState(uint32_t qp_num) {
  base::MutexLock l(&mu_);  // DestroyQp takes it too: the QP stays alive meanwhile
  QpRecord* r = FindByNumLocked(qp_num);
  if (r == nullptr) return std::nullopt;
  absl::StatusOr<hal::QpAttr> a = in_->QueryQp(r->qp);
  if (!a.ok()) return std::nullopt;
  return a->qp_state;
}

absl::Status HoldVerbs::HoldInInit(uint32_t qp_num) {
  base::MutexLock l(&mu_);
  QpRecord* r = FindByNumLocked(qp_num);
  if (r == nullptr) return absl::NotFoundError(absl::StrCat("hold: no live QP ", qp_num));
  if (r->init_mask == 0 || r->rtr_mask == 0 || r->rts_mask == 0)
    return absl::FailedPreconditionError(absl::StrCat("hold: QP ", qp_num, " never reached RTS"));
  absl::StatusOr<hal::QpAttr> now = in_->QueryQp(r->qp);
  if (!now.ok()) return now.status();
  hal::QpAttr reset;
  reset.qp_state = hal::QpState::kReset;
  if (absl::Status s = in_->ModifyQp(r->qp, reset, hal::kQpState); !s.ok()) return s;
  if (absl::Status s = in_->ModifyQp(r->qp, r->init_attr, r->init_mask); !s.ok()) return s;
  held_rq_psn_[qp_num] = now->rq_psn;
  return absl::OkStatus();
}

absl::Status HoldVerbs::ReleaseToRts(uint32_t qp_num) {
  base::MutexLock l(&mu_);
  QpRecord* r = FindByNumLocked(qp_num);
  auto psn = held_rq_psn_.find(qp_num);
  if (r == nullptr || psn == held_rq_psn_.end())
    return absl::NotFoundError(absl::StrCat("release: QP ", qp_num, " is not held"));
  hal::QpAttr rtr = r->rtr_attr;
  rtr.rq_psn = psn->second;
  held_rq_psn_.erase(psn);
  if (absl::Status s = in_->ModifyQp(r->qp, rtr, r->rtr_mask | hal::kQpRqPsn); !s.ok()) return s;
  return in_->ModifyQp(r->qp, r->rts_attr, r->rts_mask);
}

std::vector<uint64_t> HoldVerbs::LiveQpIds() const {
  base::MutexLock l(&mu_);
  std::vector<uint64_t> out;
  for (const auto& [h, r] : qps_)
    if (!r.destroyed) out.push_back(h);
  return out;
}

bool HoldVerbs::AllDestroyed(const std::vector<uint64_t>& ids) const {
  base::MutexLock l(&mu_);
  for (uint64_t id : ids) {
    auto it = qps_.find(id);
    if (it != qps_.end() && !it->second.destroyed) return false;
  }
  return true;
}

std::map<std::string, uint64_t> HoldVerbs::ErrorCounts() const {
  base::MutexLock l(&mu_);
  return error_counts_;
}

void HoldVerbs::ArmErrPause(uint64_t pause_ns_max) {
  base::MutexLock l(&mu_);
  armed_ = true;
  pause_ns_max_ = pause_ns_max;
}

bool HoldVerbs::WaitPaused(uint64_t timeout_ns) {
  base::MutexLock l(&mu_);
  if (!paused_) (void)cv_.WaitFor(&mu_, timeout_ns);
  return paused_;
}

void HoldVerbs::ReleasePause() {
  base::MutexLock l(&mu_);
  armed_ = false;
  paused_ = false;
  cv_.SignalAll();
}

uint32_t HoldVerbs::paused_qp_num() const {
  base::MutexLock l(&mu_);
  return paused_qp_num_;
}

void HoldVerbs::PauseIfArmed(uint32_t qp_num) {
  base::MutexLock l(&mu_);
  if (!armed_) return;
  armed_ = false;
  paused_ = true;
  paused_qp_num_ = qp_num;
  cv_.SignalAll();
  // Bounded by pause_ns_max in all, whatever wakes it meanwhile (the test's
  // WaitPaused signal, a spurious wakeup).
  const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(pause_ns_max_);
  for (auto now = std::chrono::steady_clock::now(); paused_ && now < end;
       now = std::chrono::steady_clock::now())
    (void)cv_.WaitFor(&mu_,
                      static_cast<uint64_t>(
                          std::chrono::duration_cast<std::chrono::nanoseconds>(end - now).count()));
  paused_ = false;
}

absl::StatusOr<uint32_t> HoldVerbs::PollCq(hal::CqHandle cq, absl::Span<hal::WorkCompletion> out) {
  absl::StatusOr<uint32_t> n = in_->PollCq(cq, out);
  if (!n.ok() || *n == 0) return n;
  base::MutexLock l(&mu_);
  for (uint32_t i = 0; i < *n; ++i) {
    if (out[i].status == hal::WcStatus::kSuccess) continue;
    ++error_counts_[std::string(hal::WcStatusName(out[i].status))];
    QpRecord* r = FindByNumLocked(out[i].qp_num);
    if (r == nullptr) continue;
    if (r->first_error == hal::WcStatus::kSuccess) r->first_error = out[i].status;
    if (out[i].status == hal::WcStatus::kWrFlushErr && r->flush_seq == 0) r->flush_seq = Tick();
  }
  return n;
}

absl::StatusOr<hal::QpInfo> HoldVerbs::CreateQp(hal::PdHandle pd, const hal::QpInitAttr& init) {
  absl::StatusOr<hal::QpInfo> info = in_->CreateQp(pd, init);
  if (!info.ok()) return info;
  base::MutexLock l(&mu_);
  QpRecord r;
  r.qp = info->qp;
  r.qp_num = info->qp_num;
  qps_[info->qp.id] = r;
  return info;
}

absl::Status HoldVerbs::ModifyQp(hal::QpHandle qp, const hal::QpAttr& attr, uint32_t mask) {
  const bool to_state = (mask & hal::kQpState) != 0;
  if (to_state && attr.qp_state == hal::QpState::kErr) {
    uint32_t num = 0;
    {
      base::MutexLock l(&mu_);
      if (QpRecord* r = FindLocked(qp.id); r != nullptr) num = r->qp_num;
    }
    PauseIfArmed(num);
  }
  absl::Status s = in_->ModifyQp(qp, attr, mask);
  if (!s.ok() || !to_state) return s;
  base::MutexLock l(&mu_);
  QpRecord* r = FindLocked(qp.id);
  if (r == nullptr) return s;
  r->state = attr.qp_state;
  switch (attr.qp_state) {
    case hal::QpState::kInit:
      r->init_attr = attr;
      r->init_mask = mask;
      break;
    case hal::QpState::kRtr:
      r->rtr_attr = attr;
      r->rtr_mask = mask;
      break;
    case hal::QpState::kRts:
      r->rts_attr = attr;
      r->rts_mask = mask;
      r->rts_seq = Tick();
      break;
    default:
      break;
  }
  return s;
}

absl::Status HoldVerbs::DestroyQp(hal::QpHandle qp) {
  base::MutexLock l(&mu_);
  absl::Status s = in_->DestroyQp(qp);
  if (s.ok())
    if (QpRecord* r = FindLocked(qp.id); r != nullptr) r->destroyed = true;
  return s;
}

}  // namespace ferry::probe
