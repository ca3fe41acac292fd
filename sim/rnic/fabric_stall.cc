// sim/rnic/fabric_stall.cc: the stall kinds (FaultKind kHungQpRecover,
// kQpErrHold, kDupCqe; FabricConfig::stall and scripted): stragglers that
// make a timeout race a real completion.
// - hung_qp_recover: a QP entering RTS hangs (sends nothing, ignores
//   responses, does not flush) and recovers 1..hung_recover_ns_max later:
//   if it is still executing it retransmits what was not acknowledged (a
//   late success); if it was moved to ERR meanwhile it flushes then.
// - qp_err_hold: ibv_modify_qp to ERR of an executing QP returns success
//   but the QP keeps executing in its state (query_qp says so) until the
//   hold ends, 1..err_hold_ns_max later (what the field bug's probe did on
//   hardware with a pause before the local move to ERR). Any later modify
//   or a destroy ends the hold first.
// - dup_cqe: a CQE written to its CQ is written again 1..dup_cqe_ns_max
//   later (a device that misbehaves; verbs promise one CQE per WR). The
//   copy lands only if its QP is alive and its CQ has room for it beyond
//   everything its QPs can still produce, so it never overruns the CQ; it
//   is not in CqTruth::present (the engine's quota does not owe it a slot).
//
// What must stay true: every chance and duration comes from stall_prng_,
// drawn only when the rate is not zero (a plan without stall kinds is the
// run it was before they existed); a stall event applies only while its
// token is the QP's (a reset, a destroy or an earlier end cancels it).
#include <algorithm>
#include <utility>

#include "base/check.h"
#include "base/mutation.h"
#include "sim/rnic/fabric.h"
#include "sim/rnic/fabric_internal.h"

namespace ferry::sim {

using namespace fabric_internal;  // NOLINT(build/namespaces): the fabric's own helpers

bool Fabric::StallChance(Ratio r) { return r.num != 0 && stall_prng_.Chance(r); }

void Fabric::StartHang(uint32_t qi, Qp& q, uint64_t ns) {
  FERRY_CHECK(!q.hung);
  q.hung = true;
  q.hang_token = ++stall_tokens_;
  CountFault(FaultKind::kHungQpRecover);
  Push(EvType::kStall, clock_->NowNs() + std::max<uint64_t>(ns, 1), qi, kUnhang, q.hang_token, 0);
}

uint64_t Fabric::NextStallNs(uint64_t* script_ns, Ratio r, uint64_t max_ns) {
  if (*script_ns != 0) return std::exchange(*script_ns, 0);
  if (!StallChance(r)) return 0;
  return stall_prng_.Range(1, std::max<uint64_t>(1, max_ns));
}

bool Fabric::MaybeHoldErr(uint32_t qi, Qp& q, uint32_t mask) {
  if (q.hung) return false;  // a hung QP does nothing anyway
  const uint64_t ns =
      NextStallNs(&q.script_hold_ns, config_.stall.err_hold, config_.stall.err_hold_ns_max);
  if (ns == 0) return false;
  q.hold_token = ++stall_tokens_;
  q.held_mask = mask;
  CountFault(FaultKind::kQpErrHold);
  Push(EvType::kStall, clock_->NowNs() + ns, qi, kHoldEnd, q.hold_token, 0);
  return true;
}

void Fabric::EndErrHold(uint32_t qi, Qp& q) {
  FERRY_CHECK_NE(q.hold_token, 0u);
  q.hold_token = 0;
  const QpState cur = q.attr.qp_state;
  if (cur == QpState::kErr) return;  // it failed on its own meanwhile
  q.attr.qp_state = QpState::kErr;
  q.attr.cur_qp_state = QpState::kErr;
  EnterQpState(qi, q, cur, q.held_mask);
}

void Fabric::MaybeDupCqe(uint32_t qi, Qp& q, const Cqe& cqe) {
  if (cqe.dup) return;
  const uint64_t ns =
      NextStallNs(&q.script_dup_ns, config_.stall.dup_cqe, config_.stall.dup_cqe_ns_max);
  if (ns == 0) return;
  FERRY_CHECK_LT(dup_cqes_.size(), size_t{1} << 20);
  const uint64_t token = ++stall_tokens_;
  Cqe copy = cqe;
  copy.dup = true;
  dup_cqes_.emplace(token, copy);
  Push(EvType::kStall, clock_->NowNs() + ns, qi, kDupDeliver, token, 0);
}

void Fabric::PlaceDupCqe(const Cqe& cqe) {
  const Qp& q = *qps_[cqe.qp];
  if (!q.alive) return;
  const uint32_t ci = cqe.recv ? q.recv_cq : q.send_cq;
  Cq& c = cqs_[ci];
  if (!c.alive || c.errored) return;
  // Room beyond what the CQ's live QPs can still produce (their WRs not
  // completed and their CQEs on the way): a copy never causes an overrun.
  const uint64_t producible = ProducibleOf(ci);
  // Mutation: the copy takes any free entry (a later real CQE overruns).
  const bool any_entry = config_.mutations.on(base::Mutation::kSimDupCqeNoRoom);
  if (any_entry ? c.count == c.capacity : c.count + producible >= c.capacity) return;
  uint32_t slot = c.head + c.count;
  if (slot >= c.capacity) slot -= c.capacity;
  c.ring[slot] = cqe;
  ++c.count;
  ++c.dups;
  CountFault(FaultKind::kDupCqe);
  if (c.armed && (!c.solicited_only || cqe.wc.status != WcStatus::kSuccess)) {
    c.armed = false;
    channels_[c.channel].events.push_back(ci);
  }
}

void Fabric::OnStall(const Event& e) {
  Qp& q = *qps_[e.a];
  switch (static_cast<StallEv>(e.b)) {
    case kUnhang:
      if (!q.alive || !q.hung || q.hang_token != e.c) return;
      q.hung = false;
      q.hang_token = 0;
      if (q.attr.qp_state == QpState::kErr) {
        // The flush it owed (mutation: never; the WRs stay outstanding).
        if (!config_.mutations.on(base::Mutation::kSimUnhangWithoutFlush))
          FailAndFlush(e.a, q, kNoSeq, WcStatus::kWrFlushErr);
      } else if (Executing(q.attr.qp_state)) {
        // Responses that came during the hang were ignored: the retry
        // timer resends what is not acknowledged.
        q.last_progress_ns = clock_->NowNs();
        Kick(e.a);
        ArmTimer(e.a, q);
      }
      return;
    case kHoldEnd:
      if (!q.alive || q.hold_token != e.c) return;
      EndErrHold(e.a, q);
      return;
    case kDupDeliver: {
      auto it = dup_cqes_.find(e.c);
      FERRY_CHECK(it != dup_cqes_.end());
      const Cqe copy = it->second;
      dup_cqes_.erase(it);
      PlaceDupCqe(copy);
      return;
    }
  }
}

}  // namespace ferry::sim
