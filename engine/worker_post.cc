// engine/worker_post.cc: posting slices as WR chains under the CQ quota
// ledgers
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

uint32_t Worker::GrowSlots() {
  FERRY_CHECK(free_slots_.empty());
  slots_.emplace_back();
  // Bit 63 of a wr_id marks a receive WR (wr_id.h).
  FERRY_CHECK_LT(slots_.size(), size_t{1} << 31);
  return static_cast<uint32_t>(slots_.size() - 1);
}

// PostAll in phases, per key with queued slices, until the step's budget of
// kPostsPerStepMax WRs is spent:
//   DropLatched     slices of latched tasks leave the queue unposted (C2)
//   OpenFor         no endpoint: fail the slices (shutdown) or start an
//                   active open
//   PostRound       one chain round on a READY endpoint:
//     TakeChain       up to kChainMax slices, each on a QP with room
//     PostQpChain     per QP: quota reserved for the whole chain (C4), WRs
//                     built (FillWr) and posted in one post_send
//     ReturnUnposted  what was not posted goes back to the queue front
void Worker::PostAll() {
  uint32_t budget = kPostsPerStepMax;
  // One clock reading for the pass: its rail checks and its posts' times.
  post_now_ns_ = env_->clock->NowNs();
  // Keys with queued slices, in key order; a key left empty goes idle.
  pending_.Walk([&](const Key& key, PendingQueue& dq, Store::Memo& memo) {
    if (!dq.empty()) PostKey(key, dq, memo, &budget);
  });
}

PendingQueue& Worker::QueueOf(const TaskRoute& route) {
  const std::string_view path = *route.peer_path;
  // Submit computed the key's hash to choose this owner (KeyHashOf); a
  // route a test built has none.
  const uint64_t hash =
      route.key_hash.has_value() ? *route.key_hash : pending_.HashOf(route.context, path);
  return pending_.Of(route.context, path, hash);
}

// PostAll's work for one key with queued slices.
void Worker::PostKey(const Key& key, PendingQueue& dq, Store::Memo& memo, uint32_t* budget) {
  if (dq.front().route->task->latched().has_value()) DropLatched(dq);
  if (!exited_.empty()) DropExitedFront(key, dq);  // no peer refused a REQ: nothing to drop
  if (dq.empty()) return;
  Endpoint* ep = Hit(key, *dq.front().route, &memo);
  if (ep == nullptr) {
    OpenFor(key, dq);
    return;
  }
  if (ep->state() != EndpointState::kReady || RailPausedAt(key.first, post_now_ns_)) return;
  if (BoundElsewhere(*ep, *dq.front().route)) {
    // The peer has restarted since this endpoint paired, or the slice's
    // descriptor is older than the endpoint; which one is live only the
    // peer can say. Once the endpoint is idle (TakeChain posts nothing
    // past such a slice) it retires and a fresh one names the front
    // slice's process: a refusal fails the slices bound to it
    // (FailBoundTo, then DropExitedFront for later ones). Retiring it
    // busy would flush the live slices and repeat (a review finding).
    if (ep->Outstanding() == 0) {
      ++stats_.other_incarnation_retires;
      Retire(ep, RetireReason::kSuperseded);
    }
    return;
  }
  if (!rails_[key.first].resume_counted) {
    rails_[key.first].resume_counted = true;
    ++stats_.rail_resumes;
  }
  CqQuota& ledger = LedgerOf(*ep);
  if (ledger.ZombieOverCap()) return;
  // A windowed range's slices wait for the peer's WIN on this endpoint.
  if (dq.front().route->window != 0 && !WindowsReady(key, ep, dq)) return;
  FERRY_CHECK_GT(ep->qps().size(), 0u);
  FERRY_CHECK_LE(ep->qps().size(), kQpsPerEndpointMax);
  // Bounded: every round posts at least one WR (budget) or stops.
  while (!dq.empty() && *budget > 0 && PostRound(key, ep, ledger, dq, budget)) {
  }
}

