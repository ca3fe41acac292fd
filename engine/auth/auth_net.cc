// engine/auth/auth_net.cc: the authenticating ControlNet decorator (see
// auth_net.h for the protocol and what must stay true).
#include "engine/auth/auth_net.h"

#include <algorithm>
#include <string>
#include <utility>

#include "base/check.h"
#include "engine/wire_bytes.h"

namespace ferry::engine::auth {

namespace {

constexpr std::string_view kLabel = "ferry-auth-v1";

absl::Span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// role | T, T = label | Nc | Ns | session | client id | server id.
std::vector<uint8_t> Transcript(char role, const Nonce& nc, const Nonce& ns, uint64_t sid,
                                const std::string& client_id, const std::string& server_id) {
  WireWriter w;
  w.Le(static_cast<uint8_t>(role), 1);
  w.Bytes(AsBytes(kLabel));
  w.Bytes(nc);
  w.Bytes(ns);
  w.Le(sid, 8);
  w.Str(client_id, kIdentityBytesMax);
  w.Str(server_id, kIdentityBytesMax);
  return w.Take();
}

Tag Mac(std::string_view key, absl::Span<const uint8_t> data) {
  return HmacSha256(AsBytes(key), data);
}

// dir 1: sent by the session's client; 2: by its server.
Tag DataTag(const Tag& sk, uint8_t dir, uint64_t sid, uint64_t seq,
            absl::Span<const uint8_t> payload) {
  WireWriter w;
  w.Le(dir, 1);
  w.Le(sid, 8);
  w.Le(seq, 8);
  w.Bytes(payload);
  return HmacSha256(sk, w.Take());
}

}  // namespace

AuthNet::AuthNet(hal::ControlNet* inner, const AuthConfig& config, hal::Entropy* entropy,
                 const base::Mutations* mutations)
    : inner_(inner),
      config_(config),
      entropy_(entropy),
      mutations_(mutations),
      identity_(config.identity.empty() ? inner->LocalAddress() : config.identity) {
  FERRY_CHECK(inner_ != nullptr && entropy_ != nullptr);
}

AuthStats AuthNet::stats() const {
  base::MutexLock lock(&mu_);
  return stats_;
}

std::optional<std::string> AuthNet::KeyFor(std::string_view identity) const {
  for (const PeerSecret& p : config_.peer_secrets)
    if (p.identity == identity) return p.secret;
  if (!config_.secret.empty()) return config_.secret;
  return std::nullopt;
}

Nonce AuthNet::NewNonce() {
  Nonce n{};
  for (size_t i = 0; i < n.size(); i += 8) {
    const uint64_t r = entropy_->Next64();
    for (size_t b = 0; b < 8; ++b) n[i + b] = static_cast<uint8_t>(r >> (8 * b));
  }
  return n;
}

uint64_t AuthNet::NewSessionId() {
  for (int i = 0; i < 64; ++i) {  // bounded: a collision of 64-bit draws is rare
    const uint64_t id = entropy_->Next64();
    if (id != 0 && !sessions_.contains(id) && !challenges_.contains(id)) return id;
  }
  FERRY_CHECK(false && "64 colliding session ids");
  return 0;
}

void AuthNet::Emit(std::string peer, const AuthMessage& m, std::vector<Out>& out) {
  auto bytes = EncodeAuth(m);
  FERRY_CHECK(bytes.ok());  // we only build valid messages
  out.push_back(Out{std::move(peer), std::move(*bytes)});
}

void AuthNet::Flush(std::vector<Out>& out) {
  for (Out& o : out) (void)inner_->Send(o.peer, o.bytes);  // datagrams: loss is the model
  out.clear();
}

uint64_t AuthNet::NewestFor(std::string_view peer) const {
  uint64_t best = 0, best_order = 0;
  for (const auto& [id, s] : sessions_)
    if (s.peer == peer && s.order > best_order) {
      best = id;
      best_order = s.order;
    }
  return best;
}

void AuthNet::Open(uint64_t sid, Session s) {
  // One session per (peer, role): a new one replaces the old.
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = it->second.peer == s.peer && it->second.client == s.client ? sessions_.erase(it)
                                                                    : std::next(it);
  }
  while (sessions_.size() >= config_.sessions_max) {
    auto oldest = sessions_.begin();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it)
      if (it->second.order < oldest->second.order) oldest = it;
    sessions_.erase(oldest);
  }
  s.order = ++order_;
  sessions_.emplace(sid, std::move(s));
  ++stats_.sessions_established;
}

