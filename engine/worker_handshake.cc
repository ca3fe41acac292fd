// engine/worker_handshake.cc: endpoint creation and the handshake: REQ, REP, RTU,
// STALE/ERROR, the C6 accept table and its gates
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

QpParams Worker::EndpointQpParams(const Context& c, hal::CqHandle cq) const {
  QpParams p;
  p.pd = c.pd();
  p.cq = cq;
  p.wr_depth = cfg_.wr_depth;
  p.recv_depth = std::max<uint32_t>(1, cfg_.notify_recv_slots);
  p.max_inline_data = cfg_.inline_bytes_max;
  p.port_num = c.port_num();
  p.sgid_index = static_cast<uint8_t>(c.gid_index());
  p.local_mtu = c.active_mtu();
  p.timeout_exp = cfg_.qp_timeout_exp;
  p.retry_cnt = cfg_.qp_retries;
  p.rnr_retry = cfg_.qp_rnr_retries;
  const hal::DeviceAttr& dev = c.device_attr();
  p.rd_atomic_dest = RdAtomic(cfg_.qp_rd_atomic_max, dev.max_qp_rd_atom);
  p.rd_atomic_init = RdAtomic(cfg_.qp_rd_atomic_max, dev.max_qp_init_rd_atom);
  return p;
}

absl::StatusOr<Endpoint*> Worker::NewEndpoint(const Key& key) {
  Context* c = env_->contexts[key.first];
  // A CQ in error (CQ_ERR) is never polled again and is recreated only
  // once every QP on it is destroyed: a QP created on it now would block
  // that recovery for good and its WRs would never see evidence (seeds
  // 39767, 44157). No endpoint until the CQ is recreated.
  // With several CQs the store's victim (if it is full) leaves first, so
  // the new endpoint's CQ is chosen among the endpoints that stay and no
  // CQ takes more than EndpointsPerCq live ones (the CQ budget).
  if (c->cqs_per_worker() > 1 && !Mut(base::Mutation::kEngineCqOverBudget) &&
      stores_[key.first]->size() >= stores_[key.first]->capacity()) {
    auto victim = stores_[key.first]->EvictOne(
        [this](const EndpointKey& k, const std::unique_ptr<Endpoint>& ep) { return Idle(k, ep); });
    FERRY_CHECK(victim.has_value());
    RetireStoreVictim(key.first, std::move(*victim), env_->clock->NowNs());
  }
  const std::optional<hal::CqHandle> cq = CqForNewEndpoint(key.first);
  if (!cq.has_value()) {
    return absl::UnavailableError("no CQ can take an endpoint (CQ_ERR recovery, or full)");
  }
  uint32_t& gen = last_generation_[key];
  gen = NextGeneration(gen);
  const QpParams p = EndpointQpParams(*c, *cq);
  std::unique_ptr<Endpoint> leftover;
  auto made = Endpoint::Create(env_->verbs, env_->ledger, env_->entropy, p, cfg_.qps_per_endpoint,
                               key.first, key.second, gen, &next_qp_uid_, &leftover);
  const uint64_t now = env_->clock->NowNs();
  if (!made.ok()) {
    if (leftover != nullptr) {
      // Half-built: its QPs go through the retire ladder (a destroy can
      // fail and is retried there), never dropped with a failed destroy.
      Endpoint* half = leftover.get();
      TrackQps(half);
      half->BeginRetire(RetireReason::kHandshakeFailed, now, cfg_.drain_timeout_ns);
      for (const DataQp& q : half->qps())
        FERRY_CHECK(Ledger(half->cq()).MarkRetiring(q.qp.get()).ok());
      NoteEvent("ep_retire", key, gen, static_cast<uint64_t>(RetireReason::kHandshakeFailed));
      retiring_.push_back(std::move(leftover));
    }
    return made.status();
  }
  Endpoint* raw = made->get();
  TrackQps(raw);
  PostRecvsAll(raw);
  raw->CountConnectingIn(&connecting_);
  raw->handshake_deadline_ns =
      now + cfg_.handshake_timeout_ns * (uint64_t{cfg_.handshake_retries} + 1);
  raw->next_resend_ns = now + cfg_.handshake_timeout_ns;
  raw->last_used_ns = now;
  // The store decides eviction: idle victims first (no posted WRs, no
  // queued slices); the victim retires and its key is free at once.
  auto ins = stores_[key.first]->Insert(
      StoreKey(key), std::move(*made),
      [this](const EndpointKey& k, const std::unique_ptr<Endpoint>& ep) { return Idle(k, ep); });
  FERRY_CHECK(ins.ok());
  NoteEvent("ep_create", key, gen, 0);
  if (ins->has_value()) RetireStoreVictim(key.first, std::move(**ins), now);
  return raw;
}