bool Worker::BoundElsewhere(const Endpoint& ep, const TaskRoute& route) const {
  return route.peer_incarnation != 0 && ep.peer_incarnation().has_value() &&
         *ep.peer_incarnation() != route.peer_incarnation &&
         !Mut(base::Mutation::kEngineC6AcceptOtherTarget);
}

void Worker::DropLatched(PendingQueue& dq) {
  if (Mut(base::Mutation::kEngineC2RepostLatched)) return;  // the bug: latched slices post
  while (!dq.empty() && dq.front().route->task->latched().has_value()) {
    const Pending p = dq.front();
    dq.pop_front();
    const TaskStatus why = *p.route->task->latched();
    p.route->task->TryWithdrawSlice(
        p.slice, why == TaskStatus::kCanceled ? SliceOutcome::kCanceled : SliceOutcome::kTimeout);
  }
}

void Worker::OpenFor(const Key& key, PendingQueue& dq) {
  if (shutdown_) {
    (void)FailAllUnposted(dq);  // no new endpoints during shutdown
    return;
  }
  if (RailPaused(key.first) || !StoreHasRoom(key.first)) return;
  auto made = NewEndpoint(key);
  if (!made.ok()) return;  // retried next step; the task timeout bounds it
  // The REQ names the peer process the front slice's rkeys belong to.
  (*made)->target_incarnation = dq.front().route->peer_incarnation;
  SendReq(*made);
  NoteEvent("req_sent", key, (*made)->generation(), 0);
}

uint32_t Worker::FailAllUnposted(PendingQueue& dq) {
  uint32_t withdrawn = 0;
  // Bounded by the queue's length.
  while (!dq.empty()) {
    const Pending p = dq.front();
    dq.pop_front();
    if (p.route->task->TryWithdrawSlice(p.slice, SliceOutcome::kFailed).moved) ++withdrawn;
  }
  return withdrawn;
}

bool Worker::PostRound(const Key& key, Endpoint* ep, CqQuota& ledger, PendingQueue& dq,
                       uint32_t* budget) {
  const uint32_t nqp = static_cast<uint32_t>(ep->qps().size());
  // Per QP, in this chain; only [0, nqp) is used (zeroing all 64 cost
  // more than the rest of a one-WR chain's bookkeeping).
  std::array<uint32_t, kQpsPerEndpointMax> taken;
  std::fill_n(taken.begin(), nqp, 0u);
  const uint32_t rr_start = ep->round_robin;
  const uint32_t budget_before = *budget;
  const uint32_t n = TakeChain(ep, ledger.free(), *budget, dq, taken);
  if (n == 0) return false;
  // One chain per QP, in round-robin order; a refused reservation or a short
  // post stops this round and the rounds after it.
  bool stop = false;
  for (uint32_t k = 0; k < nqp && !stop; ++k) {
    const uint32_t qi = (rr_start + k) % nqp;
    if (taken[qi] == 0) continue;
    stop = !PostQpChain(key, ep, qi, n, taken[qi], ledger, budget);
  }
  // Each WR posted took one of the budget; with all n posted every scratch
  // entry is empty already (PostQpChain moved its route to its slot).
  FERRY_CHECK_LE(budget_before - *budget, n);
  if (budget_before - *budget < n) ReturnUnposted(n, dq);
  return !stop;
}