void AuthNet::SendData(uint64_t sid, Session& s, std::vector<uint8_t> payload,
                       std::vector<Out>& out) {
  if (s.client && !s.confirmed) {
    AuthMessage proof;
    proof.type = AuthType::kProof;
    proof.session = sid;
    proof.proof = s.proof;
    Emit(s.peer, proof, out);
  }
  AuthMessage m;
  m.type = AuthType::kData;
  m.session = sid;
  m.seq = ++s.send_seq;
  m.tag = DataTag(s.key, s.client ? 1 : 2, sid, m.seq, payload);
  m.payload = payload;
  Emit(s.peer, m, out);
  s.recent.push_back(std::move(payload));
  while (s.recent.size() > kRecentPayloadsMax) s.recent.pop_front();
}

void AuthNet::Enqueue(const std::string& peer, std::vector<uint8_t> payload,
                      std::vector<Out>& out) {
  auto [it, fresh] = hellos_.try_emplace(peer);
  Hello& h = it->second;
  if (fresh) h.nonce = NewNonce();
  h.queue.push_back(std::move(payload));
  while (h.queue.size() > config_.pending_max) {
    h.queue.pop_front();
    ++stats_.dropped_queue_full;
  }
  // (Re)send the HELLO with the same nonce: the engine's own resends pace
  // it, and a lost HELLO or CHALLENGE is recovered by the next one.
  AuthMessage m;
  m.type = AuthType::kHello;
  m.client_nonce = h.nonce;
  m.identity = identity_;
  Emit(peer, m, out);
}

absl::Status AuthNet::Send(std::string_view peer, absl::Span<const uint8_t> bytes) {
  if (!authenticating()) return inner_->Send(peer, bytes);
  if (bytes.size() > kAuthPayloadBytesMax)
    return absl::InvalidArgumentError("control message too long for an authenticated envelope");
  std::vector<Out> out;
  {
    base::MutexLock lock(&mu_);
    std::vector<uint8_t> payload(bytes.begin(), bytes.end());
    const std::string key(peer);
    if (const uint64_t sid = NewestFor(key); sid != 0) {
      SendData(sid, sessions_.at(sid), std::move(payload), out);
    } else {
      Enqueue(key, std::move(payload), out);
    }
  }
  absl::Status first = absl::OkStatus();
  for (Out& o : out) {
    absl::Status s = inner_->Send(o.peer, o.bytes);
    if (first.ok()) first = s;
  }
  return first;
}

absl::StatusOr<std::optional<hal::Message>> AuthNet::Poll(uint64_t timeout_ns) {
  std::vector<Out> out;
  std::optional<hal::Message> result;
  for (size_t n = 0; n < kPollBatchMax; ++n) {
    {
      base::MutexLock lock(&mu_);
      if (!ready_.empty()) {
        result = std::move(ready_.front());
        ready_.pop_front();
        ++stats_.delivered;
        break;
      }
    }
    auto polled = inner_->Poll(n == 0 ? timeout_ns : 0);
    if (!polled.ok()) return polled.status();
    if (!polled->has_value()) break;
    base::MutexLock lock(&mu_);
    OnMessage(std::move(**polled), out, ready_);
  }
  Flush(out);
  return result;
}

