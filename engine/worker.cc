// engine/worker.cc: the owner worker's step: inbox, handshake and accept
// table, posting under the CQ quota ledgers, polling, deadlines (timeouts
// with the C3 stale check, handshake timers, rail cooldowns), the retire
// ladder and reclaim (see worker.h for what must stay true).
#include "engine/worker.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "engine/accept.h"
#include "engine/wr_id.h"

namespace ferry::engine {

namespace {
constexpr uint32_t kPollBatch = 32;
constexpr uint32_t kPollRoundsMax = 64;
constexpr size_t kInboxDrainMax = 256;
constexpr uint32_t kPostsPerStepMax = 1024;
constexpr size_t kReplacedPerKeyMax = 8;
constexpr size_t kReplacedKeysMax = 4096;
constexpr uint64_t kParkedRecheckNs = 100'000;

std::string AddressOf(std::string_view peer_path) {
  return std::string(peer_path.substr(0, peer_path.find('@')));
}
std::string NicOf(std::string_view peer_path) {
  const size_t at = peer_path.find('@');
  return at == std::string_view::npos ? std::string() : std::string(peer_path.substr(at + 1));
}
// Not retried: the slice fails, the endpoint retires, the rail is not
// penalised (docs/design.md section 4, "Errors, retries, rails").
bool NonRetryable(hal::WcStatus s) {
  return s == hal::WcStatus::kRemAccessErr || s == hal::WcStatus::kLocProtErr ||
         s == hal::WcStatus::kRemInvReqErr || s == hal::WcStatus::kLocLenErr;
}
PeerInfo PeerFrom(const HandshakeMessage& m) {
  PeerInfo p;
  p.incarnation = m.incarnation;
  p.generation = static_cast<uint32_t>(m.generation);
  for (const HandshakeQp& q : m.qps) {
    p.qpns.push_back(q.qpn);
    p.psns.push_back(q.start_psn);
  }
  p.gid = m.gid;
  p.lid = m.lid;
  p.mtu = m.mtu;
  return p;
}
}  // namespace

Worker::Worker(uint32_t id, WorkerEnv* env) : id_(id), env_(env), cfg_(*env->config) {
  FERRY_CHECK_LT(id_, cfg_.workers);
  for (Context* c : env_->contexts) {
    stores_.push_back(std::make_unique<Store>(cfg_.endpoint_store_capacity));
    rails_.emplace_back();
    for (uint32_t i = 0; i < c->cqs_per_worker(); ++i) {
      quota_[c->cq(id_, i).id] =
          std::make_unique<CqQuota>(c->cqe_capacity(), cfg_.zombie_quota_max, env_->mutations,
                                    /*check_every_op=*/base::Mutations::kCompiledIn);
    }
  }
}

Worker::~Worker() = default;

void Worker::Push(InboxItem item) {
  base::MutexLock l(&mu_);
  inbox_.push_back(std::move(item));
}

size_t Worker::InboxSize() const {
  base::MutexLock l(&mu_);
  return inbox_.size();
}

std::vector<Endpoint*> Worker::LiveList() const {
  std::vector<Endpoint*> out;
  for (const auto& st : stores_)
    st->ForEach([&out](const EndpointKey&, const std::unique_ptr<Endpoint>& ep, bool) {
      out.push_back(ep.get());
    });
  return out;
}

size_t Worker::LiveEndpoints() const {
  size_t n = 0;
  for (const auto& st : stores_) n += st->size();
  return n;
}

Endpoint* Worker::Peek(const Key& key) const {
  const auto* p = stores_[key.first]->Peek(StoreKey(key));
  return p == nullptr ? nullptr : p->get();
}

Endpoint* Worker::Hit(const Key& key) {
  auto* p = stores_[key.first]->Find(StoreKey(key));
  return p == nullptr ? nullptr : p->get();
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
  for (Endpoint* ep : LiveList()) {
    const Key key{ep->context(), ep->peer_path()};
    if (ep->state() == EndpointState::kConnecting) {
      consider(ep->next_resend_ns);
      consider(ep->handshake_deadline_ns);
    }
    if (ep->Outstanding() > 0) ws.poll_now = true;
    auto it = pending_.find(key);
    if (it != pending_.end() && !it->second.empty() && ep->state() == EndpointState::kReady &&
        !RailPaused(key.first)) {
      const CqQuota& q = Ledger(ep->cq());
      for (const DataQp& dq : ep->qps())
        if (dq.fifo.size() < ep->wr_depth() && q.free() > 0 && !q.ZombieOverCap())
          ws.work_now = true;
    }
  }
  for (const auto& [key, dq] : pending_) {
    if (dq.empty() || Peek(key) != nullptr) continue;
    if (RailPaused(key.first) && !shutdown_) {
      consider(rails_[key.first].paused_until_ns);
    } else if (StoreHasRoom(key.first) || shutdown_) {
      ws.work_now = true;
    }
    // Else the store is full of busy endpoints: a CQE, a handshake timer
    // or an inbox item changes that, and each wakes the worker.
  }
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
  if (!errored_cqs_.empty()) ws.work_now = ws.work_now || retiring_.empty();
  // The earliest task deadline (a lower bound kept by SweepTimeouts and
  // OnSubmit: at worst one early wake, whose sweep refreshes it).
  if (next_task_deadline_ns_ != UINT64_MAX) consider(next_task_deadline_ns_);
  if (ws.deadline_ns && *ws.deadline_ns <= now) ws.work_now = true;
  for (uint32_t ci = 0; ci < env_->contexts.size(); ++ci) {
    if (rails_[ci].parked) {
      // Waiting for the re-enable (another owner runs it): look again soon.
      consider(now + kParkedRecheckNs);
      if (rails_[ci].must_reenable || env_->contexts[ci]->epoch() != rails_[ci].park_epoch)
        ws.work_now = true;
      continue;
    }
    ws.channels.push_back(env_->contexts[ci]->channel(id_));
  }
  return ws;
}

bool Worker::ShutDown() const { return shutdown_ && LiveEndpoints() == 0 && retiring_.empty(); }

uint64_t Worker::QuotaUsed() const {
  uint64_t n = 0;
  for (const auto& [cq, q] : quota_) n += static_cast<uint64_t>(q->reserved());
  return n;
}

const CqQuota* Worker::QuotaOf(hal::CqHandle cq) const {
  auto it = quota_.find(cq.id);
  return it == quota_.end() ? nullptr : it->second.get();
}

std::vector<hal::CqHandle> Worker::OwnedCqs() const {
  std::vector<hal::CqHandle> out;
  for (Context* c : env_->contexts)
    for (uint32_t i = 0; i < c->cqs_per_worker(); ++i) out.push_back(c->cq(id_, i));
  return out;
}

bool Worker::RailPaused(uint32_t ctx) const {
  const Rail& r = rails_[ctx];
  return r.port_down || r.parked || env_->clock->NowNs() < r.paused_until_ns;
}

const Endpoint* Worker::Find(uint32_t context, std::string_view peer_path) const {
  if (context >= stores_.size()) return nullptr;
  return Peek(Key{context, std::string(peer_path)});
}

std::vector<std::string> Worker::PendingReasons() const {
  std::vector<std::string> out;
  for (const auto& ep : retiring_) {
    for (const DataQp& q : ep->qps()) {
      if (q.destroyed && q.released) continue;
      out.push_back(absl::StrCat(
          "worker ", id_, " endpoint ", ep->peer_path(), " gen ", ep->generation(), " qpn ", q.qpn,
          ": retiring (", std::string(RetireReasonName(ep->retire_reason())), "), ", q.fifo.size(),
          " WRs without evidence, ", q.destroy_failures, " failed destroys",
          q.destroyed ? ", destroyed, awaiting the empty poll" : ""));
    }
  }
  for (Endpoint* ep : LiveList())
    out.push_back(absl::StrCat("worker ", id_, " endpoint ", ep->peer_path(), " gen ",
                               ep->generation(), ": ",
                               std::string(EndpointStateName(ep->state()))));
  return out;
}

void Worker::PollFromOutsideForMutation() {
  if (env_->contexts.empty()) return;
  std::array<hal::WorkCompletion, 1> wc;
  (void)env_->verbs->PollCq(env_->contexts[0]->cq(id_, 0), absl::MakeSpan(wc.data(), 0));
}

void Worker::NoteEventSlow(std::string_view kind, const Key& key, uint64_t a, uint64_t b) {
  env_->observer->OnEvent(id_, kind, NicName(key.first) + "|" + key.second, a, b);
}

std::string Worker::NicName(uint32_t ctx) const { return env_->contexts[ctx]->device(); }

std::optional<uint32_t> Worker::ContextOfNic(std::string_view nic) const {
  for (uint32_t i = 0; i < env_->contexts.size(); ++i)
    if (env_->contexts[i]->device() == nic) return i;
  return std::nullopt;
}

CqQuota& Worker::Ledger(hal::CqHandle cq) {
  auto it = quota_.find(cq.id);
  FERRY_CHECK(it != quota_.end());
  return *it->second;
}

// ------------------------------------------------------------------ inbox
void Worker::DrainInbox() {
  std::vector<InboxItem>& items = drain_scratch_;  // reused: no allocation per step
  FERRY_CHECK(items.empty());
  {
    base::MutexLock l(&mu_);
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
      for (Endpoint* ep : LiveList()) Retire(ep, RetireReason::kShutdown);
    }
  }
  items.clear();
}