bool Worker::Idle(const EndpointKey& k, const std::unique_ptr<Endpoint>& ep) const {
  const PendingQueue* dq = pending_.Find(ep->context(), k.peer_nic_path);
  const bool no_wrs = ep->Outstanding() == 0 || Mut(base::Mutation::kEngineEvictBusyAsIdle);
  return no_wrs && (dq == nullptr || dq->empty());
}

void Worker::RetireStoreVictim(uint32_t ctx, Store::Evicted victim, uint64_t now) {
  if (victim.was_idle) {
    bool busy_left = false;
    stores_[ctx]->ForEach([&](const EndpointKey& k, const std::unique_ptr<Endpoint>& ep, bool) {
      busy_left = busy_left || !Idle(k, ep);
    });
    stats_.busy_passed_over += busy_left;
  }
  RetireEvicted(std::move(victim.value), victim.was_idle, now);
}

void Worker::TrackQps(Endpoint* ep) {
  CqQuota& ledger = Ledger(ep->cq());
  for (uint32_t i = 0; i < ep->qps().size(); ++i) {
    const hal::QpHandle qp = ep->qps()[i].qp.get();
    qp_by_uid_[ep->qps()[i].uid] = QpRef{ep, i, qp};
    uid_by_qp_[qp.id] = ep->qps()[i].uid;
    FERRY_CHECK(ledger.AddQp(qp).ok());
    if (env_->observer != nullptr) env_->observer->OnQpCreated(id_, qp);
  }
}

void Worker::RetireEvicted(std::unique_ptr<Endpoint> victim, bool was_idle, uint64_t now) {
  const Key vkey{victim->context(), victim->peer_path()};
  ++stats_.evictions;
  NoteEvent("ep_evict", vkey, victim->generation(), was_idle ? 1 : 0);
  Endpoint* v = victim.get();
  v->BeginRetire(RetireReason::kEvicted, now, cfg_.drain_timeout_ns);
  for (const DataQp& q : v->qps()) FERRY_CHECK(Ledger(v->cq()).MarkRetiring(q.qp.get()).ok());
  NoteEvent("ep_retire", vkey, v->generation(), static_cast<uint64_t>(RetireReason::kEvicted));
  RevokeWindows(v);
  retiring_.push_back(std::move(victim));
  CheckZombies(v->cq());
}

std::optional<hal::CqHandle> Worker::CqForNewEndpoint(uint32_t ctx) {
  const Context& c = *env_->contexts[ctx];
  const uint32_t n = c.cqs_per_worker();
  // Test-only: the first spreading rule (the ledger's QPs, retiring ones
  // too, and no budget).
  const bool by_ledger = Mut(base::Mutation::kEngineCqOverBudget);
  // Load per CQ: its live endpoints (retiring ones are out of the store:
  // their quota returns on destroy, as with one CQ). One CQ needs no count.
  std::vector<uint64_t> load(n, 0);
  if (n > 1 && !by_ledger) {
    stores_[ctx]->ForEach([&](const EndpointKey&, const std::unique_ptr<Endpoint>& ep, bool) {
      for (uint32_t i = 0; i < n; ++i) load[i] += ep->cq() == c.cq(id_, i);
    });
  }
  std::optional<uint32_t> best;
  for (uint32_t i = 0; i < n; ++i) {
    const hal::CqHandle cq = c.cq(id_, i);
    if (!cq.valid()) return cq;  // not brought up: Endpoint::Create refuses it
    if (errored_cqs_.contains(cq.id)) {
      // Test-only: the mutation builds on the first CQ even in error.
      if (Mut(base::Mutation::kEngineC4EndpointOnErroredCq)) return cq;
      continue;
    }
    if (by_ledger) load[i] = Ledger(cq).tracked_qps();
    if (!best.has_value() || load[i] < load[*best]) best = i;
  }
  if (!best.has_value()) return std::nullopt;
  // One CQ: the store's capacity bounds it (as before CQs were chosen). More:
  // a CQ full of live endpoints (the others recovering) takes none.
  if (n > 1 && !by_ledger && load[*best] >= cfg_.EndpointsPerCq()) return std::nullopt;
  return c.cq(id_, *best);
}

