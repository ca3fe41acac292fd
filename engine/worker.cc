// engine/worker.cc: the owner worker's step: inbox, handshake and accept
// table, posting under CQ quota, polling, deadlines, retire and reclaim
// (see worker.h for what must stay true).
#include "engine/worker.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/fnv1a.h"
#include "engine/wr_id.h"

namespace ferry::engine {

namespace {
constexpr uint32_t kPollBatch = 32;
constexpr size_t kInboxDrainMax = 256;
constexpr uint32_t kPostsPerStepMax = 1024;

std::string AddressOf(std::string_view peer_path) {
  return std::string(peer_path.substr(0, peer_path.find('@')));
}
std::string NicOf(std::string_view peer_path) {
  const size_t at = peer_path.find('@');
  return at == std::string_view::npos ? std::string() : std::string(peer_path.substr(at + 1));
}
bool NonRetryable(hal::WcStatus s) {
  return s == hal::WcStatus::kRemAccessErr || s == hal::WcStatus::kLocProtErr ||
         s == hal::WcStatus::kRemInvReqErr || s == hal::WcStatus::kLocLenErr;
}
PeerInfo PeerFrom(const WireMsg& m) {
  PeerInfo p;
  p.incarnation = m.incarnation;
  p.generation = m.generation;
  p.qpns = m.qpns;
  p.psns = m.psns;
  p.gid.raw = m.gid;
  p.lid = m.lid;
  p.mtu = static_cast<hal::Mtu>(m.mtu);
  return p;
}
}  // namespace

uint32_t OwnerOf(std::string_view local_nic, std::string_view peer_path, uint32_t workers) {
  FERRY_CHECK_GT(workers, 0u);
  uint64_t h = base::kFnv1a64Offset;
  h = base::Fnv1a64Update(h, reinterpret_cast<const unsigned char*>(local_nic.data()),
                          local_nic.size());
  h = base::Fnv1a64UpdateU64(h, 0);
  h = base::Fnv1a64Update(h, reinterpret_cast<const unsigned char*>(peer_path.data()),
                          peer_path.size());
  return static_cast<uint32_t>(h % workers);
}

Worker::Worker(uint32_t id, WorkerEnv* env) : id_(id), env_(env), cfg_(*env->config) {
  FERRY_CHECK_LT(id_, cfg_.workers);
  for (Context* c : env_->contexts) {
    for (uint32_t i = 0; i < c->cqs_per_worker(); ++i) {
      Quota& q = quota_[c->cq(id_, i).id];
      q.capacity = c->cqe_capacity();
    }
  }
}

Worker::~Worker() = default;

void Worker::Push(InboxItem item) {
  absl::MutexLock l(&mu_);
  inbox_.push_back(std::move(item));
}

size_t Worker::InboxSize() const {
  absl::MutexLock l(&mu_);
  return inbox_.size();
}

WaitSet Worker::Step(const PhaseOrder& order) {
  for (Phase p : order) {
    switch (p) {
      case Phase::kInbox:
        DrainInbox();
        break;
      case Phase::kPost:
        PostAll();
        break;
      case Phase::kPoll:
        PollAll();
        break;
      case Phase::kSweep:
        Sweep();
        break;
      case Phase::kReclaim:
        Reclaim();
        break;
    }
  }
  WaitSet ws;
  const uint64_t now = env_->clock->NowNs();
  auto consider = [&ws](std::optional<uint64_t> t) {
    if (t && (!ws.deadline_ns || *t < *ws.deadline_ns)) ws.deadline_ns = t;
  };
  for (const auto& [key, ep] : live_) {
    if (ep->state() == EndpointState::kConnecting) {
      consider(ep->next_resend_ns);
      consider(ep->handshake_deadline_ns);
    }
    if (ep->state() == EndpointState::kReady && ep->Outstanding() > 0) ws.poll_now = true;
    auto it = pending_.find(key);
    if (it != pending_.end() && !it->second.empty() && ep->state() == EndpointState::kReady) {
      for (const DataQp& q : ep->qps())
        if (q.fifo.size() < ep->wr_depth() && QuotaOf(ep->cq()).used < QuotaOf(ep->cq()).capacity)
          ws.work_now = true;
    }
  }
  for (const auto& [key, dq] : pending_)
    if (!dq.empty() && live_.find(key) == live_.end()) ws.work_now = true;
  for (const auto& ep : retiring_) {
    consider(ep->NextRetireNs());
    bool reclaimable = true;
    for (const DataQp& q : ep->qps()) {
      if (!q.released && (q.destroyed || !q.fifo.empty())) ws.poll_now = true;
      reclaimable = reclaimable && q.destroyed && q.released;
    }
    // Released after this step's reclaim phase ran (phases are permuted):
    // the next step reclaims it, so the worker must not sleep.
    if (reclaimable) ws.work_now = true;
  }
  for (const auto& t : tasks_)
    if (!IsTerminal(t->task->status()) && !t->task->latched())
      consider(t->task->geometry().deadline_ns);
  if (ws.deadline_ns && *ws.deadline_ns <= now) ws.work_now = true;
  for (Context* c : env_->contexts) ws.channels.push_back(c->channel(id_));
  return ws;
}

bool Worker::ShutDown() const { return shutdown_ && live_.empty() && retiring_.empty(); }

uint64_t Worker::QuotaUsed() const {
  uint64_t n = 0;
  for (const auto& [cq, q] : quota_) n += q.used;
  return n;
}

const Endpoint* Worker::Find(uint32_t context, std::string_view peer_path) const {
  auto it = live_.find(Key{context, std::string(peer_path)});
  return it == live_.end() ? nullptr : it->second.get();
}

std::vector<std::string> Worker::PendingReasons() const {
  std::vector<std::string> out;
  for (const auto& ep : retiring_) {
    for (const DataQp& q : ep->qps()) {
      if (q.destroyed && q.released) continue;
      out.push_back(absl::StrCat(
          "worker ", id_, " endpoint ", ep->peer_path(), " gen ", ep->generation(), " qpn ", q.qpn,
          ": retiring (", std::string(RetireReasonName(ep->retire_reason())), "), ", q.fifo.size(),
          " WRs without evidence, ", q.destroy_failures, " failed destroys"));
    }
  }
  for (const auto& [key, ep] : live_)
    out.push_back(absl::StrCat("worker ", id_, " endpoint ", key.second, " gen ", ep->generation(),
                               ": ", std::string(EndpointStateName(ep->state()))));
  return out;
}

void Worker::PollFromOutsideForMutation() {
  if (env_->contexts.empty()) return;
  std::array<hal::WorkCompletion, 1> wc;
  (void)env_->verbs->PollCq(env_->contexts[0]->cq(id_, 0), absl::MakeSpan(wc.data(), 0));
}

void Worker::NoteEvent(std::string_view kind, const Key& key, uint64_t a, uint64_t b) {
  if (env_->observer != nullptr)
    env_->observer->OnEvent(id_, kind, NicName(key.first) + "|" + key.second, a, b);
}

std::string Worker::NicName(uint32_t ctx) const { return env_->contexts[ctx]->device(); }

std::optional<uint32_t> Worker::ContextOfNic(std::string_view nic) const {
  for (uint32_t i = 0; i < env_->contexts.size(); ++i)
    if (env_->contexts[i]->device() == nic) return i;
  return std::nullopt;
}

Worker::Quota& Worker::QuotaOf(hal::CqHandle cq) {
  auto it = quota_.find(cq.id);
  FERRY_CHECK(it != quota_.end());
  return it->second;
}

// ------------------------------------------------------------------ inbox
void Worker::DrainInbox() {
  std::deque<InboxItem> items;
  {
    absl::MutexLock l(&mu_);
    const size_t n = std::min(inbox_.size(), kInboxDrainMax);
    for (size_t i = 0; i < n; ++i) {
      items.push_back(std::move(inbox_.front()));
      inbox_.pop_front();
    }
  }
  for (InboxItem& item : items) {
    if (auto* s = std::get_if<InboxSubmit>(&item)) {
      OnSubmit(s->route);
    } else if (auto* w = std::get_if<InboxWire>(&item)) {
      OnWire(w->msg, w->from);
    } else if (auto* a = std::get_if<InboxAsync>(&item)) {
      OnAsync(a->event);
    } else {
      shutdown_ = true;
      std::vector<Key> keys;
      for (const auto& [key, ep] : live_) keys.push_back(key);
      for (const Key& k : keys) Retire(k, RetireReason::kShutdown);
    }
  }
}

void Worker::OnSubmit(const std::shared_ptr<TaskRoute>& route) {
  tasks_.push_back(route);
  Key key{route->context, route->peer_path};
  auto& dq = pending_[key];
  for (uint32_t i = 0; i < route->task->slice_count(); ++i) dq.push_back(Pending{route, i});
}

void Worker::OnWire(const WireMsg& m, const std::string& from) {
  switch (m.type) {
    case WireType::kReq:
      OnReq(m, from);
      break;
    case WireType::kRep:
      OnRep(m, from);
      break;
    case WireType::kRtu:
      OnRtu(m, from);
      break;
    default:
      break;  // descriptors are the listener's
  }
}

absl::StatusOr<Endpoint*> Worker::NewEndpoint(const Key& key) {
  Context* c = env_->contexts[key.first];
  uint32_t& gen = last_generation_[key];
  gen = NextGeneration(gen);
  QpParams p;
  p.pd = c->pd();
  p.cq = c->cq(id_, 0);
  p.wr_depth = cfg_.wr_depth;
  p.port_num = c->port_num();
  p.sgid_index = static_cast<uint8_t>(c->gid_index());
  p.local_mtu = c->active_mtu();
  p.timeout_exp = cfg_.qp_timeout_exp;
  p.retry_cnt = cfg_.qp_retry_cnt;
  p.rnr_retry = cfg_.qp_rnr_retry;
  auto ep = Endpoint::Create(env_->verbs, env_->ledger, env_->entropy, p, cfg_.qps_per_endpoint,
                             key.first, key.second, gen, &next_qp_uid_);
  if (!ep.ok()) return ep.status();
  Endpoint* raw = ep->get();
  for (uint32_t i = 0; i < raw->qps().size(); ++i) {
    qp_by_uid_[raw->qps()[i].uid] = QpRef{raw, i, 0};
    if (env_->observer != nullptr) env_->observer->OnQpCreated(id_, raw->qps()[i].qp.get());
  }
  const uint64_t now = env_->clock->NowNs();
  raw->handshake_deadline_ns =
      now + cfg_.handshake_timeout_ns * (uint64_t{cfg_.handshake_retries} + 1);
  raw->next_resend_ns = now + cfg_.handshake_timeout_ns;
  raw->last_used_ns = now;
  FERRY_CHECK(live_.find(key) == live_.end());
  live_[key] = std::move(*ep);
  NoteEvent("ep_create", key, gen, 0);
  return raw;
}

void Worker::SendRep(Endpoint* ep, const std::string& peer_addr, const std::string& peer_nic,
                     uint32_t echo_generation) {
  Context* c = env_->contexts[ep->context()];
  WireMsg rep;
  rep.type = WireType::kRep;
  rep.incarnation = env_->incarnation;
  rep.generation = ep->generation();
  rep.echo_generation = echo_generation;
  rep.sender_nic = c->device();
  rep.target_nic = peer_nic;
  rep.qpns = ep->qpns();
  rep.psns = ep->psns();
  rep.gid = c->gid().raw;
  rep.lid = c->lid();
  rep.mtu = static_cast<uint8_t>(c->active_mtu());
  ep->rep_bytes = EncodeWire(rep);
  (void)env_->net->Send(peer_addr, ep->rep_bytes);
  NoteEvent("rep_sent", Key{ep->context(), ep->peer_path()}, ep->generation(), echo_generation);
}

void Worker::SendReply(const std::string& from, const WireMsg& req, WireStatus status) {
  WireMsg rep;
  rep.type = WireType::kRep;
  rep.status = status;
  rep.incarnation = env_->incarnation;
  rep.echo_generation = req.generation;
  rep.sender_nic = req.target_nic;
  rep.target_nic = req.sender_nic;
  (void)env_->net->Send(from, EncodeWire(rep));
}

void Worker::Accept(Endpoint* ep, const WireMsg& req, const std::string& from) {
  absl::Status s = ep->ToRtr(PeerFrom(req));
  if (!s.ok()) {
    SendReply(from, req, WireStatus::kError);
    Retire(ep, RetireReason::kHandshakeFailed);
    return;
  }
  SendRep(ep, from, req.sender_nic, req.generation);
}

void Worker::OnReq(const WireMsg& m, const std::string& from) {
  const std::optional<uint32_t> ctx = ContextOfNic(m.target_nic);
  if (!ctx || m.qpns.size() != cfg_.qps_per_endpoint) {
    SendReply(from, m, WireStatus::kError);
    return;
  }
  const Key key{*ctx, from + "@" + m.sender_nic};
  NoteEvent("req_recv", key, m.incarnation, m.generation);
  auto it = live_.find(key);
  Endpoint* ep = it == live_.end() ? nullptr : it->second.get();
  if (ep != nullptr) {
    const std::optional<PeerInfo>& rec = ep->peer();
    if (rec.has_value()) {
      const bool same = rec->incarnation == m.incarnation && rec->generation == m.generation &&
                        rec->qpns == m.qpns;
      const bool newer = rec->incarnation != m.incarnation || m.generation > rec->generation;
      if (same) {
        // Duplicate: the same REP, nothing changes.
        NoteEvent("dup_req", key, m.incarnation, m.generation);
        if (ep->rep_bytes.empty()) {
          SendRep(ep, from, m.sender_nic, m.generation);
        } else {
          (void)env_->net->Send(from, ep->rep_bytes);
        }
        return;
      }
      if (!newer && !Mut(base::Mutation::kEngineC6AcceptStale)) {
        NoteEvent("stale_req", key, m.incarnation, m.generation);
        SendReply(from, m, WireStatus::kStale);
        return;
      }
      // New incarnation or generation: retire ours, serve the REQ fresh.
      Retire(ep, RetireReason::kSuperseded);
      ep = nullptr;
    } else {
      // CONNECTING as the active side, nothing recorded: simultaneous open.
      FERRY_CHECK(ep->state() == EndpointState::kConnecting);
      Accept(ep, m, from);
      return;
    }
  }
  if (shutdown_) {
    SendReply(from, m, WireStatus::kError);
    return;
  }
  auto fresh = NewEndpoint(key);
  if (!fresh.ok()) {
    SendReply(from, m, WireStatus::kError);
    return;
  }
  Accept(*fresh, m, from);
}

void Worker::OnRep(const WireMsg& m, const std::string& from) {
  const std::optional<uint32_t> ctx = ContextOfNic(m.target_nic);
  if (!ctx) return;
  const Key key{*ctx, from + "@" + m.sender_nic};
  NoteEvent("rep_recv", key, m.generation, m.echo_generation);
  auto it = live_.find(key);
  if (it == live_.end() || it->second->generation() != m.echo_generation) {
    NoteEvent("rep_dropped", key, m.generation, m.echo_generation);
    return;
  }
  Endpoint* ep = it->second.get();
  if (ep->state() == EndpointState::kReady) {
    // Our RTU was lost: the peer resends its REP. Resend the RTU only if
    // the REP is the one we applied.
    if (m.status == WireStatus::kOk && ep->peer() && ep->peer()->generation == m.generation &&
        ep->peer()->incarnation == m.incarnation) {
      WireMsg rtu;
      rtu.type = WireType::kRtu;
      rtu.incarnation = env_->incarnation;
      rtu.generation = ep->generation();
      rtu.echo_generation = m.generation;
      rtu.sender_nic = NicName(ep->context());
      rtu.target_nic = m.sender_nic;
      (void)env_->net->Send(from, EncodeWire(rtu));
      NoteEvent("rtu_sent", key, ep->generation(), m.generation);
    }
    return;
  }
  if (ep->state() != EndpointState::kConnecting) return;
  if (m.status != WireStatus::kOk || m.qpns.size() != ep->qps().size()) {
    Retire(ep, RetireReason::kHandshakeFailed);
    return;
  }
  const PeerInfo peer = PeerFrom(m);
  if (ep->peer().has_value()) {
    // Simultaneous open: we accepted the peer's REQ already; its REP must
    // name the same QPs (else the peer moved on: start over).
    if (ep->peer()->qpns != peer.qpns || ep->peer()->incarnation != peer.incarnation) {
      Retire(ep, RetireReason::kHandshakeFailed);
      return;
    }
  } else if (!ep->ToRtr(peer).ok()) {
    Retire(ep, RetireReason::kHandshakeFailed);
    return;
  }
  if (!ep->ToRts().ok()) {
    Retire(ep, RetireReason::kHandshakeFailed);
    return;
  }
  ep->MarkReady();
  ++stats_.handshakes_done;
  NoteEvent("ep_ready", key, ep->generation(), m.generation);
  WireMsg rtu;
  rtu.type = WireType::kRtu;
  rtu.incarnation = env_->incarnation;
  rtu.generation = ep->generation();
  rtu.echo_generation = m.generation;
  rtu.sender_nic = NicName(ep->context());
  rtu.target_nic = m.sender_nic;
  (void)env_->net->Send(from, EncodeWire(rtu));
  NoteEvent("rtu_sent", key, ep->generation(), m.generation);
}

void Worker::OnRtu(const WireMsg& m, const std::string& from) {
  const std::optional<uint32_t> ctx = ContextOfNic(m.target_nic);
  if (!ctx) return;
  const Key key{*ctx, from + "@" + m.sender_nic};
  NoteEvent("rtu_recv", key, m.generation, m.echo_generation);
  auto it = live_.find(key);
  if (it == live_.end() || it->second->generation() != m.echo_generation ||
      it->second->state() != EndpointState::kConnecting || !it->second->peer() ||
      it->second->peer()->generation != m.generation ||
      it->second->peer()->incarnation != m.incarnation) {
    NoteEvent("rtu_dropped", key, m.generation, m.echo_generation);
    return;
  }
  Endpoint* ep = it->second.get();
  if (!ep->ToRts().ok()) {
    Retire(ep, RetireReason::kHandshakeFailed);
    return;
  }
  ep->MarkReady();
  ++stats_.handshakes_done;
  NoteEvent("ep_ready", key, ep->generation(), m.generation);
}

void Worker::OnAsync(const hal::AsyncEvent& e) {
  if (e.type == hal::AsyncEventType::kQpFatal || e.type == hal::AsyncEventType::kQpReqErr ||
      e.type == hal::AsyncEventType::kQpAccessErr) {
    for (auto& [key, ep] : live_) {
      for (const DataQp& q : ep->qps()) {
        if (q.qp.get() == e.qp) {
          Retire(key, RetireReason::kQpFatal);
          return;
        }
      }
    }
  }
  // CQ_ERR, port and device events: not handled in this version (see the
  // report); they are acknowledged by the async reader.
}

void Worker::Retire(const Key& key, RetireReason why) {
  auto it = live_.find(key);
  if (it == live_.end()) return;
  Retire(it->second.get(), why);
}

void Worker::Retire(Endpoint* ep, RetireReason why) {
  const Key key{ep->context(), ep->peer_path()};
  auto it = live_.find(key);
  FERRY_CHECK(it != live_.end() && it->second.get() == ep);
  ep->BeginRetire(why, env_->clock->NowNs(), cfg_.drain_timeout_ns);
  NoteEvent("ep_retire", key, ep->generation(), static_cast<uint64_t>(why));
  retiring_.push_back(std::move(it->second));
  live_.erase(it);
}

// ------------------------------------------------------------------ post
uint32_t Worker::AllocSlot() {
  if (!free_slots_.empty()) {
    const uint32_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  slots_.emplace_back();
  return static_cast<uint32_t>(slots_.size() - 1);
}

void Worker::PostAll() {
  uint32_t budget = kPostsPerStepMax;
  for (auto& [key, dq] : pending_) {
    if (dq.empty()) continue;
    auto it = live_.find(key);
    if (it == live_.end()) {
      if (shutdown_) {
        // No new endpoints during shutdown: the slices fail unposted.
        while (!dq.empty()) {
          Pending p = dq.front();
          dq.pop_front();
          p.route->task->TryWithdrawSlice(p.slice, SliceOutcome::kFailed);
        }
        continue;
      }
      auto ep = NewEndpoint(key);
      if (!ep.ok()) continue;  // retried next step; the task timeout bounds it
      Endpoint* e = *ep;
      Context* c = env_->contexts[key.first];
      WireMsg req;
      req.type = WireType::kReq;
      req.incarnation = env_->incarnation;
      req.generation = e->generation();
      req.sender_nic = c->device();
      req.target_nic = NicOf(key.second);
      req.qpns = e->qpns();
      req.psns = e->psns();
      req.gid = c->gid().raw;
      req.lid = c->lid();
      req.mtu = static_cast<uint8_t>(c->active_mtu());
      e->active = true;
      e->req_bytes = EncodeWire(req);
      (void)env_->net->Send(AddressOf(key.second), e->req_bytes);
      NoteEvent("req_sent", key, e->generation(), 0);
      continue;
    }
    Endpoint* ep = it->second.get();
    if (ep->state() != EndpointState::kReady) continue;
    Quota& quota = QuotaOf(ep->cq());
    const uint32_t nqp = static_cast<uint32_t>(ep->qps().size());
    while (!dq.empty() && budget > 0) {
      // Pick a QP with room, round robin.
      DataQp* q = nullptr;
      for (uint32_t k = 0; k < nqp; ++k) {
        DataQp& cand = ep->qps()[(ep->round_robin + k) % nqp];
        if (cand.fifo.size() < ep->wr_depth()) {
          q = &cand;
          ep->round_robin = (ep->round_robin + k + 1) % nqp;
          break;
        }
      }
      if (q == nullptr || quota.used >= quota.capacity) break;
      Pending p = dq.front();
      Task& task = *p.route->task;
      if (!task.BeginPost(p.slice)) {
        dq.pop_front();
        if (auto why = task.latched()) {
          task.TryWithdrawSlice(p.slice, *why == TaskStatus::kCanceled ? SliceOutcome::kCanceled
                                                                       : SliceOutcome::kTimeout);
        }
        continue;
      }
      const uint32_t slot = AllocSlot();
      Slot& s = slots_[slot];
      s.generation = NextGeneration(s.generation);
      s.route = p.route;
      s.slice = p.slice;
      s.qp_uid = q->uid;
      s.in_use = true;
      Slice& sl = task.mutable_slice(p.slice);
      sl.wr_generation = s.generation;
      hal::SendWr wr;
      wr.wr_id = EncodeWrId(WrId{slot, s.generation});
      wr.opcode = p.route->op == OpKind::kRead ? hal::Opcode::kRdmaRead : hal::Opcode::kRdmaWrite;
      wr.send_flags = hal::kSendSignaled;
      wr.num_sge = 1;
      const uint64_t off = task.SliceOffsetBytes(p.slice);
      wr.sg_list[0] =
          hal::Sge{p.route->local_addr + off, task.SliceLengthBytes(p.slice), p.route->lkey};
      wr.remote_addr = p.route->remote_addr + off;
      wr.rkey = p.route->rkey;
      ++quota.used;  // reserved before post_send
      FERRY_CHECK_LE(quota.used, quota.capacity);
      hal::PostResult r = env_->verbs->PostSend(q->qp.get(), absl::MakeConstSpan(&wr, 1));
      if (!r.status.ok()) {
        --quota.used;
        s.in_use = false;
        s.route.reset();
        free_slots_.push_back(slot);
        Task::Step st = task.PostRejected(p.slice);
        (void)st;
        if (task.slice(p.slice).Load().state != SliceState::kQueued) dq.pop_front();
        break;  // ENOMEM or the QP is gone: try again next step
      }
      task.PostAccepted(p.slice);
      q->fifo.push_back(slot);
      NoteEvent("post", key, ep->generation(), q->qpn);
      dq.pop_front();
      ++stats_.posted;
      --budget;
      ep->last_used_ns = env_->clock->NowNs();
    }
  }
}

// ------------------------------------------------------------------ poll
void Worker::PollAll() {
  const uint64_t now = env_->clock->NowNs();
  uint64_t outstanding = 0;
  for (const auto& [k, ep] : live_) outstanding += ep->Outstanding();
  for (const auto& ep : retiring_) outstanding += ep->Outstanding();
  if (outstanding > 0 && last_poll_ns_ != 0)
    stats_.max_poll_gap_ns = std::max(stats_.max_poll_gap_ns, now - last_poll_ns_);
  last_poll_ns_ = now;
  ++stats_.polls;
  std::array<hal::WorkCompletion, kPollBatch> wcs;
  for (uint32_t ci = 0; ci < env_->contexts.size(); ++ci) {
    Context* c = env_->contexts[ci];
    for (uint32_t i = 0; i < c->cqs_per_worker(); ++i) {
      const hal::CqHandle cq = c->cq(id_, i);
      if (!cq.valid()) continue;
      for (int rounds = 0; rounds < 64; ++rounds) {
        auto n = env_->verbs->PollCq(cq, absl::MakeSpan(wcs));
        if (!n.ok()) break;  // CQ_ERR: not handled in this version
        for (uint32_t k = 0; k < *n; ++k) HandleCqe(ci, wcs[k]);
        if (*n == 0) {
          ++QuotaOf(cq).empty_polls;
          ReleaseDestroyed(cq);
          break;
        }
      }
    }
  }
}

void Worker::HandleCqe(uint32_t ctx, const hal::WorkCompletion& wc) {
  (void)ctx;
  ++stats_.cqes;
  const WrId id = DecodeWrId(wc.wr_id);
  if (id.slot >= slots_.size() || !slots_[id.slot].in_use ||
      slots_[id.slot].generation != id.generation) {
    ++stats_.stale_cqes;
    return;
  }
  Slot& s = slots_[id.slot];
  auto qit = qp_by_uid_.find(s.qp_uid);
  FERRY_CHECK(qit != qp_by_uid_.end());
  Endpoint* ep = qit->second.ep;
  DataQp& q = ep->qps()[qit->second.index];
  // Completions of one QP keep post order.
  FERRY_CHECK(!q.fifo.empty());
  FERRY_CHECK_EQ(q.fifo.front(), id.slot);
  q.fifo.pop_front();
  Quota& quota = QuotaOf(ep->cq());
  FERRY_CHECK_GT(quota.used, 0u);
  --quota.used;
  std::shared_ptr<TaskRoute> route = std::move(s.route);
  const uint32_t slice = s.slice;
  s.in_use = false;
  free_slots_.push_back(id.slot);
  if (wc.status != hal::WcStatus::kSuccess && ep->state() != EndpointState::kRetiring) {
    Retire(ep, RetireReason::kErrorCompletion);
  }
  ResolveAttempt(route, slice, wc.status, false);
}

void Worker::ResolveAttempt(const std::shared_ptr<TaskRoute>& route, uint32_t slice,
                            hal::WcStatus st, bool evidence_by_destroy) {
  Task& task = *route->task;
  Slice& sl = task.mutable_slice(slice);
  if (!evidence_by_destroy && st == hal::WcStatus::kSuccess) {
    task.Resolve(slice, SliceOutcome::kSuccess);
    return;
  }
  if (!evidence_by_destroy && NonRetryable(st)) {
    task.Resolve(slice, SliceOutcome::kFailed);
    return;
  }
  const bool flush = evidence_by_destroy || st == hal::WcStatus::kWrFlushErr;
  if (sl.reposts_used + 1 >= cfg_.repost_max) {
    task.Resolve(slice, SliceOutcome::kFailed);
    return;
  }
  if (!flush) {
    if (sl.retries_used >= cfg_.retry_count) {
      task.Resolve(slice, SliceOutcome::kFailed);
      return;
    }
    ++sl.retries_used;
  }
  ++sl.reposts_used;
  Requeue(route, slice);
}

void Worker::Requeue(const std::shared_ptr<TaskRoute>& route, uint32_t slice) {
  route->task->Requeue(slice);
  if (route->task->slice(slice).Load().state == SliceState::kQueued)
    pending_[Key{route->context, route->peer_path}].push_front(Pending{route, slice});
}

void Worker::ReleaseDestroyed(hal::CqHandle cq) {
  const uint64_t epoch = QuotaOf(cq).empty_polls;
  for (auto& ep : retiring_) {
    if (ep->cq() != cq) continue;
    for (DataQp& q : ep->qps()) {
      if (!q.destroyed || q.released) continue;
      QpRef& ref = qp_by_uid_[q.uid];
      if (ref.destroy_epoch >= epoch) continue;  // destroyed after this poll began
      // Evidence: destroy succeeded and the CQ was polled empty after it.
      Quota& quota = QuotaOf(cq);
      while (!q.fifo.empty()) {
        const uint32_t slot = q.fifo.front();
        q.fifo.pop_front();
        FERRY_CHECK_GT(quota.used, 0u);
        --quota.used;
        if (Mut(base::Mutation::kEngineC4DoubleRelease) && quota.used > 0) --quota.used;
        Slot& s = slots_[slot];
        std::shared_ptr<TaskRoute> route = std::move(s.route);
        const uint32_t slice = s.slice;
        s.in_use = false;
        free_slots_.push_back(slot);
        ResolveAttempt(route, slice, hal::WcStatus::kWrFlushErr, true);
      }
      q.released = true;
    }
  }
}

// ------------------------------------------------------------------ sweep
void Worker::Sweep() {
  const uint64_t now = env_->clock->NowNs();
  // Task deadlines (C2: only the task's own queued slices are withdrawn).
  for (const auto& t : tasks_) {
    Task& task = *t->task;
    if (IsTerminal(task.status())) continue;
    if (task.Expired(now) && task.TryLatch(TaskStatus::kTimeout)) {
      std::optional<TaskStatus> published;
      task.WithdrawQueued(&published);
    }
  }
  // Drop finished tasks from the sweep list (order kept).
  tasks_.erase(std::remove_if(tasks_.begin(), tasks_.end(),
                              [](const std::shared_ptr<TaskRoute>& t) {
                                return IsTerminal(t->task->status());
                              }),
               tasks_.end());
  // Handshake timers.
  std::vector<Key> failed;
  for (auto& [key, ep] : live_) {
    if (ep->state() != EndpointState::kConnecting) continue;
    if (now >= ep->handshake_deadline_ns) {
      failed.push_back(key);
      continue;
    }
    if (now >= ep->next_resend_ns) {
      ep->next_resend_ns = now + cfg_.handshake_timeout_ns;
      if (ep->active && !ep->peer()) {
        // REQ resent unchanged until a REP or the timeout.
        (void)env_->net->Send(AddressOf(key.second), ep->req_bytes);
        ++ep->resends;
        NoteEvent("req_sent", key, ep->generation(), ep->resends);
      } else if (!ep->rep_bytes.empty()) {
        // We accepted and wait for the RTU (or the REP of a simultaneous
        // open): our REP may be lost; resend it.
        (void)env_->net->Send(AddressOf(key.second), ep->rep_bytes);
        if (ep->active) (void)env_->net->Send(AddressOf(key.second), ep->req_bytes);
      }
    }
  }
  for (const Key& k : failed) Retire(k, RetireReason::kHandshakeFailed);
  // Retire ladder.
  for (auto& ep : retiring_) {
    if (ep->state() != EndpointState::kRetiring) continue;
    std::vector<bool> before;
    for (const DataQp& q : ep->qps()) before.push_back(q.destroyed);
    ep->RetireStep(now, cfg_.destroy_backoff_min_ns, cfg_.destroy_backoff_max_ns,
                   Mut(base::Mutation::kEngineC9LeakAtShutdown) && shutdown_);
    for (size_t i = 0; i < ep->qps().size(); ++i) {
      DataQp& q = ep->qps()[i];
      if (q.destroyed && !before[i])
        qp_by_uid_[q.uid].destroy_epoch = QuotaOf(ep->cq()).empty_polls;
    }
  }
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
    for (const DataQp& q : ep->qps()) qp_by_uid_.erase(q.uid);
  }
  retiring_.erase(std::remove_if(retiring_.begin(), retiring_.end(),
                                 [](const std::unique_ptr<Endpoint>& ep) {
                                   return ep->state() == EndpointState::kDestroyed;
                                 }),
                  retiring_.end());
}

}  // namespace ferry::engine