void Worker::OnSubmit(const std::shared_ptr<TaskRoute>& route) {
  tasks_.push_back(route);
  route->posted.reserve(route->task->slice_count());  // one entry per first post
  next_task_deadline_ns_ = std::min(next_task_deadline_ns_, route->task->geometry().deadline_ns);
  Key key{route->context, route->peer_path};
  auto& dq = pending_[key];
  for (uint32_t i = 0; i < route->task->slice_count(); ++i) dq.push_back(Pending{route, i});
}

void Worker::OnWire(const HandshakeMessage& m, const std::string& from) {
  switch (m.type) {
    case HandshakeType::kReq:
      OnReq(m, from);
      break;
    case HandshakeType::kRep:
      OnRep(m, from);
      break;
    case HandshakeType::kRtu:
      OnRtu(m, from);
      break;
    case HandshakeType::kStale:
    case HandshakeType::kError:
      OnStaleOrError(m, from);
      break;
  }
}

absl::StatusOr<Endpoint*> Worker::NewEndpoint(const Key& key) {
  Context* c = env_->contexts[key.first];
  // A CQ in error (CQ_ERR) is never polled again and is recreated only
  // once every QP on it is destroyed: a QP created on it now would block
  // that recovery for good and its WRs would never see evidence (seeds
  // 39767, 44157). No endpoint until the CQ is recreated.
  if (CqRecovering(key.first)) {
    return absl::UnavailableError("the CQ is being recreated after CQ_ERR");
  }
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
  std::unique_ptr<Endpoint> leftover;
  auto made = Endpoint::Create(env_->verbs, env_->ledger, env_->entropy, p, cfg_.qps_per_endpoint,
                               key.first, key.second, gen, &next_qp_uid_, &leftover);
  const uint64_t now = env_->clock->NowNs();
  auto track = [this](Endpoint* ep) {
    CqQuota& ledger = Ledger(ep->cq());
    for (uint32_t i = 0; i < ep->qps().size(); ++i) {
      const hal::QpHandle qp = ep->qps()[i].qp.get();
      qp_by_uid_[ep->qps()[i].uid] = QpRef{ep, i, qp};
      uid_by_qp_[qp.id] = ep->qps()[i].uid;
      FERRY_CHECK(ledger.AddQp(qp).ok());
      if (env_->observer != nullptr) env_->observer->OnQpCreated(id_, qp);
    }
  };
  if (!made.ok()) {
    if (leftover != nullptr) {
      // Half-built: its QPs go through the retire ladder (a destroy can
      // fail and is retried there), never dropped with a failed destroy.
      Endpoint* half = leftover.get();
      track(half);
      half->BeginRetire(RetireReason::kHandshakeFailed, now, cfg_.drain_timeout_ns);
      for (const DataQp& q : half->qps())
        FERRY_CHECK(Ledger(half->cq()).MarkRetiring(q.qp.get()).ok());
      NoteEvent("ep_retire", key, gen, static_cast<uint64_t>(RetireReason::kHandshakeFailed));
      retiring_.push_back(std::move(leftover));
    }
    return made.status();
  }
  Endpoint* raw = made->get();
  track(raw);
  raw->handshake_deadline_ns =
      now + cfg_.handshake_timeout_ns * (uint64_t{cfg_.handshake_retries} + 1);
  raw->next_resend_ns = now + cfg_.handshake_timeout_ns;
  raw->last_used_ns = now;
  // The store decides eviction: idle victims first (no posted WRs, no
  // queued slices); the victim retires and its key is free at once.
  auto idle = [this](const EndpointKey& k, const std::unique_ptr<Endpoint>& ep) {
    auto it = pending_.find(Key{ep->context(), k.peer_nic_path});
    return ep->Outstanding() == 0 && (it == pending_.end() || it->second.empty());
  };
  auto ins = stores_[key.first]->Insert(StoreKey(key), std::move(*made), idle);
  FERRY_CHECK(ins.ok());
  NoteEvent("ep_create", key, gen, 0);
  if (ins->has_value()) {
    std::unique_ptr<Endpoint> victim = std::move((*ins)->value);
    const Key vkey{victim->context(), victim->peer_path()};
    ++stats_.evictions;
    NoteEvent("ep_evict", vkey, victim->generation(), (*ins)->was_idle ? 1 : 0);
    Endpoint* v = victim.get();
    v->BeginRetire(RetireReason::kEvicted, now, cfg_.drain_timeout_ns);
    for (const DataQp& q : v->qps()) FERRY_CHECK(Ledger(v->cq()).MarkRetiring(q.qp.get()).ok());
    NoteEvent("ep_retire", vkey, v->generation(), static_cast<uint64_t>(RetireReason::kEvicted));
    retiring_.push_back(std::move(victim));
    CheckZombies(v->cq());
  }
  return raw;
}