void AuthNet::OnMessage(hal::Message msg, std::vector<Out>& out,
                        std::deque<hal::Message>& deliver) {
  if (!config_.allowlist.empty() && !on(base::Mutation::kEngineAuthIgnoreAllowlist) &&
      std::find(config_.allowlist.begin(), config_.allowlist.end(), msg.source_host) ==
          config_.allowlist.end()) {
    ++stats_.dropped_allowlist;
    return;
  }
  if (!authenticating()) {
    deliver.push_back(std::move(msg));
    return;
  }
  if (!IsAuthMessage(msg.bytes)) {
    ++stats_.dropped_unauthenticated;
    return;
  }
  auto m = DecodeAuth(msg.bytes);
  if (!m.ok()) {
    ++stats_.dropped_malformed;
    return;
  }
  switch (m->type) {
    case AuthType::kHello:
      return OnHello(msg, *m, out);
    case AuthType::kChallenge:
      return OnChallenge(msg, *m, out);
    case AuthType::kProof:
      return OnProof(msg, *m, out, deliver);
    case AuthType::kData:
      return OnData(std::move(msg), *m, out, deliver);
    case AuthType::kUnknown:
      return OnUnknown(msg, *m, out);
  }
}

void AuthNet::OnHello(const hal::Message& msg, const AuthMessage& m, std::vector<Out>& out) {
  const std::optional<std::string> key = KeyFor(m.identity);
  if (!key) {
    ++stats_.dropped_unknown_identity;
    return;
  }
  while (challenges_.size() >= config_.pending_max) {
    auto oldest = challenges_.begin();
    for (auto it = challenges_.begin(); it != challenges_.end(); ++it)
      if (it->second.order < oldest->second.order) oldest = it;
    challenges_.erase(oldest);
  }
  const uint64_t sid = NewSessionId();
  Challenge c;
  c.peer = msg.from;
  c.identity = m.identity;
  c.client_nonce = m.client_nonce;
  c.server_nonce = NewNonce();
  c.order = ++order_;
  AuthMessage reply;
  reply.type = AuthType::kChallenge;
  reply.client_nonce = c.client_nonce;
  reply.server_nonce = c.server_nonce;
  reply.session = sid;
  reply.identity = identity_;
  reply.proof =
      Mac(*key, Transcript('S', c.client_nonce, c.server_nonce, sid, m.identity, identity_));
  challenges_.emplace(sid, std::move(c));
  Emit(msg.from, reply, out);
}

void AuthNet::OnChallenge(const hal::Message& msg, const AuthMessage& m, std::vector<Out>& out) {
  auto h = hellos_.find(msg.from);
  if (h == hellos_.end() || h->second.nonce != m.client_nonce) {
    ++stats_.dropped_stale;  // answers no HELLO of ours: replayed or reordered
    return;
  }
  const std::optional<std::string> key = KeyFor(m.identity);
  if (!key) {
    ++stats_.dropped_unknown_identity;
    return;
  }
  const Tag want =
      Mac(*key, Transcript('S', m.client_nonce, m.server_nonce, m.session, identity_, m.identity));
  if (!TagsEqual(want, m.proof)) {
    ++stats_.dropped_bad_proof;  // the HELLO stays outstanding for the real server
    return;
  }
  AuthMessage proof;
  proof.type = AuthType::kProof;
  proof.session = m.session;
  proof.proof =
      Mac(*key, Transcript('C', m.client_nonce, m.server_nonce, m.session, identity_, m.identity));
  Session s;
  s.peer = msg.from;
  s.identity = m.identity;
  s.client = true;
  s.proof = proof.proof;
  if (h->second.queue.empty()) Emit(msg.from, proof, out);  // else SendData sends it
  s.key =
      Mac(*key, Transcript('K', m.client_nonce, m.server_nonce, m.session, identity_, m.identity));
  std::deque<std::vector<uint8_t>> queue = std::move(h->second.queue);
  hellos_.erase(h);
  Open(m.session, std::move(s));
  Session& opened = sessions_.at(m.session);
  for (std::vector<uint8_t>& p : queue) SendData(m.session, opened, std::move(p), out);
}