bool Worker::CqRecovering(uint32_t ctx) const {
  if (Mut(base::Mutation::kEngineC4EndpointOnErroredCq)) return false;
  const Context& c = *env_->contexts[ctx];
  for (uint32_t i = 0; i < c.cqs_per_worker(); ++i)
    if (!errored_cqs_.contains(c.cq(id_, i).id)) return false;
  return true;
}

bool Worker::StoreHasRoom(uint32_t ctx) const {
  const Store& st = *stores_[ctx];
  if (st.size() < st.capacity()) return true;
  // Full: an active open may evict only an idle endpoint (no posted WRs,
  // no queued slices). Evicting a busy one for another busy key would let
  // two keys evict each other forever.
  bool idle = false;
  st.ForEach([&](const EndpointKey& k, const std::unique_ptr<Endpoint>& ep, bool) {
    const PendingQueue* dq = pending_.Find(ep->context(), k.peer_nic_path);
    idle = idle || (ep->Outstanding() == 0 && (dq == nullptr || dq->empty()));
  });
  return idle;
}

void Worker::Send(const std::string& to, const HandshakeMessage& m, std::vector<uint8_t>* keep) {
  auto bytes = EncodeHandshake(m);
  FERRY_CHECK(bytes.ok());  // we only build valid messages
  (void)env_->net->Send(to, *bytes);
  if (keep != nullptr) *keep = std::move(*bytes);
}

HandshakeMessage Worker::AnswerTo(const HandshakeMessage& m, HandshakeType type,
                                  uint64_t generation, std::string_view local_nic) const {
  HandshakeMessage a;
  a.type = type;
  a.incarnation = env_->incarnation;
  a.generation = generation;
  a.echo_incarnation = m.incarnation;
  a.echo_generation = m.generation;
  a.src_nic_path = env_->net->LocalAddress() + "@" + std::string(local_nic);
  a.dst_nic = NicOf(m.src_nic_path);
  return a;
}

void Worker::AddLocalQps(const Endpoint* ep, HandshakeMessage* m) const {
  const Context* c = env_->contexts[ep->context()];
  for (const DataQp& q : ep->qps()) m->qps.push_back(HandshakeQp{q.qpn, q.sq_psn});
  m->gid = c->gid();
  m->lid = c->lid();
  m->mtu = c->active_mtu();
  m->rd_atomic = ep->rd_atomic_dest();
}

void Worker::SendReq(Endpoint* ep) {
  HandshakeMessage req;
  req.type = HandshakeType::kReq;
  req.incarnation = env_->incarnation;
  req.generation = ep->generation();
  req.echo_incarnation = ep->target_incarnation;
  req.src_nic_path = env_->net->LocalAddress() + "@" + NicName(ep->context());
  req.dst_nic = NicOf(ep->peer_path());
  AddLocalQps(ep, &req);
  ep->active = true;
  Send(AddressOf(ep->peer_path()), req, &ep->req_bytes);
}

void Worker::SendRep(Endpoint* ep, const HandshakeMessage& req, const std::string& from) {
  HandshakeMessage rep =
      AnswerTo(req, HandshakeType::kRep, ep->generation(), NicName(ep->context()));
  AddLocalQps(ep, &rep);
  Send(from, rep, &ep->rep_bytes);
  NoteEvent("rep_sent", Key{ep->context(), ep->peer_path()}, ep->generation(), req.generation);
}

void Worker::SendRtu(Endpoint* ep, const HandshakeMessage& rep, const std::string& from) {
  const HandshakeMessage rtu =
      AnswerTo(rep, HandshakeType::kRtu, ep->generation(), NicName(ep->context()));
  Send(from, rtu, nullptr);
  NoteEvent("rtu_sent", Key{ep->context(), ep->peer_path()}, ep->generation(), rep.generation);
}