bool Worker::CqRecovering(uint32_t ctx) const {
  return errored_cqs_.contains(env_->contexts[ctx]->cq(id_, 0).id) &&
         !Mut(base::Mutation::kEngineC4EndpointOnErroredCq);
}

bool Worker::StoreHasRoom(uint32_t ctx) const {
  const Store& st = *stores_[ctx];
  if (st.size() < st.capacity()) return true;
  // Full: an active open may evict only an idle endpoint (no posted WRs,
  // no queued slices). Evicting a busy one for another busy key would let
  // two keys evict each other forever.
  bool idle = false;
  st.ForEach([&](const EndpointKey& k, const std::unique_ptr<Endpoint>& ep, bool) {
    auto it = pending_.find(Key{ep->context(), k.peer_nic_path});
    idle = idle || (ep->Outstanding() == 0 && (it == pending_.end() || it->second.empty()));
  });
  return idle;
}

void Worker::Send(const std::string& to, const HandshakeMessage& m, std::vector<uint8_t>* keep) {
  auto bytes = EncodeHandshake(m);
  FERRY_CHECK(bytes.ok());  // we only build valid messages
  (void)env_->net->Send(to, *bytes);
  if (keep != nullptr) *keep = std::move(*bytes);
}

void Worker::SendReq(Endpoint* ep) {
  Context* c = env_->contexts[ep->context()];
  HandshakeMessage req;
  req.type = HandshakeType::kReq;
  req.incarnation = env_->incarnation;
  req.generation = ep->generation();
  req.src_nic_path = env_->net->LocalAddress() + "@" + c->device();
  req.dst_nic = NicOf(ep->peer_path());
  for (size_t i = 0; i < ep->qps().size(); ++i)
    req.qps.push_back(HandshakeQp{ep->qps()[i].qpn, ep->qps()[i].sq_psn});
  req.gid = c->gid();
  req.lid = c->lid();
  req.mtu = c->active_mtu();
  ep->active = true;
  Send(AddressOf(ep->peer_path()), req, &ep->req_bytes);
}

void Worker::SendRep(Endpoint* ep, const HandshakeMessage& req, const std::string& from) {
  Context* c = env_->contexts[ep->context()];
  HandshakeMessage rep;
  rep.type = HandshakeType::kRep;
  rep.incarnation = env_->incarnation;
  rep.generation = ep->generation();
  rep.echo_incarnation = req.incarnation;
  rep.echo_generation = req.generation;
  rep.src_nic_path = env_->net->LocalAddress() + "@" + c->device();
  rep.dst_nic = NicOf(req.src_nic_path);
  for (size_t i = 0; i < ep->qps().size(); ++i)
    rep.qps.push_back(HandshakeQp{ep->qps()[i].qpn, ep->qps()[i].sq_psn});
  rep.gid = c->gid();
  rep.lid = c->lid();
  rep.mtu = c->active_mtu();
  Send(from, rep, &ep->rep_bytes);
  NoteEvent("rep_sent", Key{ep->context(), ep->peer_path()}, ep->generation(), req.generation);
}

void Worker::SendRtu(Endpoint* ep, const HandshakeMessage& rep, const std::string& from) {
  HandshakeMessage rtu;
  rtu.type = HandshakeType::kRtu;
  rtu.incarnation = env_->incarnation;
  rtu.generation = ep->generation();
  rtu.echo_incarnation = rep.incarnation;
  rtu.echo_generation = rep.generation;
  rtu.src_nic_path = env_->net->LocalAddress() + "@" + NicName(ep->context());
  rtu.dst_nic = NicOf(rep.src_nic_path);
  Send(from, rtu, nullptr);
  NoteEvent("rtu_sent", Key{ep->context(), ep->peer_path()}, ep->generation(), rep.generation);
}

void Worker::SendReply(const std::string& from, const HandshakeMessage& req, HandshakeType type,
                       std::string_view why) {
  HandshakeMessage r;
  r.type = type;
  r.incarnation = env_->incarnation;
  r.generation = 0;
  r.echo_incarnation = req.incarnation;
  r.echo_generation = req.generation;
  r.src_nic_path = env_->net->LocalAddress() + "@" + req.dst_nic;
  r.dst_nic = NicOf(req.src_nic_path);
  if (type == HandshakeType::kError) {
    r.error_code = absl::StatusCode::kFailedPrecondition;
    r.error_message = std::string(why.substr(0, kErrorMessageBytesMax));
  }
  auto bytes = EncodeHandshake(r);
  if (bytes.ok()) (void)env_->net->Send(from, *bytes);
}

void Worker::Accept(Endpoint* ep, const HandshakeMessage& req, const std::string& from) {
  absl::Status s = ep->ToRtr(PeerFrom(req));
  if (!s.ok()) {
    SendReply(from, req, HandshakeType::kError, "rtr_failed");
    Retire(ep, RetireReason::kHandshakeFailed);
    return;
  }
  SendRep(ep, req, from);
}

void Worker::RememberReplaced(const Key& key, uint64_t incarnation) {
  auto [it, fresh] = replaced_.try_emplace(key);
  if (fresh) {
    replaced_order_.push_back(key);
    if (replaced_order_.size() > kReplacedKeysMax) {
      replaced_.erase(replaced_order_.front());
      replaced_order_.pop_front();
    }
  }
  auto& list = replaced_[key];
  if (std::find(list.begin(), list.end(), incarnation) != list.end()) return;
  list.push_back(incarnation);
  if (list.size() > kReplacedPerKeyMax) list.pop_front();
}

bool Worker::NoteGenerationIsOlder(const Key& key, uint64_t incarnation, uint64_t generation) {
  auto [it, fresh] = peer_gen_seen_.try_emplace(key, incarnation, generation);
  if (fresh) {
    peer_gen_order_.push_back(key);
    if (peer_gen_order_.size() > kReplacedKeysMax) {
      peer_gen_seen_.erase(peer_gen_order_.front());
      peer_gen_order_.pop_front();
    }
    return false;
  }
  auto& [inc, gen] = it->second;
  if (inc != incarnation) {
    // Another incarnation: a restarted peer starts its generations afresh
    // (an older incarnation's REQ is caught by WasReplaced).
    inc = incarnation;
    gen = generation;
    return false;
  }
  if (generation < gen) return true;
  gen = generation;
  return false;
}