void AuthNet::OnProof(const hal::Message& msg, const AuthMessage& m, std::vector<Out>& out,
                      std::deque<hal::Message>& deliver) {
  auto c = challenges_.find(m.session);
  if (c == challenges_.end()) {
    ++stats_.dropped_stale;  // no challenge of ours: replayed, or answered already
    return;
  }
  if (c->second.peer != msg.from) {
    ++stats_.dropped_wrong_sender;
    return;
  }
  const Challenge& ch = c->second;
  const std::optional<std::string> key = KeyFor(ch.identity);
  FERRY_CHECK(key.has_value());  // checked at its HELLO; the config is constant
  const Tag want = Mac(
      *key, Transcript('C', ch.client_nonce, ch.server_nonce, m.session, ch.identity, identity_));
  if (!TagsEqual(want, m.proof) && !on(base::Mutation::kEngineAuthAcceptBadProof)) {
    ++stats_.dropped_bad_proof;  // the challenge stays for the real client
    return;
  }
  Session s;
  s.peer = ch.peer;
  s.identity = ch.identity;
  s.client = false;
  s.confirmed = true;
  s.key = Mac(*key,
              Transcript('K', ch.client_nonce, ch.server_nonce, m.session, ch.identity, identity_));
  std::deque<hal::Message> early = std::move(c->second.early);
  challenges_.erase(c);
  Open(m.session, std::move(s));
  for (hal::Message& e : early) {
    auto d = DecodeAuth(e.bytes);
    FERRY_CHECK(d.ok());  // decoded once already
    OnData(std::move(e), *d, out, deliver);
  }
}

bool AuthNet::AcceptData(uint64_t sid, Session& s, const hal::Message& msg, const AuthMessage& m) {
  if (s.peer != msg.from) {
    ++stats_.dropped_wrong_sender;
    return false;
  }
  const Tag want = DataTag(s.key, s.client ? 2 : 1, sid, m.seq, m.payload);
  if (!TagsEqual(want, m.tag)) {
    ++stats_.dropped_bad_tag;
    return false;
  }
  if (!on(base::Mutation::kEngineAuthNoReplayWindow)) {
    if (m.seq + kReplayWindow <= s.recv_high) {
      ++stats_.dropped_replayed;  // older than the window: cannot tell, refuse
      return false;
    }
    if (m.seq <= s.recv_high && ((s.recv_mask >> (s.recv_high - m.seq)) & 1) != 0) {
      ++stats_.dropped_replayed;
      return false;
    }
  }
  if (m.seq > s.recv_high) {
    const uint64_t shift = m.seq - s.recv_high;
    s.recv_mask = shift >= 64 ? 0 : s.recv_mask << shift;
    s.recv_high = m.seq;
  }
  s.recv_mask |= uint64_t{1} << (s.recv_high - m.seq);
  s.confirmed = true;  // the server holds the session: no more PROOFs
  return true;
}

void AuthNet::OnData(hal::Message msg, const AuthMessage& m, std::vector<Out>& out,
                     std::deque<hal::Message>& deliver) {
  auto it = sessions_.find(m.session);
  if (it == sessions_.end()) {
    if (auto c = challenges_.find(m.session); c != challenges_.end() &&
                                              c->second.peer == msg.from &&
                                              c->second.early.size() < kEarlyDataMax) {
      c->second.early.push_back(std::move(msg));  // overtook its PROOF: judged after it
      return;
    }
    ++stats_.dropped_unknown_session;
    AuthMessage unknown;
    unknown.type = AuthType::kUnknown;
    unknown.session = m.session;
    Emit(msg.from, unknown, out);
    return;
  }
  if (!AcceptData(m.session, it->second, msg, m)) return;
  hal::Message d;
  d.from = std::move(msg.from);
  d.source_host = std::move(msg.source_host);
  d.identity = it->second.identity;
  d.bytes = m.payload;
  deliver.push_back(std::move(d));
}

void AuthNet::OnUnknown(const hal::Message& msg, const AuthMessage& m, std::vector<Out>& out) {
  auto it = sessions_.find(m.session);
  if (it == sessions_.end() || it->second.peer != msg.from) {
    ++stats_.dropped_stale;
    return;
  }
  // The peer lost the session (it restarted, or evicted it): authenticate
  // again and resend what it may not have read.
  std::deque<std::vector<uint8_t>> recent = std::move(it->second.recent);
  const std::string peer = it->second.peer;
  sessions_.erase(it);
  if (recent.empty()) return;
  for (std::vector<uint8_t>& p : recent) Enqueue(peer, std::move(p), out);
}

}  // namespace ferry::engine::auth