void Worker::SendReply(const std::string& from, const HandshakeMessage& req, HandshakeType type,
                       std::string_view why) {
  HandshakeMessage r = AnswerTo(req, type, 0, req.dst_nic);
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

namespace {
// try_emplace on a per-key map bounded to kReplacedKeysMax keys: a new key
// is appended to `order` and the oldest key is dropped past the bound (it
// is never the new one). Returns the key's entry and whether it is new.
template <typename K, typename V>
std::pair<typename std::map<K, V>::iterator, bool> EmplaceBounded(std::map<K, V>& m,
                                                                  std::deque<K>& order,
                                                                  const K& key, V value) {
  auto [it, fresh] = m.try_emplace(key, std::move(value));
  if (fresh) {
    order.push_back(key);
    if (order.size() > kReplacedKeysMax) {
      m.erase(order.front());
      order.pop_front();
    }
  }
  return {it, fresh};
}

// Adds `incarnation` to key's list in `lists` (bounded: kReplacedPerKeyMax
// per key, kReplacedKeysMax keys, oldest key dropped first).
template <typename K>
void RememberIn(std::map<K, std::deque<uint64_t>>& lists, std::deque<K>& order, const K& key,
                uint64_t incarnation) {
  auto& list = EmplaceBounded(lists, order, key, std::deque<uint64_t>{}).first->second;
  if (std::find(list.begin(), list.end(), incarnation) != list.end()) return;
  list.push_back(incarnation);
  if (list.size() > kReplacedPerKeyMax) list.pop_front();
}
}  // namespace

void Worker::RememberReplaced(const Key& key, uint64_t incarnation) {
  RememberIn(replaced_, replaced_order_, key, incarnation);
}

bool Worker::NoteGenerationIsOlder(const Key& key, uint64_t incarnation, uint64_t generation) {
  auto [it, fresh] = EmplaceBounded(peer_gen_seen_, peer_gen_order_, key,
                                    std::pair<uint64_t, uint64_t>{incarnation, generation});
  if (fresh) return false;
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

// OnReq in phases: the gates that answer before the accept table
// (ReqGated), the table itself (DecideAccept on what our endpoint recorded),
// then, for a fresh endpoint, ServeWithFreshEndpoint.
void Worker::OnReq(const HandshakeMessage& m, const std::string& from) {
  const std::optional<uint32_t> ctx = ContextOfNic(m.dst_nic);
  if (!ctx) {
    // C6 before the NIC: a REQ meant for an exited process may name a NIC
    // its successor lacks (a device that failed to open at its start). It
    // is refused as target_restarted, as at any NIC, so its sender fails
    // the slices bound to that process at once; "unknown_nic" made it
    // retire and resend the handshake until their deadline (4111 REQs in
    // 12 ms in campaign seed 12132945's first run).
    if (TargetsAnotherIncarnation(m)) {
      NoteEventAt("req_other_target", m.dst_nic, m.src_nic_path, m.incarnation, m.generation);
      SendReply(from, m, HandshakeType::kError, kTargetRestarted);
      return;
    }
    SendReply(from, m, HandshakeType::kError, "unknown_nic");
    return;
  }
  if (m.qps.size() != cfg_.qps_per_endpoint) {
    SendReply(from, m, HandshakeType::kError, kQpCountMismatch);
    return;
  }
  const Key key{*ctx, m.src_nic_path};
  NoteEvent("req_recv", key, m.incarnation, m.generation);
  if (ReqGated(m, from, key)) return;
  Endpoint* ep = Peek(key);
  RecordedPeer rec;
  const LocalEndpointState state = AcceptStateOf(ep, &rec);
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
  ServeWithFreshEndpoint(m, from, key);
}

bool Worker::ReqGated(const HandshakeMessage& m, const std::string& from, const Key& key) {
  // C6: a REQ that names another incarnation than this process's as its
  // target (an earlier one: incarnations are unordered random numbers, so
  // any other) was sent to a process that has exited since (a delayed REQ
  // reaching its restarted successor, seed 6007714): its sender pairs it
  // with that process's QPNs and rkeys, which mean nothing here (QPNs are
  // reused). Refused before anything is recorded; the sender fails the
  // slices bound to that incarnation instead of waiting for its timeout.
  if (TargetsAnotherIncarnation(m)) {
    NoteEvent("req_other_target", key, m.incarnation, m.generation);
    SendReply(from, m, HandshakeType::kError, kTargetRestarted);
    return true;
  }
  if (rails_[key.first].parked) {
    // The device is being closed and re-opened (DEVICE_FATAL), or its
    // bring-up failed and waits for its retry in place: no endpoint can be
    // built on it now (its CQs and their ledgers are being replaced or do
    // not exist). The peer resends its REQ until the handshake timeout.
    NoteEvent("req_parked", key, m.incarnation, m.generation);
    return true;
  }
  // C6: a REQ from an incarnation this key already replaced is a delayed
  // REQ of the peer's previous process: STALE, nothing changes.
  bool stale = WasReplaced(key, m.incarnation) && !Mut(base::Mutation::kEngineC6AcceptStale);
  // C6: a REQ of a generation older than one this incarnation of the peer
  // already sent comes from an endpoint it gave up (a delayed or reordered
  // REQ): STALE, nothing changes. Accepting it onto a CONNECTING endpoint
  // would pair our QPs with QPNs the peer has reused since (swarm seeds of
  // issue 16; C5SimultaneousOpenUnderHandshakeChurn seed 259). (Either C6
  // stale switch turns this gate off: kEngineC6AcceptStale then reaches the
  // accept table's R5 as it always did.)
  stale = stale || (NoteGenerationIsOlder(key, m.incarnation, m.generation) &&
                    !Mut(base::Mutation::kEngineC6AcceptOlderGeneration) &&
                    !Mut(base::Mutation::kEngineC6AcceptStale));
  if (!stale) return false;
  NoteEvent("stale_req", key, m.incarnation, m.generation);
  SendReply(from, m, HandshakeType::kStale, "");
  return true;
}

bool Worker::TargetsAnotherIncarnation(const HandshakeMessage& m) const {
  return m.echo_incarnation != 0 && m.echo_incarnation != env_->incarnation &&
         !Mut(base::Mutation::kEngineC6AcceptOtherTarget);
}

LocalEndpointState Worker::AcceptStateOf(const Endpoint* ep, RecordedPeer* rec) const {
  if (ep == nullptr) return LocalEndpointState::kNone;
  if (ep->peer().has_value()) {
    rec->known = true;
    rec->incarnation = ep->peer()->incarnation;
    rec->generation = ep->peer()->generation;
    rec->qpns = ep->peer()->qpns;
  }
  return ep->state() == EndpointState::kReady ? LocalEndpointState::kReady
                                              : LocalEndpointState::kConnecting;
}

void Worker::ServeWithFreshEndpoint(const HandshakeMessage& m, const std::string& from,
                                    const Key& key) {
  if (shutdown_) {
    SendReply(from, m, HandshakeType::kError, "shutting_down");
    return;
  }
  if (CqRecovering(key.first)) {
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
    ++stats_.simultaneous_opens;
  } else if (!ep->ToRtr(peer).ok()) {
    Retire(ep, RetireReason::kHandshakeFailed);
    return;
  }
  if (ToRtsAndReady(ep, key, m.generation)) SendRtu(ep, m, from);
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
  (void)ToRtsAndReady(ep, key, m.generation);
}

bool Worker::ToRtsAndReady(Endpoint* ep, const Key& key, uint64_t peer_generation) {
  if (!ep->ToRts().ok()) {
    Retire(ep, RetireReason::kHandshakeFailed);
    return false;
  }
  ep->MarkReady();
  ++stats_.handshakes_done;
  if (auto kept = kept_windows_.find(key); kept != kept_windows_.end()) {
    // Test-only (kEngineMwReuseAcrossEndpoints): the old endpoint's rkeys.
    ep->peer_windows = std::move(kept->second);
    kept_windows_.erase(kept);
  }
  FERRY_CHECK(ep->peer().has_value());  // READY only once the peer is recorded
  NoteReadyIncarnation(key, ep->peer()->incarnation);
  NoteEvent("ep_ready", key, ep->generation(), peer_generation);
  return true;
}

// C6: READY means the process at the peer's address answered this
// handshake, so the incarnation the key was last READY with, if another,
// has exited: a delayed REQ of it is STALE from now on (WasReplaced), even
// when no REQ of the new one retired our endpoint (the old endpoint died of
// errors or eviction first). Property EngineStateProp found it (a port flap,
// a restart and duplicated, reordered control messages).
void Worker::NoteReadyIncarnation(const Key& key, uint64_t incarnation) {
  auto [it, fresh] = EmplaceBounded(ready_incarnation_, ready_order_, key, incarnation);
  if (fresh) return;
  if (it->second != incarnation && !Mut(base::Mutation::kEngineC6ForgetReplacedAtReady))
    RememberReplaced(key, it->second);
  it->second = incarnation;
}

void Worker::OnStaleOrError(const HandshakeMessage& m, const std::string& from) {
  (void)from;
  const std::optional<uint32_t> ctx = ContextOfNic(m.dst_nic);
  if (!ctx) return;
  const Key key{*ctx, m.src_nic_path};
  NoteEvent("stale_recv", key, static_cast<uint64_t>(m.type), m.echo_generation);
  Endpoint* ep = Peek(key);
  // Only an answer to our own REQ of this very endpoint counts.
  if (ep == nullptr || ep->generation() != m.echo_generation ||
      m.echo_incarnation != env_->incarnation)
    return;
  // The process at that address is not the one our REQ named: the slices
  // bound to that incarnation's rkeys can never be posted (C6). Whatever
  // our endpoint's state: a simultaneous open may have paired it with the
  // new process meanwhile.
  if (m.type == HandshakeType::kError && m.error_message == kTargetRestarted &&
      ep->target_incarnation != 0) {
    RememberIn(exited_, exited_order_, key, ep->target_incarnation);
    FailBoundTo(key, ep->target_incarnation);
  }
  // The handshake failed; the next post makes a fresh endpoint.
  if (ep->state() != EndpointState::kConnecting || ep->peer().has_value()) return;
  // The peer runs another qps_per_endpoint: every REQ to it is refused
  // alike, so the key's queued slices fail now (unposted: no WR exists
  // for them, C1) instead of retrying until their deadline. A later
  // submit asks again (the peer may have been reconfigured).
  if (m.type == HandshakeType::kError && m.error_message == kQpCountMismatch) {
    ++stats_.qp_count_refusals;
    PendingQueue* dq = pending_.FindListed(key.first, key.second);
    const uint32_t failed = dq == nullptr ? 0 : FailAllUnposted(*dq);
    stats_.config_failed += failed;
    NoteEvent("qp_count_refused", key, ep->generation(), failed);
  }
  Retire(ep, RetireReason::kHandshakeFailed);
}

void Worker::FailBoundTo(const Key& key, uint64_t incarnation) {
  PendingQueue* found = pending_.FindListed(key.first, key.second);
  if (found == nullptr || incarnation == 0) return;
  PendingQueue& dq = *found;
  // One pass around the queue (bounded by its length): what stays goes
  // back to the end, so the order of the rest is kept.
  const size_t n = dq.size();
  for (size_t i = 0; i < n; ++i) {
    const Pending p = dq.front();
    dq.pop_front();
    if (p.route->peer_incarnation == incarnation) {
      FailOtherIncarnation(p);
    } else {
      dq.push_back(p);
    }
  }
}

void Worker::FailOtherIncarnation(const Pending& p) {
  // Withdrawn FAILED: no WR exists for it (C1), the cause is that no
  // endpoint to the process its rkeys belong to can be made (C2). The
  // descriptor is refetched (the answer names the new incarnation; the
  // user must open the segment again).
  if (!p.route->task->TryWithdrawSlice(p.slice, SliceOutcome::kFailed).moved) return;
  ++stats_.other_incarnation_fails;
  if (env_->remote_access_error)
    env_->remote_access_error(id_, p.route->segment, p.route->segment_version);
}

bool Worker::FrontExited(const Key& key, const PendingQueue& dq) const {
  if (exited_.empty()) return false;
  auto it = exited_.find(key);
  if (it == exited_.end()) return false;
  const std::deque<uint64_t>& gone = it->second;
  return std::find(gone.begin(), gone.end(), dq.front().route->peer_incarnation) != gone.end();
}

bool Worker::FrontDroppable(const Key& key, const PendingQueue& dq) const {
  FERRY_CHECK(!dq.empty());
  if (dq.front().route->task->latched().has_value() && !Mut(base::Mutation::kEngineC2RepostLatched))
    return true;
  return FrontExited(key, dq);
}

void Worker::DropExitedFront(const Key& key, PendingQueue& dq) {
  // Bounded by the queue's length.
  while (!dq.empty() && FrontExited(key, dq)) {
    FailOtherIncarnation(dq.front());
    dq.pop_front();
  }
}

}  // namespace ferry::engine