bool Worker::WasReplaced(const Key& key, uint64_t incarnation) const {
  auto it = replaced_.find(key);
  return it != replaced_.end() &&
         std::find(it->second.begin(), it->second.end(), incarnation) != it->second.end();
}

void Worker::OnReq(const HandshakeMessage& m, const std::string& from) {
  const std::optional<uint32_t> ctx = ContextOfNic(m.dst_nic);
  if (!ctx || m.qps.size() != cfg_.qps_per_endpoint) {
    SendReply(from, m, HandshakeType::kError, !ctx ? "unknown_nic" : "qp_count");
    return;
  }
  const Key key{*ctx, m.src_nic_path};
  NoteEvent("req_recv", key, m.incarnation, m.generation);
  if (rails_[*ctx].parked) {
    // The device is being closed and re-opened (DEVICE_FATAL): no endpoint
    // can be built on it now (its CQs and their ledgers are being
    // replaced). The peer resends its REQ until the handshake timeout.
    NoteEvent("req_parked", key, m.incarnation, m.generation);
    return;
  }
  // C6: a REQ from an incarnation this key already replaced is a delayed
  // REQ of the peer's previous process: STALE, nothing changes.
  if (WasReplaced(key, m.incarnation) && !Mut(base::Mutation::kEngineC6AcceptStale)) {
    NoteEvent("stale_req", key, m.incarnation, m.generation);
    SendReply(from, m, HandshakeType::kStale, "");
    return;
  }
  // C6: a REQ of a generation older than one this incarnation of the peer
  // already sent comes from an endpoint it gave up (a delayed or reordered
  // REQ): STALE, nothing changes. Accepting it onto a CONNECTING endpoint
  // would pair our QPs with QPNs the peer has reused since (swarm seeds of
  // issue 16; C5SimultaneousOpenUnderHandshakeChurn seed 259).
  // (Either C6 stale switch turns the gate off: kEngineC6AcceptStale then
  // reaches the accept table's R5 as it always did.)
  if (NoteGenerationIsOlder(key, m.incarnation, m.generation) &&
      !Mut(base::Mutation::kEngineC6AcceptOlderGeneration) &&
      !Mut(base::Mutation::kEngineC6AcceptStale)) {
    NoteEvent("stale_req", key, m.incarnation, m.generation);
    SendReply(from, m, HandshakeType::kStale, "");
    return;
  }
  Endpoint* ep = Peek(key);
  LocalEndpointState state = LocalEndpointState::kNone;
  RecordedPeer rec;
  if (ep != nullptr) {
    state = ep->state() == EndpointState::kReady ? LocalEndpointState::kReady
                                                 : LocalEndpointState::kConnecting;
    if (ep->peer().has_value()) {
      rec.known = true;
      rec.incarnation = ep->peer()->incarnation;
      rec.generation = ep->peer()->generation;
      rec.qpns = ep->peer()->qpns;
    }
  }
  const std::vector<uint32_t> qpns = QpnsOf(m);
  const AcceptDecision d =
      DecideAccept(state, rec, IncomingReq{m.incarnation, m.generation, qpns}, env_->mutations);
  switch (d.action) {
    case AcceptAction::kDuplicate:
      NoteEvent("dup_req", key, m.incarnation, m.generation);
      if (ep->rep_bytes.empty()) {
        SendRep(ep, m, from);
      } else {
        (void)env_->net->Send(from, ep->rep_bytes);
      }
      return;
    case AcceptAction::kReplyStale:
      NoteEvent("stale_req", key, m.incarnation, m.generation);
      SendReply(from, m, HandshakeType::kStale, "");
      return;
    case AcceptAction::kReplyError:
      NoteEvent("error_req", key, m.incarnation, m.generation);
      SendReply(from, m, HandshakeType::kError, "qpns_differ");
      return;
    case AcceptAction::kAcceptOnConnecting:
      Accept(ep, m, from);
      return;
    case AcceptAction::kRetireAndServe:
      if (rec.known && rec.incarnation != m.incarnation) RememberReplaced(key, rec.incarnation);
      Retire(ep, RetireReason::kSuperseded);
      break;
    case AcceptAction::kFreshEndpoint:
      break;
  }
  if (shutdown_) {
    SendReply(from, m, HandshakeType::kError, "shutting_down");
    return;
  }
  if (CqRecovering(*ctx)) {
    // CQ_ERR recovery in progress: like a parked device, the peer resends
    // its REQ until the handshake timeout.
    NoteEvent("req_parked", key, m.incarnation, m.generation);
    return;
  }
  auto fresh = NewEndpoint(key);
  if (!fresh.ok()) {
    SendReply(from, m, HandshakeType::kError, "no_endpoint");
    return;
  }
  Accept(*fresh, m, from);
}