uint32_t Worker::TakeChain(Endpoint* ep, int64_t quota_free, uint32_t budget, PendingQueue& dq,
                           std::array<uint32_t, kQpsPerEndpointMax>& taken) {
  // Up to kChainMax slices off the queue front, each assigned to a QP with
  // room, round robin (the same QPs one-by-one posting would pick). With no
  // free quota one slice still goes on, to be refused exactly as a single
  // post would be.
  const uint32_t nqp = static_cast<uint32_t>(ep->qps().size());
  const uint32_t take_max = static_cast<uint32_t>(
      std::min<int64_t>(std::min(kChainMax, budget), std::max<int64_t>(quota_free, 1)));
  FERRY_CHECK_LT(ep->round_robin, nqp);
  // Each QP's free WR slots, read once for the chain (only [0, nqp)).
  std::array<uint32_t, kQpsPerEndpointMax> room;
  for (uint32_t k = 0; k < nqp; ++k) {
    const size_t used = ep->qps()[k].fifo.size();
    room[k] = used < ep->wr_depth() ? static_cast<uint32_t>(ep->wr_depth() - used) : 0;
  }
  uint32_t n = 0;
  const TaskRoute* checked = nullptr;  // the last route that passed the C6 and window checks
  for (uint32_t guard = 0; guard < kPostsPerStepMax && n < take_max && !dq.empty(); ++guard) {
    uint32_t qi = nqp;
    uint32_t cand = ep->round_robin;
    for (uint32_t k = 0; k < nqp; ++k, cand = cand + 1 == nqp ? 0 : cand + 1) {
      if (taken[cand] < room[cand]) {
        qi = cand;
        ep->round_robin = cand + 1 == nqp ? 0 : cand + 1;
        break;
      }
    }
    if (qi == nqp) break;  // every QP is full
    // The chain stops before a slice whose rkeys are another process's
    // than the one this endpoint reaches (C6; PostAll retires the endpoint
    // once it is idle), or of a windowed range without its windows on this
    // endpoint yet (PostKey asks for them). Both answers depend on the
    // endpoint and the route only: asked once per run of one route.
    const Pending p = dq.front();
    if (p.route != checked) {
      if (BoundElsewhere(*ep, *p.route)) break;
      if (const uint64_t w = p.route->window;
          w != 0 && !HasPeerWindows(*ep, w) && !Mut(base::Mutation::kEngineMwPostBeforeWin))
        break;
      checked = p.route;
    }
    dq.pop_front();
    Task& task = *p.route->task;
    if (!task.BeginPost(p.slice)) {
      if (auto why = task.latched()) {
        task.TryWithdrawSlice(p.slice, *why == TaskStatus::kCanceled ? SliceOutcome::kCanceled
                                                                     : SliceOutcome::kTimeout);
      }
      continue;
    }
    ChainEntry& e = chain_[n];
    FERRY_CHECK(e.p.route == nullptr);  // scratch is empty between chains
    e.p = p;
    e.sl = &task.mutable_slice(p.slice);
    e.qi = qi;
    e.posted = false;
    chain_by_qp_[qi][taken[qi]] = static_cast<uint8_t>(n);
    ++taken[qi];
    ++n;
  }
  return n;
}

void Worker::FillWr(ChainEntry& e, Endpoint* ep, uint32_t qi, Context* rc, hal::SendWr& wr) {
  DataQp& q = ep->qps()[qi];
  Task& task = *e.p.route->task;
  e.slot = AllocSlot();
  Slot& s = slots_[e.slot];
  s.generation = NextGeneration(s.generation);
  // s.route is set once the WR is on the QP (PostQpChain).
  s.slice = e.p.slice;
  s.qp_uid = q.uid;
  s.ep = ep;
  s.qp_index = qi;
  s.qp = q.qp.get();
  s.in_use = true;
  s.window = 0;
  e.sl->wr_generation = s.generation;
  // Every field the chain varies is set; sg_list[1..] and imm_data keep the
  // zeroes they were constructed with.
  wr.wr_id = EncodeWrId(WrId{e.slot, s.generation});
  wr.opcode = e.p.route->send                  ? hal::Opcode::kSend
              : e.p.route->op == OpKind::kRead ? hal::Opcode::kRdmaRead
                                               : hal::Opcode::kRdmaWrite;
  wr.send_flags = hal::kSendSignaled;
  wr.num_sge = 1;
  if (e.p.route->lkey_epoch != rc->epoch()) {
    // The context was re-enabled since submit: its MRs have new keys.
    auto keys = rc->KeysOf(e.p.route->region);
    if (keys.ok()) e.p.route->lkey = keys->lkey;
    e.p.route->lkey_epoch = rc->epoch();
  }
  const auto [off, len] = task.SliceSpanBytes(e.p.slice);
  wr.sg_list[0] = hal::Sge{e.p.route->local_addr + off, len, e.p.route->lkey};
  // Small WRITEs and SENDs inline: their bytes go with the WQE.
  if (len <= q.max_inline_data && len <= cfg_.inline_bytes_max && e.p.route->op != OpKind::kRead) {
    wr.send_flags |= hal::kSendInline;
  }
  if (e.p.route->send) {  // a notification: no remote address
    wr.remote_addr = 0;
    wr.rkey = 0;
    return;
  }
  wr.remote_addr = e.p.route->remote_addr + off;
  // A windowed range: the window bound on this very QP for us.
  wr.rkey = e.p.route->window == 0 ? e.p.route->rkey : PeerWindowRkey(*ep, e.p.route->window, qi);
}

