// engine/worker_retire.cc: retire, async events, rail errors, DEVICE_FATAL
// parking, CQ_ERR recovery and reclaim
// (see worker.h for what must stay true).
#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "engine/accept.h"
#include "engine/worker.h"
#include "engine/worker_internal.h"
#include "engine/wr_id.h"

namespace ferry::engine {

using namespace worker_internal;  // NOLINT(build/namespaces): the worker's own helpers

// The context an async event names, if any this owner may read now: a
// context it has parked is skipped, since another owner may be closing and
// re-opening it on its thread (its old device's events mean nothing;
// ResumeContext queries what matters). One re-enabled since (a new epoch)
// is safe to read: the epoch's acquire orders it.
std::optional<uint32_t> Worker::ContextOfEvent(const hal::AsyncEvent& e) const {
  if (!e.context.valid()) return std::nullopt;  // a down context has no handle
  for (uint32_t i = 0; i < env_->contexts.size(); ++i) {
    if (rails_[i].parked && rails_[i].park_epoch == env_->contexts[i]->epoch()) continue;
    if (env_->contexts[i]->handle() == e.context) return i;
  }
  return std::nullopt;
}

void Worker::OnAsync(const hal::AsyncEvent& e) {
  const uint64_t now = env_->clock->NowNs();
  const std::optional<uint32_t> ctx = ContextOfEvent(e);
  switch (e.type) {
    case hal::AsyncEventType::kQpFatal:
    case hal::AsyncEventType::kQpReqErr:
    case hal::AsyncEventType::kQpAccessErr: {
      auto it = uid_by_qp_.find(e.qp.id);
      if (it == uid_by_qp_.end()) return;  // not ours
      Endpoint* ep = qp_by_uid_.at(it->second).ep;
      if (ep->state() == EndpointState::kConnecting || ep->state() == EndpointState::kReady) {
        // One endpoint failure event: counted once (the access error class
        // is the peer's doing and does not penalise the rail).
        if (e.type != hal::AsyncEventType::kQpAccessErr) RailError(ep->context(), now);
        Retire(ep, RetireReason::kQpFatal);
      }
      return;
    }
    case hal::AsyncEventType::kCqErr: {
      // The CQ's CQEs are lost: destroy is the only evidence for its WRs.
      // Retire every endpoint on it; once all its QPs are destroyed the CQ
      // is recreated and its ledger reset (RecoverErroredCqs).
      if (!ctx) return;
      for (uint32_t i = 0; i < env_->contexts[*ctx]->cqs_per_worker(); ++i) {
        if (env_->contexts[*ctx]->cq(id_, i) != e.cq) continue;
        errored_cqs_[e.cq.id] = {*ctx, i};
        NoteEvent("cq_err", Key{*ctx, ""}, e.cq.id, 0);
        for (Endpoint* ep : LiveList())
          if (ep->cq() == e.cq) Retire(ep, RetireReason::kCqError);
        for (auto& ep : retiring_)
          if (ep->cq() == e.cq) ep->ExpireDrain(now);
      }
      return;
    }
    case hal::AsyncEventType::kPortErr:
      if (!ctx) return;
      rails_[*ctx].port_down = true;
      NoteEvent("port_err", Key{*ctx, ""}, 0, 0);
      return;
    case hal::AsyncEventType::kPortActive: {
      if (!ctx) return;
      // Rebuild: endpoints made while the port was down (or before it)
      // are retired; new ones wait out the window in which RTR may fail.
      Rail& r = rails_[*ctx];
      r.port_down = false;
      r.paused_until_ns = std::max(r.paused_until_ns, now + cfg_.handshake_timeout_ns);
      NoteEvent("port_active", Key{*ctx, ""}, 0, 0);
      for (Endpoint* ep : LiveList())
        if (ep->context() == *ctx) Retire(ep, RetireReason::kSuperseded);
      return;
    }
    case hal::AsyncEventType::kGidChange:
      if (!ctx) return;
      NoteEvent("gid_change", Key{*ctx, ""}, 0, 0);
      for (Endpoint* ep : LiveList())
        if (ep->context() == *ctx) Retire(ep, RetireReason::kSuperseded);
      return;
    case hal::AsyncEventType::kDeviceFatal:
      if (!ctx) return;
      ParkForDeviceFatal(*ctx);
      return;
    default:
      return;
  }
}

void Worker::Retire(const Key& key, RetireReason why) {
  Endpoint* ep = Peek(key);
  if (ep != nullptr) Retire(ep, why);
}

void Worker::Retire(Endpoint* ep, RetireReason why) {
  const Key key{ep->context(), ep->peer_path()};
  std::optional<std::unique_ptr<Endpoint>> held = stores_[key.first]->Remove(StoreKey(key));
  FERRY_CHECK(held.has_value() && held->get() == ep);
  ep->BeginRetire(why, env_->clock->NowNs(), cfg_.drain_timeout_ns);
  CqQuota& ledger = Ledger(ep->cq());
  for (const DataQp& q : ep->qps()) FERRY_CHECK(ledger.MarkRetiring(q.qp.get()).ok());
  NoteEvent("ep_retire", key, ep->generation(), static_cast<uint64_t>(why));
  RevokeWindows(ep);  // the peer's rkeys refused from now on
  retiring_.push_back(std::move(*held));
  CheckZombies(ep->cq());
}

void Worker::CheckZombies(hal::CqHandle cq) {
  CqQuota& ledger = Ledger(cq);
  if (!ledger.ZombieOverCap()) return;
  // Escalate: destroy the retiring QPs on this CQ now instead of waiting
  // for their drain (a destroy is evidence too); posting on the CQ stops
  // until its zombie quota is back under the cap.
  ++stats_.zombie_escalations;
  const uint64_t now = env_->clock->NowNs();
  for (auto& ep : retiring_)
    if (ep->cq() == cq) ep->ExpireDrain(now);
  NoteEvent("zombie_escalate", Key{0, ""}, static_cast<uint64_t>(ledger.zombie_held()), cq.id);
}

void Worker::RailError(uint32_t ctx, uint64_t now) {
  Rail& r = rails_[ctx];
  ++stats_.rail_errors;
  if (now >= r.window_start_ns + cfg_.rail_error_window_ns || r.errors_in_window == 0) {
    r.window_start_ns = now;
    r.errors_in_window = 0;
  }
  ++r.errors_in_window;
  NoteEvent("rail_error", Key{ctx, ""}, r.errors_in_window, 0);
  if (r.errors_in_window < cfg_.rail_error_threshold) return;
  r.cooldown_ns = r.cooldown_ns == 0 ? cfg_.rail_cooldown_ns
                                     : std::min(r.cooldown_ns * 2, cfg_.rail_cooldown_ns_max);
  r.paused_until_ns = now + r.cooldown_ns;
  r.resume_counted = false;
  r.errors_in_window = 0;
  ++stats_.rail_pauses;
  NoteEvent("rail_pause", Key{ctx, ""}, r.cooldown_ns, 0);
}

// DEVICE_FATAL: retire the context's endpoints and park (stop touching
// its CQs, QPs and channel). The owner that completes the park count
// re-enables the context; closing the device is the evidence for every QP
// it held (C1), so nothing on it is destroyed one by one.
void Worker::ParkForDeviceFatal(uint32_t ctx) {
  Rail& r = rails_[ctx];
  if (r.parked) {
    // One park per fatal event. An event reaching here is the current
    // device's (the old one's died with it): when the context was re-enabled
    // since this owner parked and is fatal again before it resumed, it
    // resumes now and parks again, else the new park count never completes
    // and nobody re-enables (random-world seed 900974162: three fatal events
    // on h2's sim0, two owners still parked from the second).
    if (r.park_epoch == env_->contexts[ctx]->epoch() ||
        Mut(base::Mutation::kEngineParkIgnoresNewFatal))
      return;
    ResumeContext(ctx);
  }
  NoteEvent("device_fatal", Key{ctx, ""}, env_->contexts[ctx]->epoch(), 0);
  for (Endpoint* ep : LiveList())
    if (ep->context() == ctx) Retire(ep, RetireReason::kQpFatal);
  r.parked = true;
  r.park_epoch = env_->contexts[ctx]->epoch();
  r.must_reenable = env_->contexts[ctx]->Park();
}

void Worker::ServeParkedContexts() {
  const uint64_t now = env_->clock->NowNs();
  for (uint32_t ci = 0; ci < env_->contexts.size(); ++ci) {
    Rail& r = rails_[ci];
    if (!r.parked) continue;
    Context* c = env_->contexts[ci];
    // At shutdown: without the backoff when other owners may wait on it
    // (their endpoints on it resolve at their resume), not at all for a
    // context that never came up (it has none anywhere).
    const bool due = shutdown_ ? c->up() : now >= c->reenable_at_ns();
    if (r.must_reenable && due) {
      // Every owner is parked: nobody else touches this context now.
      const bool in_place = !c->up();  // its bring-up failed at construction
      if (absl::Status s = c->Reenable(); !s.ok()) {
        c->ReenableFailed(now, cfg_.rail_cooldown_ns, cfg_.rail_cooldown_ns_max);
        NoteEvent("ctx_reenable_failed", Key{ci, ""}, c->reenable_failures(),
                  c->reenable_at_ns() - now);
        continue;  // retried when its backoff ends
      }
      r.must_reenable = false;
      if (env_->observer != nullptr)
        for (uint32_t w = 0; w < cfg_.workers; ++w)
          for (uint32_t i = 0; i < c->cqs_per_worker(); ++i)
            env_->observer->OnCqCreated(w, c->cq(w, i));
      NoteEvent(in_place ? "ctx_up_in_place" : "ctx_reenabled", Key{ci, ""}, c->epoch() + 1, 0);
      r.reset_requested = false;
      c->Unpark();
      if (env_->context_reenabled) env_->context_reenabled(ci);
    }
    if (c->epoch() == r.park_epoch) continue;
    ResumeContext(ci);
  }
}

void Worker::ResumeContext(uint32_t ci) {
  Rail& r = rails_[ci];
  Context* c = env_->contexts[ci];
  FERRY_CHECK(r.parked && c->epoch() != r.park_epoch);
  // Re-enabled: the closed device's port events died with it (a link that
  // went down before the fatal event and came up during the re-open sends
  // no PORT_ACTIVE to the new context), so the rail's port state is
  // queried (random-world seed 100857: rail sim0 of h0 stayed "port down"
  // forever and its slices timed out). Queried now, at this owner's
  // resume, not taken from the re-enable: an owner that resumes later may
  // already have seen the new device's PORT_ACTIVE, and the state at the
  // re-enable would undo it (seed 7004057: h5's rail sim2 stayed down).
  if (!Mut(base::Mutation::kEngineKeepPortDownAfterReenable))
    r.port_down = Mut(base::Mutation::kEnginePortStateAtReenable) ? !c->port_active_at_enable()
                                                                  : !c->PortActiveNow();
  // Every QP this owner held on the context died with the
  // device (evidence); its WRs resolve as innocent flushes; the ledgers
  // of the old CQs are dropped and new ones made for the new CQs.
  for (auto& ep : retiring_) {
    if (ep->context() != ci) continue;
    for (DataQp& q : ep->qps()) {
      if (q.released) continue;
      if (!q.destroyed) q.qp.Forget();
      q.destroyed = true;
      ResolveFifoByEvidence(q, RetireReason::kCqError);
      q.released = true;
      q.quota_hint = CqQuota::QpHint{};  // its ledger is dropped below
    }
  }
  // The ledgers of this context's old CQs only: another context may be
  // parked too, its re-enable not yet run or failed (no current CQs), and
  // its old CQs' ledgers are needed until its own resume (campaign seed
  // 30030876: they were dropped here, and CQ_ERR recovery found none).
  if (!Mut(base::Mutation::kEngineResumeDropsOtherLedgers)) {
    std::vector<uint64_t> drop;
    for (const auto& [cq_id, ctx] : quota_context_)
      if (ctx == ci) drop.push_back(cq_id);
    for (uint64_t cq_id : drop) DropLedger(cq_id);
  } else {
    // Test-only: the old rule, every ledger but the other contexts' current CQs'.
    std::vector<uint64_t> keep;
    for (uint32_t cj = 0; cj < env_->contexts.size(); ++cj)
      if (cj != ci)
        for (uint32_t i = 0; i < env_->contexts[cj]->cqs_per_worker(); ++i)
          keep.push_back(env_->contexts[cj]->cq(id_, i).id);
    std::vector<uint64_t> drop;
    for (const auto& [cq_id, ledger] : quota_)
      if (std::find(keep.begin(), keep.end(), cq_id) == keep.end()) drop.push_back(cq_id);
    for (uint64_t cq_id : drop) DropLedger(cq_id);
  }
  for (auto it = errored_cqs_.begin(); it != errored_cqs_.end();) {
    it = it->second.first == ci ? errored_cqs_.erase(it) : std::next(it);
  }
  for (uint32_t i = 0; i < c->cqs_per_worker(); ++i)
    AddLedger(ci, c->cq(id_, i).id, NewLedger(c->cqe_capacity()));
  r.parked = false;
  NoteEvent("ctx_resumed", Key{ci, ""}, c->epoch(), 0);
}

// CQ_ERR recovery: once every QP on the errored CQ is destroyed, recreate
// the CQ and reset its ledger; the forgotten QPs' WRs resolve on the
// destroy (their CQEs are lost with the CQ).
void Worker::RecoverErroredCqs() {
  std::vector<uint64_t> done;
  for (const auto& [cq_id, where] : errored_cqs_) {
    // A parked context's device is being closed and re-opened: its resume
    // drops this entry (the close is the evidence for its QPs).
    if (rails_[where.first].parked && !Mut(base::Mutation::kEngineResumeDropsOtherLedgers))
      continue;
    auto qit = quota_.find(cq_id);
    FERRY_CHECK(qit != quota_.end());
    bool all_destroyed = true;
    for (const auto& ep : retiring_)
      if (ep->cq().id == cq_id)
        for (const DataQp& q : ep->qps()) all_destroyed = all_destroyed && q.destroyed;
    for (Endpoint* ep : LiveList()) all_destroyed = all_destroyed && ep->cq().id != cq_id;
    if (!all_destroyed) continue;
    Context* c = env_->contexts[where.first];
    if (!c->RecreateCq(id_, where.second).ok()) continue;  // retried next sweep
    const hal::CqHandle fresh = c->cq(id_, where.second);
    if (env_->observer != nullptr) env_->observer->OnCqCreated(id_, fresh);
    auto forgotten = qit->second->ResetForRecreatedCq(c->cqe_capacity());
    FERRY_CHECK(forgotten.ok());
    std::unique_ptr<CqQuota> ledger = std::move(qit->second);
    DropLedger(cq_id);
    AddLedger(where.first, fresh.id, std::move(ledger));
    for (hal::QpHandle qp : *forgotten) DetachDestroyed(qp);
    ++stats_.cq_recreated;
    NoteEvent("cq_recreated", Key{where.first, ""}, cq_id, fresh.id);
    done.push_back(cq_id);
  }
  for (uint64_t id : done) errored_cqs_.erase(id);
}

// ------------------------------------------------------------------ reclaim
void Worker::Reclaim() {
  for (auto& ep : retiring_) {
    if (ep->state() != EndpointState::kRetiring) continue;
    bool done = true;
    for (const DataQp& q : ep->qps()) done = done && q.destroyed && q.released;
    if (!done) continue;
    ep->MarkDestroyed();
    ++stats_.endpoints_destroyed;
    NoteEvent("ep_destroyed", Key{ep->context(), ep->peer_path()}, ep->generation(), 0);
    for (const DataQp& q : ep->qps()) {
      uid_by_qp_.erase(qp_by_uid_.at(q.uid).qp.id);
      qp_by_uid_.erase(q.uid);
    }
  }
  retiring_.erase(std::remove_if(retiring_.begin(), retiring_.end(),
                                 [](const std::unique_ptr<Endpoint>& ep) {
                                   return ep->state() == EndpointState::kDestroyed;
                                 }),
                  retiring_.end());
}

}  // namespace ferry::engine