void Worker::OnRep(const HandshakeMessage& m, const std::string& from) {
  const std::optional<uint32_t> ctx = ContextOfNic(m.dst_nic);
  if (!ctx) return;
  const Key key{*ctx, m.src_nic_path};
  NoteEvent("rep_recv", key, m.generation, m.echo_generation);
  Endpoint* ep = Peek(key);
  if (ep == nullptr || ep->generation() != m.echo_generation ||
      m.echo_incarnation != env_->incarnation) {
    NoteEvent("rep_dropped", key, m.generation, m.echo_generation);
    return;
  }
  if (ep->state() == EndpointState::kReady) {
    // Our RTU was lost: the peer resends its REP. Resend the RTU only if
    // the REP is the one we applied.
    if (ep->peer() && ep->peer()->generation == m.generation &&
        ep->peer()->incarnation == m.incarnation)
      SendRtu(ep, m, from);
    return;
  }
  if (ep->state() != EndpointState::kConnecting) return;
  (void)NoteGenerationIsOlder(key, m.incarnation, m.generation);
  if (m.qps.size() != ep->qps().size()) {
    Retire(ep, RetireReason::kHandshakeFailed);
    return;
  }
  const PeerInfo peer = PeerFrom(m);
  if (ep->peer().has_value()) {
    // Simultaneous open: we accepted the peer's REQ already and our QPs are
    // at RTR with that REQ's QPNs and PSNs. The REP must come from the very
    // endpoint that REQ came from: same incarnation, generation, QPNs and
    // PSNs. QPNs alone are no identity: a peer that retired the endpoint of
    // that REQ reuses its QPNs for the next generation, and our RTR PSNs
    // would not match its send PSNs (seed 13854). Else start over.
    const bool same_endpoint =
        ep->peer()->incarnation == peer.incarnation && ep->peer()->qpns == peer.qpns &&
        ((ep->peer()->generation == peer.generation && ep->peer()->psns == peer.psns) ||
         Mut(base::Mutation::kEngineC5RepAnyGeneration));
    if (!same_endpoint) {
      NoteEvent("rep_mismatch", key, m.generation, ep->peer()->generation);
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
  SendRtu(ep, m, from);
}

void Worker::OnRtu(const HandshakeMessage& m, const std::string& from) {
  (void)from;
  const std::optional<uint32_t> ctx = ContextOfNic(m.dst_nic);
  if (!ctx) return;
  const Key key{*ctx, m.src_nic_path};
  NoteEvent("rtu_recv", key, m.generation, m.echo_generation);
  Endpoint* ep = Peek(key);
  if (ep == nullptr || ep->generation() != m.echo_generation ||
      m.echo_incarnation != env_->incarnation || ep->state() != EndpointState::kConnecting ||
      !ep->peer() || ep->peer()->generation != m.generation ||
      ep->peer()->incarnation != m.incarnation) {
    NoteEvent("rtu_dropped", key, m.generation, m.echo_generation);
    return;
  }
  if (!ep->ToRts().ok()) {
    Retire(ep, RetireReason::kHandshakeFailed);
    return;
  }
  ep->MarkReady();
  ++stats_.handshakes_done;
  NoteEvent("ep_ready", key, ep->generation(), m.generation);
}

void Worker::OnStaleOrError(const HandshakeMessage& m, const std::string& from) {
  (void)from;
  const std::optional<uint32_t> ctx = ContextOfNic(m.dst_nic);
  if (!ctx) return;
  const Key key{*ctx, m.src_nic_path};
  NoteEvent("stale_recv", key, static_cast<uint64_t>(m.type), m.echo_generation);
  Endpoint* ep = Peek(key);
  // Only an answer to our own REQ of this very endpoint counts: the
  // handshake failed; the next post makes a fresh endpoint.
  if (ep == nullptr || ep->state() != EndpointState::kConnecting ||
      ep->generation() != m.echo_generation || m.echo_incarnation != env_->incarnation ||
      ep->peer().has_value())
    return;
  Retire(ep, RetireReason::kHandshakeFailed);
}

void Worker::OnAsync(const hal::AsyncEvent& e) {
  const uint64_t now = env_->clock->NowNs();
  std::optional<uint32_t> ctx;
  for (uint32_t i = 0; i < env_->contexts.size(); ++i)
    if (env_->contexts[i]->handle() == e.context) ctx = i;
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
                                     : std::min(r.cooldown_ns * 2, cfg_.rail_cooldown_max_ns);
  r.paused_until_ns = now + r.cooldown_ns;
  r.errors_in_window = 0;
  ++stats_.rail_pauses;
  NoteEvent("rail_pause", Key{ctx, ""}, r.cooldown_ns, 0);
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
    // Slices of latched tasks leave the queue without a post (C2).
    while (!dq.empty() && dq.front().route->task->latched().has_value()) {
      Pending p = dq.front();
      dq.pop_front();
      const TaskStatus why = *p.route->task->latched();
      p.route->task->TryWithdrawSlice(
          p.slice, why == TaskStatus::kCanceled ? SliceOutcome::kCanceled : SliceOutcome::kTimeout);
    }
    if (dq.empty()) continue;
    Endpoint* ep = Hit(key);
    if (ep == nullptr) {
      if (shutdown_) {
        // No new endpoints during shutdown: the slices fail unposted.
        while (!dq.empty()) {
          Pending p = dq.front();
          dq.pop_front();
          p.route->task->TryWithdrawSlice(p.slice, SliceOutcome::kFailed);
        }
        continue;
      }
      if (RailPaused(key.first) || !StoreHasRoom(key.first)) continue;
      auto made = NewEndpoint(key);
      if (!made.ok()) continue;  // retried next step; the task timeout bounds it
      SendReq(*made);
      NoteEvent("req_sent", key, (*made)->generation(), 0);
      continue;
    }
    if (ep->state() != EndpointState::kReady || RailPaused(key.first)) continue;
    CqQuota& ledger = Ledger(ep->cq());
    if (ledger.ZombieOverCap()) continue;
    const uint32_t nqp = static_cast<uint32_t>(ep->qps().size());
    FERRY_CHECK_GT(nqp, 0u);
    FERRY_CHECK_LE(nqp, kQpsPerEndpointMax);
    // Bounded: every round posts at least one WR (budget) or stops.
    bool stop = false;
    while (!stop && !dq.empty() && budget > 0) {
      // 1. Take up to kChainMax slices off the queue front, each assigned to
      // a QP with room, round robin (the same QPs one-by-one posting would
      // pick). With no free quota one slice still goes on, to be refused
      // below exactly as a single post would be.
      std::array<uint32_t, kQpsPerEndpointMax> taken{};  // per QP, in this chain
      const uint32_t rr_start = ep->round_robin;
      const int64_t quota_free = ledger.free();
      const uint32_t take_max = static_cast<uint32_t>(
          std::min<int64_t>(std::min(kChainMax, budget), std::max<int64_t>(quota_free, 1)));
      uint32_t n = 0;
      for (uint32_t guard = 0; guard < kPostsPerStepMax && n < take_max && !dq.empty(); ++guard) {
        uint32_t qi = nqp;
        for (uint32_t k = 0; k < nqp; ++k) {
          const uint32_t cand = (ep->round_robin + k) % nqp;
          if (ep->qps()[cand].fifo.size() + taken[cand] < ep->wr_depth()) {
            qi = cand;
            ep->round_robin = (cand + 1) % nqp;
            break;
          }
        }
        if (qi == nqp) break;  // every QP is full
        Pending p = std::move(dq.front());
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
        e.p = std::move(p);
        e.qi = qi;
        e.posted = false;
        ++taken[qi];
        ++n;
      }
      if (n == 0) break;
      // 2. One chain per QP, in round-robin order: quota reserved for the
      // whole chain before post_send (C4), refused past the CQ size.
      std::array<hal::SendWr, kChainMax>& wrs = chain_wrs_;
      std::array<uint32_t, kChainMax> in_chain;  // chain_ index of wrs[j]
      Context* rc = env_->contexts[key.first];
      for (uint32_t k = 0; k < nqp && !stop; ++k) {
        const uint32_t qi = (rr_start + k) % nqp;
        if (taken[qi] == 0) continue;
        DataQp& q = ep->qps()[qi];
        if (!ledger.Reserve(q.qp.get(), taken[qi]).ok()) {
          stop = true;  // this chain and the ones after it go back below
          break;
        }
        uint32_t m = 0;
        for (uint32_t i = 0; i < n; ++i) {
          ChainEntry& e = chain_[i];
          if (e.qi != qi) continue;
          Task& task = *e.p.route->task;
          e.slot = AllocSlot();
          Slot& s = slots_[e.slot];
          s.generation = NextGeneration(s.generation);
          s.route = e.p.route;
          s.slice = e.p.slice;
          s.qp_uid = q.uid;
          s.ep = ep;
          s.qp_index = qi;
          s.qp = q.qp.get();
          s.in_use = true;
          task.mutable_slice(e.p.slice).wr_generation = s.generation;
          // Every field the chain varies is set; sg_list[1..] and imm_data
          // keep the zeroes they were constructed with.
          hal::SendWr& wr = wrs[m];
          wr.wr_id = EncodeWrId(WrId{e.slot, s.generation});
          wr.opcode =
              e.p.route->op == OpKind::kRead ? hal::Opcode::kRdmaRead : hal::Opcode::kRdmaWrite;
          wr.send_flags = hal::kSendSignaled;
          wr.num_sge = 1;
          const uint64_t off = task.SliceOffsetBytes(e.p.slice);
          if (e.p.route->lkey_epoch != rc->epoch()) {
            // The context was re-enabled since submit: its MRs have new keys.
            auto keys = rc->KeysOf(e.p.route->region);
            if (keys.ok()) e.p.route->lkey = keys->lkey;
            e.p.route->lkey_epoch = rc->epoch();
          }
          wr.sg_list[0] = hal::Sge{e.p.route->local_addr + off, task.SliceLengthBytes(e.p.slice),
                                   e.p.route->lkey};
          wr.remote_addr = e.p.route->remote_addr + off;
          wr.rkey = e.p.route->rkey;
          in_chain[m] = i;
          ++m;
        }
        FERRY_CHECK_EQ(m, taken[qi]);
        const hal::PostResult r =
            env_->verbs->PostSend(q.qp.get(), absl::MakeConstSpan(wrs.data(), m));
        // WRs [0, posted) are on the QP; [posted, m) were not posted.
        const uint32_t posted = r.status.ok() ? m : r.first_bad;
        FERRY_CHECK_LE(posted, m);
        FERRY_CHECK(r.status.ok() || posted < m);
        for (uint32_t j = 0; j < posted; ++j) {
          ChainEntry& e = chain_[in_chain[j]];
          e.p.route->task->PostAccepted(e.p.slice);
          q.fifo.push_back(e.slot);
          e.p.route->posted.push_back(
              TaskRoute::PostedWr{e.slot, slots_[e.slot].generation, q.uid});
          NoteEvent("post", key, ep->generation(), q.qpn);
          e.posted = true;
          ++stats_.posted;
          --budget;
        }
        if (posted > 0) ep->last_used_ns = env_->clock->NowNs();
        if (posted < m) {
          // ENOMEM or the QP is gone: the rest are returned, try again next step.
          FERRY_CHECK(ledger.Unreserve(q.qp.get(), m - posted).ok());
          for (uint32_t j = posted; j < m; ++j) {
            Slot& s = slots_[chain_[in_chain[j]].slot];
            s.in_use = false;
            s.route.reset();
            free_slots_.push_back(chain_[in_chain[j]].slot);
          }
          stop = true;
        }
      }
      // 3. Every slice not posted goes POSTING -> QUEUED and back to the queue
      // front in its old order, unless its latched task withdrew it.
      for (uint32_t i = n; i-- > 0;) {
        ChainEntry& e = chain_[i];
        if (!e.posted) {
          Task& task = *e.p.route->task;
          task.PostRejected(e.p.slice);
          if (task.slice(e.p.slice).Load().state == SliceState::kQueued)
            dq.push_front(std::move(e.p));
        }
        e.p.route.reset();  // the scratch holds no task between chains
      }
    }
  }
}

// ------------------------------------------------------------------ poll
void Worker::PollAll() {
  const uint64_t now = env_->clock->NowNs();
  uint64_t outstanding = 0;
  for (Endpoint* ep : LiveList()) outstanding += ep->Outstanding();
  for (const auto& ep : retiring_) outstanding += ep->Outstanding();
  if (outstanding > 0 && last_poll_ns_ != 0)
    stats_.max_poll_gap_ns = std::max(stats_.max_poll_gap_ns, now - last_poll_ns_);
  last_poll_ns_ = now;
  ++stats_.polls;
  std::array<hal::WorkCompletion, kPollBatch> wcs;
  for (uint32_t ci = 0; ci < env_->contexts.size(); ++ci) {
    Context* c = env_->contexts[ci];
    if (rails_[ci].parked) continue;  // its device is being closed and re-opened
    for (uint32_t i = 0; i < c->cqs_per_worker(); ++i) {
      const hal::CqHandle cq = c->cq(id_, i);
      if (!cq.valid() || errored_cqs_.contains(cq.id)) continue;
      for (uint32_t rounds = 0; rounds < kPollRoundsMax; ++rounds) {
        CqQuota& ledger = Ledger(cq);
        const uint64_t ticket = ledger.PollStarted();
        auto n = env_->verbs->PollCq(cq, absl::MakeSpan(wcs));
        if (!n.ok()) {
          // CQ_ERR: its async event starts the recovery.
          FERRY_CHECK(ledger.PollFinished(ticket, 1).ok());
          break;
        }
        for (uint32_t k = 0; k < *n; ++k) HandleCqe(wcs[k]);
        auto forgotten = ledger.PollFinished(ticket, *n);
        FERRY_CHECK(forgotten.ok());
        // Evidence: destroyed and the CQ polled empty after the destroy.
        for (hal::QpHandle qp : *forgotten) DetachDestroyed(qp);
        if (*n == 0) break;
      }
    }
  }
}

void Worker::HandleCqe(const hal::WorkCompletion& wc) {
  ++stats_.cqes;
  const WrId id = DecodeWrId(wc.wr_id);
  if (id.slot >= slots_.size() || !slots_[id.slot].in_use ||
      slots_[id.slot].generation != id.generation) {
    ++stats_.stale_cqes;
    return;
  }
  Slot& s = slots_[id.slot];
  Endpoint* ep = s.ep;
  FERRY_CHECK(ep != nullptr && s.qp_index < ep->qps().size());
  DataQp& q = ep->qps()[s.qp_index];
  FERRY_CHECK_EQ(q.uid, s.qp_uid);
  // Completions of one QP keep post order.
  FERRY_CHECK(!q.fifo.empty());
  FERRY_CHECK_EQ(q.fifo.front(), id.slot);
  q.fifo.pop_front();
  FERRY_CHECK(Ledger(ep->cq()).ReleaseOnCqe(s.qp).ok());
  std::shared_ptr<TaskRoute> route = std::move(s.route);
  const uint32_t slice = s.slice;
  s.in_use = false;
  free_slots_.push_back(id.slot);
  if (wc.status != hal::WcStatus::kSuccess) {
    const Key key{ep->context(), ep->peer_path()};
    NoteEvent("cqe_error", key, static_cast<uint64_t>(wc.status), ep->generation());
    if (ep->state() != EndpointState::kRetiring) {
      // One endpoint failure event: the rail counts it once (never per
      // flushed CQE), unless the error is the peer's (non-retryable class).
      if (!NonRetryable(wc.status)) RailError(ep->context(), env_->clock->NowNs());
      Retire(ep, RetireReason::kErrorCompletion);
    }
  }
  ResolveAttempt(route, slice, wc.status, false, ep->retire_reason());
}

void Worker::ResolveAttempt(const std::shared_ptr<TaskRoute>& route, uint32_t slice,
                            hal::WcStatus st, bool evidence_by_destroy, RetireReason ep_reason) {
  Task& task = *route->task;
  Slice& sl = task.mutable_slice(slice);
  if (!evidence_by_destroy && st == hal::WcStatus::kSuccess) {
    task.Resolve(slice, SliceOutcome::kSuccess);
    return;
  }
  if (!evidence_by_destroy && NonRetryable(st)) {
    task.Resolve(slice, SliceOutcome::kFailed);
    // The peer rejected the rkey: its descriptor is refetched in the
    // background (the slice stays failed; later submits get the new keys).
    if (st == hal::WcStatus::kRemAccessErr && env_->remote_access_error)
      env_->remote_access_error(id_, route->segment, route->segment_version);
    return;
  }
  // A flush (or destroy evidence) on a QP Ferry moved to ERR itself costs
  // an innocent slice no retry budget; repost_max bounds its attempts.
  const bool ours = ep_reason == RetireReason::kTimeout || ep_reason == RetireReason::kEvicted ||
                    ep_reason == RetireReason::kErrorCompletion ||
                    ep_reason == RetireReason::kSuperseded ||
                    ep_reason == RetireReason::kShutdown || ep_reason == RetireReason::kCqError;
  const bool innocent = evidence_by_destroy || (st == hal::WcStatus::kWrFlushErr && ours);
  if (innocent && ep_reason == RetireReason::kTimeout && !task.latched().has_value() &&
      Mut(base::Mutation::kEngineC2TimeoutSpills)) {
    task.Resolve(slice, SliceOutcome::kFailed);  // mutation: the timeout spills
    return;
  }
  if (sl.reposts_used + 1 >= cfg_.repost_max) {
    task.Resolve(slice, SliceOutcome::kFailed);
    return;
  }
  if (!innocent) {
    // RETRY_EXC_ERR and other transport errors (and flushes after a QP
    // error we did not cause): retried on a fresh endpoint, with budget.
    if (sl.retries_used >= cfg_.retry_count) {
      task.Resolve(slice, SliceOutcome::kFailed);
      return;
    }
    ++sl.retries_used;
    NoteEvent("retry", Key{route->context, route->peer_path}, slice, sl.retries_used);
  } else {
    NoteEvent("repost", Key{route->context, route->peer_path}, slice, sl.reposts_used + 1);
  }
  ++sl.reposts_used;
  Requeue(route, slice);
}

void Worker::Requeue(const std::shared_ptr<TaskRoute>& route, uint32_t slice) {
  route->task->Requeue(slice);
  if (route->task->slice(slice).Load().state == SliceState::kQueued)
    pending_[Key{route->context, route->peer_path}].push_front(Pending{route, slice});
}

void Worker::ResolveFifoByEvidence(DataQp& q, RetireReason why) {
  // Bounded by the FIFO (at most wr_depth WRs); each slot is freed once.
  while (!q.fifo.empty()) {
    const uint32_t slot = q.fifo.front();
    q.fifo.pop_front();
    Slot& s = slots_[slot];
    std::shared_ptr<TaskRoute> route = std::move(s.route);
    const uint32_t slice = s.slice;
    s.in_use = false;
    free_slots_.push_back(slot);
    ResolveAttempt(route, slice, hal::WcStatus::kWrFlushErr, true, why);
  }
}

void Worker::DetachDestroyed(hal::QpHandle qp) {
  auto uit = uid_by_qp_.find(qp.id);
  FERRY_CHECK(uit != uid_by_qp_.end());
  QpRef& ref = qp_by_uid_.at(uit->second);
  DataQp& q = ref.ep->qps()[ref.index];
  FERRY_CHECK(q.destroyed && !q.released);
  const RetireReason why = ref.ep->retire_reason();
  // The ledger already returned the quota; the WRs resolve on the
  // evidence "destroyed + empty poll" (C1, C4).
  ResolveFifoByEvidence(q, why);
  q.released = true;
}

// ------------------------------------------------------------------ sweep
bool Worker::WrStillOnFifo(const TaskRoute::PostedWr& e) const {
  auto it = qp_by_uid_.find(e.qp_uid);
  if (it == qp_by_uid_.end()) return false;
  if (e.slot >= slots_.size() || !slots_[e.slot].in_use ||
      slots_[e.slot].generation != e.generation || slots_[e.slot].qp_uid != e.qp_uid)
    return false;
  const DataQp& q = it->second.ep->qps()[it->second.index];
  return std::find(q.fifo.begin(), q.fifo.end(), e.slot) != q.fifo.end();
}

void Worker::SweepTimeouts(uint64_t now) {
  // No task can expire before the earliest deadline seen by the last full
  // sweep (OnSubmit lowers it): most steps skip the walk over tasks_.
  if (now < next_task_deadline_ns_) return;
  next_task_deadline_ns_ = UINT64_MAX;
  for (const auto& t : tasks_) {
    Task& task = *t->task;
    if (t->timeout_handled || IsTerminal(task.status())) continue;
    if (!task.Expired(now)) {
      next_task_deadline_ns_ = std::min(next_task_deadline_ns_, task.geometry().deadline_ns);
      continue;
    }
    t->timeout_handled = true;
    if (!task.TryLatch(TaskStatus::kTimeout) && task.latched() != TaskStatus::kTimeout) continue;
    const Key key{t->context, t->peer_path};
    NoteEvent("timeout", key, task.slice_count(), t->posted.size());
    // C3: for each WR the task posted, retire its endpoint (to obtain
    // evidence) only if that very WR is still on its QP's FIFO.
    for (const TaskRoute::PostedWr& e : t->posted) {
      const bool on_fifo = WrStillOnFifo(e);
      if (!on_fifo && !Mut(base::Mutation::kEngineC3NoStaleCheck)) {
        ++stats_.stale_sweep_entries;
        NoteEvent("stale_entry", key, e.slot, e.qp_uid);
        continue;
      }
      auto it = qp_by_uid_.find(e.qp_uid);
      if (it == qp_by_uid_.end()) continue;
      Endpoint* ep = it->second.ep;
      if (ep->state() == EndpointState::kRetiring || ep->state() == EndpointState::kDestroyed)
        continue;
      ++stats_.timeout_retires;
      NoteEvent("timeout_retire", key, ep->generation(), e.qp_uid);
      Retire(ep, RetireReason::kTimeout);
    }
    // C2: only this task's queued slices are withdrawn.
    std::optional<TaskStatus> published;
    task.WithdrawQueued(&published);
  }
  // Drop finished tasks from the sweep list (order kept).
  tasks_.erase(std::remove_if(tasks_.begin(), tasks_.end(),
                              [](const std::shared_ptr<TaskRoute>& t) {
                                return IsTerminal(t->task->status());
                              }),
               tasks_.end());
}

void Worker::Sweep() {
  const uint64_t now = env_->clock->NowNs();
  SweepTimeouts(now);
  // Handshake timers.
  std::vector<Endpoint*> failed;
  for (Endpoint* ep : LiveList()) {
    if (ep->state() != EndpointState::kConnecting) continue;
    const Key key{ep->context(), ep->peer_path()};
    if (now >= ep->handshake_deadline_ns) {
      failed.push_back(ep);
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
  for (Endpoint* ep : failed) Retire(ep, RetireReason::kHandshakeFailed);
  // Retire ladder; every destroy result goes to the CQ's ledger.
  ServeParkedContexts();
  for (auto& ep : retiring_) {
    if (ep->state() != EndpointState::kRetiring || rails_[ep->context()].parked) continue;
    std::vector<std::pair<bool, uint32_t>> before;
    for (const DataQp& q : ep->qps()) before.emplace_back(q.destroyed, q.destroy_failures);
    ep->RetireStep(now, cfg_.destroy_backoff_min_ns, cfg_.destroy_backoff_max_ns,
                   Mut(base::Mutation::kEngineC9LeakAtShutdown) && shutdown_);
    auto lit = quota_.find(ep->cq().id);
    if (lit == quota_.end()) continue;  // its CQ was recreated: all destroyed
    CqQuota& ledger = *lit->second;
    for (size_t i = 0; i < ep->qps().size(); ++i) {
      DataQp& q = ep->qps()[i];
      const hal::QpHandle h = qp_by_uid_.at(q.uid).qp;
      const Key key{ep->context(), ep->peer_path()};
      if (q.destroyed && !before[i].first) {
        FERRY_CHECK(ledger.OnDestroyResult(h, true).ok());
        NoteEvent("qp_destroyed", key, q.qpn, q.fifo.size());
      }
      if (q.destroy_failures != before[i].second) {
        FERRY_CHECK(ledger.OnDestroyResult(h, false).ok());
        NoteEvent("destroy_failed", key, q.qpn, q.destroy_failures);
      }
      // Last resort (off by default): a QP whose destroy kept failing for
      // destroy_give_up_ns gets its whole device context closed and
      // re-opened; the close is evidence for every QP on it (C1).
      Rail& rail = rails_[ep->context()];
      if (cfg_.reset_context_on_destroy_give_up && !q.destroyed && q.destroy_failures > 0 &&
          now - q.first_destroy_fail_ns >= cfg_.destroy_give_up_ns && !rail.reset_requested &&
          env_->reset_context) {
        rail.reset_requested = true;
        NoteEvent("destroy_give_up", key, q.qpn, q.destroy_failures);
        env_->reset_context(ep->context());
      }
    }
  }
  RecoverErroredCqs();
}

// DEVICE_FATAL: retire the context's endpoints and park (stop touching
// its CQs, QPs and channel). The owner that completes the park count
// re-enables the context; closing the device is the evidence for every QP
// it held (C1), so nothing on it is destroyed one by one.
void Worker::ParkForDeviceFatal(uint32_t ctx) {
  Rail& r = rails_[ctx];
  if (r.parked) return;  // one park per fatal event
  NoteEvent("device_fatal", Key{ctx, ""}, env_->contexts[ctx]->epoch(), 0);
  for (Endpoint* ep : LiveList())
    if (ep->context() == ctx) Retire(ep, RetireReason::kQpFatal);
  r.parked = true;
  r.park_epoch = env_->contexts[ctx]->epoch();
  r.must_reenable = env_->contexts[ctx]->Park();
}

void Worker::ServeParkedContexts() {
  for (uint32_t ci = 0; ci < env_->contexts.size(); ++ci) {
    Rail& r = rails_[ci];
    if (!r.parked) continue;
    Context* c = env_->contexts[ci];
    if (r.must_reenable) {
      // Every owner is parked: nobody else touches this context now.
      if (!c->Reenable().ok()) continue;  // retried at the next sweep
      r.must_reenable = false;
      if (env_->observer != nullptr)
        for (uint32_t w = 0; w < cfg_.workers; ++w)
          for (uint32_t i = 0; i < c->cqs_per_worker(); ++i)
            env_->observer->OnCqCreated(w, c->cq(w, i));
      NoteEvent("ctx_reenabled", Key{ci, ""}, c->epoch() + 1, 0);
      r.reset_requested = false;
      c->Unpark();
      if (env_->context_reenabled) env_->context_reenabled(ci);
    }
    if (c->epoch() == r.park_epoch) continue;
    // Re-enabled: every QP this owner held on the context died with the
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
      }
    }
    std::vector<uint64_t> keep;
    for (uint32_t cj = 0; cj < env_->contexts.size(); ++cj)
      if (cj != ci)
        for (uint32_t i = 0; i < env_->contexts[cj]->cqs_per_worker(); ++i)
          keep.push_back(env_->contexts[cj]->cq(id_, i).id);
    for (auto it = quota_.begin(); it != quota_.end();) {
      if (std::find(keep.begin(), keep.end(), it->first) == keep.end()) {
        it = quota_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = errored_cqs_.begin(); it != errored_cqs_.end();) {
      it = it->second.first == ci ? errored_cqs_.erase(it) : std::next(it);
    }
    for (uint32_t i = 0; i < c->cqs_per_worker(); ++i)
      quota_[c->cq(id_, i).id] =
          std::make_unique<CqQuota>(c->cqe_capacity(), cfg_.zombie_quota_max, env_->mutations,
                                    /*check_every_op=*/base::Mutations::kCompiledIn);
    r.parked = false;
    NoteEvent("ctx_resumed", Key{ci, ""}, c->epoch(), 0);
  }
}

// CQ_ERR recovery: once every QP on the errored CQ is destroyed, recreate
// the CQ and reset its ledger; the forgotten QPs' WRs resolve on the
// destroy (their CQEs are lost with the CQ).
void Worker::RecoverErroredCqs() {
  std::vector<uint64_t> done;
  for (const auto& [cq_id, where] : errored_cqs_) {
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
    quota_.erase(qit);
    quota_[fresh.id] = std::move(ledger);
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