bool Worker::PostQpChain(const Key& key, Endpoint* ep, uint32_t qi, uint32_t n, uint32_t count,
                         CqQuota& ledger, uint32_t* budget) {
  DataQp& q = ep->qps()[qi];
  if (!ledger.Reserve(q.qp.get(), count, &q.quota_hint).ok()) return false;  // goes back below
  std::array<hal::SendWr, kChainMax>& wrs = chain_wrs_;
  // chain_ index of wrs[j], in take order (TakeChain's list for this QP).
  const std::array<uint8_t, kChainMax>& in_chain = chain_by_qp_[qi];
  Context* rc = env_->contexts[key.first];
  FERRY_CHECK_LE(count, kChainMax);
  const uint32_t m = count;
  for (uint32_t j = 0; j < m; ++j) {
    ChainEntry& e = chain_[in_chain[j]];
    FERRY_CHECK(in_chain[j] < n && e.qi == qi);
    FillWr(e, ep, qi, rc, wrs[j]);
  }
  const hal::PostResult r = env_->verbs->PostSend(q.qp.get(), absl::MakeConstSpan(wrs.data(), m));
  // WRs [0, posted) are on the QP; [posted, m) were not posted.
  const uint32_t posted = r.status.ok() ? m : r.first_bad;
  FERRY_CHECK_LE(posted, m);
  FERRY_CHECK(r.status.ok() || posted < m);
  for (uint32_t j = 0; j < posted; ++j) {
    ChainEntry& e = chain_[in_chain[j]];
    e.sl->PostAccepted();  // Task::PostAccepted, its slice looked up once
    q.fifo.push_back(e.slot);
    Slot& s = slots_[e.slot];
    e.p.route->posted.push_back(TaskRoute::PostedWr{e.slot, s.generation, q.uid});
    SetSlotRoute(s, e.p.route);
    e.p.route = nullptr;  // the scratch entry is empty from here
    NoteEvent("post", key, ep->generation(), q.qpn);
    e.posted = true;
    ++stats_.posted;
    if ((wrs[j].send_flags & hal::kSendInline) != 0) ++stats_.posted_inline;
    --*budget;
  }
  if (posted > 0) ep->last_used_ns = post_now_ns_;
  if (posted == m) return true;
  // ENOMEM or the QP is gone: the rest are returned, try again next step.
  FERRY_CHECK(ledger.Unreserve(q.qp.get(), m - posted).ok());
  for (uint32_t j = posted; j < m; ++j) {
    Slot& s = slots_[chain_[in_chain[j]].slot];
    s.in_use = false;  // its route was never set (above)
    FERRY_CHECK(s.route == nullptr);
    free_slots_.push_back(chain_[in_chain[j]].slot);
  }
  return false;
}

void Worker::ReturnUnposted(uint32_t n, PendingQueue& dq) {
  // Every slice not posted goes POSTING -> QUEUED and back to the queue front
  // in its old order, unless its latched task withdrew it.
  for (uint32_t i = n; i-- > 0;) {
    ChainEntry& e = chain_[i];
    if (!e.posted) {
      Task& task = *e.p.route->task;
      task.PostRejected(e.p.slice);
      if (task.slice(e.p.slice).Load().state == SliceState::kQueued) dq.push_front(e.p);
    }
    // The scratch holds no task between chains (a posted entry's route
    // moved to its slot).
    e.p.route = nullptr;
  }
}

}  // namespace ferry::engine
