// engine/worker_windows.cc: revocable remote access through type 2 memory
// windows (docs/security.md section 6; the state is engine/windows.h).
//
// The protocol, on one READY endpoint (both sides may be either role):
//   initiator                              target
//   slice of windowed range W, no rkeys
//     WINREQ(W) ---------------------->    W offered to this peer? else
//                                          WIN(W, refused)
//                                          a window per QP: alloc, bind WR
//                                          (one CQE of quota each, C4)
//                                          ... every bind CQE SUCCESS
//     <------------------------ WIN(W, rkey per QP)
//   posts each slice with the rkey of the
//   window bound on its QP
// A WINREQ is resent on the handshake timer, at most handshake_retries
// times; then, or on a refusal, the range's queued slices fail unposted
// (no WR exists for them, C1) and the descriptor is refetched. A WINREQ on
// a CONNECTING endpoint whose REP it answers stands for the RTU: its sender
// got our REP and is at RTS.
// Retiring an endpoint deallocates every window it bound, before any of
// its QPs is destroyed (rxe blocks destroy_qp for ~50 s otherwise; the sim
// flags it): the peer's rkeys are refused at once, on every QP.
//
// What must stay true: see engine/windows.h.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "engine/worker.h"
#include "engine/worker_internal.h"
#include "engine/wr_id.h"

namespace ferry::engine {

using namespace worker_internal;  // NOLINT(build/namespaces): the worker's own helpers

// ------------------------------------------------------------ initiator
bool Worker::HasPeerWindows(const Endpoint& ep, uint64_t window) const {
  auto it = ep.peer_windows.find(window);
  return it != ep.peer_windows.end() && it->second.rkeys.size() == ep.qps().size();
}

uint32_t Worker::PeerWindowRkey(const Endpoint& ep, uint64_t window, uint32_t qi) const {
  auto it = ep.peer_windows.find(window);
  if (it == ep.peer_windows.end() || qi >= it->second.rkeys.size()) return 0;
  return it->second.rkeys[qi];
}

bool Worker::WindowsReady(const Key& key, Endpoint* ep, PendingQueue& dq) {
  FERRY_CHECK(!dq.empty());
  const uint64_t window = dq.front().route->window;
  if (window == 0 || HasPeerWindows(*ep, window)) return true;
  if (Mut(base::Mutation::kEngineMwPostBeforeWin)) return true;  // the bug: rkey 0 goes out
  PeerWindows& pw = ep->peer_windows[window];
  if (pw.refused) {
    FailWindowed(dq, window);
    return false;
  }
  const uint64_t now = env_->clock->NowNs();
  if (pw.requests > 0 && now < pw.next_request_ns) return false;
  if (pw.requests > cfg_.handshake_retries) {
    // Never answered: as a handshake that timed out, the waiting slices
    // fail; the next slice of the range asks afresh.
    NoteEvent("win_given_up", key, window, pw.requests);
    ep->peer_windows.erase(window);
    FailWindowed(dq, window);
    return false;
  }
  SendWinReq(ep, window);
  pw.next_request_ns = now + cfg_.handshake_timeout_ns;
  ++pw.requests;
  return false;
}

std::optional<uint64_t> Worker::WindowWaitNs(const Endpoint& ep, const Pending& front) const {
  const uint64_t window = front.route->window;
  if (window == 0 || HasPeerWindows(ep, window) || Mut(base::Mutation::kEngineMwPostBeforeWin))
    return std::nullopt;
  auto it = ep.peer_windows.find(window);
  // Not asked yet, or refused: the next step acts on it.
  if (it == ep.peer_windows.end() || it->second.refused || it->second.requests == 0)
    return env_->clock->NowNs();
  return it->second.next_request_ns;
}

void Worker::FailWindowed(PendingQueue& dq, uint64_t window) {
  // The front slices of the refused range (bounded by the queue); a later
  // slice of it fails when it reaches the front.
  while (!dq.empty() && dq.front().route->window == window) {
    const Pending p = dq.front();
    dq.pop_front();
    if (!p.route->task->TryWithdrawSlice(p.slice, SliceOutcome::kFailed).moved) continue;
    ++stats_.windowed_failed;
    if (env_->remote_access_error)
      env_->remote_access_error(id_, p.route->segment, p.route->segment_version);
  }
}

HandshakeMessage Worker::WindowMessage(const Endpoint& ep, HandshakeType type,
                                       uint64_t window) const {
  FERRY_CHECK(ep.peer().has_value());
  HandshakeMessage m;
  m.type = type;
  m.incarnation = env_->incarnation;
  m.generation = ep.generation();
  m.echo_incarnation = ep.peer()->incarnation;
  m.echo_generation = ep.peer()->generation;
  m.src_nic_path = env_->net->LocalAddress() + "@" + NicName(ep.context());
  m.dst_nic = NicOf(ep.peer_path());
  m.window = window;
  return m;
}

void Worker::SendWinReq(Endpoint* ep, uint64_t window) {
  const HandshakeMessage m = WindowMessage(*ep, HandshakeType::kWinReq, window);
  Send(AddressOf(ep->peer_path()), m, nullptr);
  ++stats_.win_requests;
  NoteEvent("winreq_sent", Key{ep->context(), ep->peer_path()}, window, ep->generation());
}

void Worker::OnWin(const HandshakeMessage& m) {
  const std::optional<uint32_t> ctx = ContextOfNic(m.dst_nic);
  if (!ctx) return;
  const Key key{*ctx, m.src_nic_path};
  Endpoint* ep = Peek(key);
  // Only a WIN of this very pairing: our endpoint, the peer's.
  if (ep == nullptr || ep->state() != EndpointState::kReady ||
      ep->generation() != m.echo_generation || m.echo_incarnation != env_->incarnation ||
      !ep->peer() || ep->peer()->incarnation != m.incarnation ||
      ep->peer()->generation != m.generation) {
    NoteEvent("win_dropped", key, m.window, m.echo_generation);
    return;
  }
  if (m.window_status == WindowStatus::kNoEndpoint) {
    // The peer retired this pairing: so does this side; the next post
    // opens a fresh endpoint (its WRs, if any, are flushed and reposted).
    NoteEvent("win_no_endpoint", key, m.window, ep->generation());
    Retire(ep, RetireReason::kSuperseded);
    return;
  }
  PeerWindows& pw = ep->peer_windows[m.window];
  if (m.window_status == WindowStatus::kRefused || m.window_rkeys.size() != ep->qps().size()) {
    NoteEvent("win_refused_recv", key, m.window, ep->generation());
    pw.refused = true;
    return;
  }
  pw.rkeys = m.window_rkeys;
  pw.refused = false;
  NoteEvent("win_recv", key, m.window, ep->generation());
}

// ------------------------------------------------------------ target
void Worker::OnWinReq(const HandshakeMessage& m, const std::string& from,
                      const std::string& identity) {
  const std::optional<uint32_t> ctx = ContextOfNic(m.dst_nic);
  if (!ctx) return;
  const Key key{*ctx, m.src_nic_path};
  NoteEvent("winreq_recv", key, m.window, m.generation);
  Endpoint* ep = Peek(key);
  if (ep == nullptr || ep->generation() != m.echo_generation ||
      m.echo_incarnation != env_->incarnation || !ep->peer() ||
      ep->peer()->incarnation != m.incarnation || ep->peer()->generation != m.generation ||
      ep->state() == EndpointState::kRetiring || ep->state() == EndpointState::kDestroyed) {
    // That pairing is gone here: its sender, READY and idle, would never
    // learn it otherwise (its WINREQs unanswered until it gives up).
    NoteEvent("winreq_no_endpoint", key, m.window, m.echo_generation);
    SendWinNoEndpoint(m, from, key);
    return;
  }
  // Its sender is READY, so it has our REP: as good as the RTU.
  if (ep->state() == EndpointState::kConnecting && !ToRtsAndReady(ep, key, m.generation)) return;
  const std::string& who = identity.empty() ? from : identity;
  if (!env_->window_offered || !env_->window_offered(m.window, who)) {
    SendWinRefused(m, from, ep);
    return;
  }
  auto [it, fresh] = ep->exposed.try_emplace(m.window);
  ExposedWindows& ex = it->second;
  if (!ex.win_bytes.empty()) {
    (void)env_->net->Send(from, ex.win_bytes);  // bound already: the WIN was lost
    return;
  }
  if (ex.failed) {
    SendWinRefused(m, from, ep);
    return;
  }
  if (BindsStuck(*ep, env_->clock->NowNs(), cfg_.handshake_timeout_ns)) {
    // A bind is a local operation: one still without its CQE when the
    // peer asks again (a handshake timeout later) sits on a hung QP. The
    // retire gets evidence, and the peer, told, reconnects before its
    // slices time out (sweep seed 21). SweepBinds does the same, later,
    // where nobody asks.
    NoteEvent("mw_bind_stuck", key, m.window, ex.binds_pending);
    Retire(ep, RetireReason::kTimeout);
    SendWinNoEndpoint(m, from, key);
    return;
  }
  // New, or part of its binds still to post (a transient failure stopped
  // them): post the rest; the WIN follows the last bind CQE.
  PostBinds(key, ep, m.window, ex);
  if (ex.failed) {
    SendWinRefused(m, from, ep);
  } else if (fresh && ex.binds_pending == 0) {
    ep->exposed.erase(it);  // nothing posted (no CQE is polled in between): the resend starts over
  }
}

void Worker::PostBinds(const Key& key, Endpoint* ep, uint64_t window, ExposedWindows& ex) {
  CqQuota& ledger = Ledger(ep->cq());
  const uint32_t nqp = static_cast<uint32_t>(ep->qps().size());
  Context* c = env_->contexts[ep->context()];
  ex.per_qp.resize(nqp);
  for (uint32_t qi = 0; qi < nqp; ++qi) {
    if (ex.per_qp[qi].mw.valid()) continue;  // posted by an earlier WINREQ
    DataQp& q = ep->qps()[qi];
    // One CQE per bind, reserved first (C4); no room (quota, the QP's
    // depth): the rest waits for the peer's resend.
    if (ledger.ZombieOverCap() || ledger.free() < 1 || q.fifo.size() >= ep->wr_depth()) return;
    FERRY_CHECK(ledger.Reserve(q.qp.get(), 1).ok());
    const uint32_t slot = AllocSlot();
    Slot& s = slots_[slot];
    s.generation = NextGeneration(s.generation);
    auto bound = c->BindWindow(window, q.qp.get(), EncodeWrId(WrId{slot, s.generation}));
    if (!bound.ok()) {
      FERRY_CHECK(ledger.Unreserve(q.qp.get(), 1).ok());
      free_slots_.push_back(slot);
      const absl::StatusCode code = bound.status().code();
      NoteEvent("mw_bind_failed", key, window, static_cast<uint64_t>(code));
      // ENOMEM and the like pass: the peer's resend posts the rest. A range
      // gone or not windowed here is refused (those posted complete and
      // are revoked with the endpoint).
      if (code == absl::StatusCode::kNotFound || code == absl::StatusCode::kFailedPrecondition)
        ex.failed = true;
      return;
    }
    FERRY_CHECK(s.route == nullptr);  // a free slot holds no route
    s.slice = 0;
    s.qp_uid = q.uid;
    s.ep = ep;
    s.qp_index = qi;
    s.qp = q.qp.get();
    s.in_use = true;
    s.window = window;
    q.fifo.push_back(slot);
    ex.per_qp[qi] = ExposedWindows::PerQp{bound->mw, bound->rkey};
    if (ex.binds_pending == 0) {
      ex.first_bind_ns = env_->clock->NowNs();
      bind_deadlines_.emplace_back(ex.first_bind_ns + BindWaitNs(), key);
    }
    ++ex.binds_pending;
    NoteEvent("mw_bind", key, q.qpn, window);
  }
}

void Worker::OnBindDone(Endpoint* ep, uint64_t window, hal::WcStatus st) {
  auto it = ep->exposed.find(window);
  if (it == ep->exposed.end()) return;
  ExposedWindows& ex = it->second;
  FERRY_CHECK_GT(ex.binds_pending, 0u);
  --ex.binds_pending;
  if (st != hal::WcStatus::kSuccess) {
    ex.failed = true;
    return;
  }
  ++stats_.windows_bound;
  if (ex.binds_pending > 0 || ex.failed || ep->state() != EndpointState::kReady) return;
  for (const ExposedWindows::PerQp& w : ex.per_qp)
    if (!w.mw.valid()) return;  // the rest are posted at the peer's resend
  SendWin(ep, window, ex);
}

void Worker::SendWin(Endpoint* ep, uint64_t window, ExposedWindows& ex) {
  HandshakeMessage m = WindowMessage(*ep, HandshakeType::kWin, window);
  for (const ExposedWindows::PerQp& w : ex.per_qp) m.window_rkeys.push_back(w.rkey);
  Send(AddressOf(ep->peer_path()), m, &ex.win_bytes);
  NoteEvent("win_sent", Key{ep->context(), ep->peer_path()}, window, ep->generation());
}

void Worker::SendWinRefused(const HandshakeMessage& m, const std::string& from, Endpoint* ep) {
  HandshakeMessage r = WindowMessage(*ep, HandshakeType::kWin, m.window);
  r.window_status = WindowStatus::kRefused;
  Send(from, r, nullptr);
  ++stats_.win_refusals;
  NoteEvent("win_refused", Key{ep->context(), ep->peer_path()}, m.window, ep->generation());
}

void Worker::SendWinNoEndpoint(const HandshakeMessage& m, const std::string& from, const Key& key) {
  // As generation, the endpoint it named (we hold none of that pairing).
  HandshakeMessage r = AnswerTo(m, HandshakeType::kWin, m.echo_generation, NicName(key.first));
  r.window = m.window;
  r.window_status = WindowStatus::kNoEndpoint;
  Send(from, r, nullptr);
}

uint64_t Worker::BindWaitNs() const {
  return cfg_.handshake_timeout_ns * (uint64_t{cfg_.handshake_retries} + 1);
}

bool Worker::BindsStuck(const Endpoint& ep, uint64_t now, uint64_t wait_ns) const {
  for (const auto& [window, ex] : ep.exposed)
    if (ex.binds_pending > 0 && now - ex.first_bind_ns >= wait_ns) return true;
  return false;
}

void Worker::SweepBinds(uint64_t now) {
  // Bounded by the binds posted since the last sweep.
  while (!bind_deadlines_.empty() && bind_deadlines_.front().first <= now) {
    const Key key = std::move(bind_deadlines_.front().second);
    bind_deadlines_.pop_front();
    Endpoint* ep = Peek(key);
    if (ep == nullptr || !BindsStuck(*ep, now, BindWaitNs())) continue;
    NoteEvent("mw_bind_stuck", key, ep->generation(), 0);
    Retire(ep, RetireReason::kTimeout);
  }
}

// ------------------------------------------------------------ revoke
void Worker::RevokeWindows(Endpoint* ep) {
  const Key key{ep->context(), ep->peer_path()};
  if (Mut(base::Mutation::kEngineMwReuseAcrossEndpoints) && !ep->peer_windows.empty())
    kept_windows_[key] = ep->peer_windows;
  ep->peer_windows.clear();
  if (ep->exposed.empty()) return;
  Context* c = env_->contexts[ep->context()];
  std::vector<uint32_t> per_qp(ep->qps().size(), 0);
  for (auto& [window, ex] : ep->exposed) {
    for (uint32_t qi = 0; qi < ex.per_qp.size(); ++qi) {
      ExposedWindows::PerQp& w = ex.per_qp[qi];
      if (!w.mw.valid()) continue;
      ++per_qp[qi];
      if (Mut(base::Mutation::kEngineMwKeepAtRetire)) continue;  // the bug: still bound
      if (c->DeallocWindow(window, w.mw).ok()) {
        ++stats_.windows_revoked;
      } else {
        ep->windows_left.push_back(WindowLeft{window, w.mw});
      }
      w.mw = hal::MwHandle{};
    }
  }
  ep->exposed.clear();
  // One record per QP that had windows, after their dealloc: the oracle
  // checks that none is bound on it any more.
  for (uint32_t qi = 0; qi < per_qp.size(); ++qi)
    if (per_qp[qi] > 0) NoteEvent("mw_revoked", key, ep->qps()[qi].qpn, per_qp[qi]);
}

void Worker::RetryRevokes(Endpoint* ep) {
  if (ep->windows_left.empty()) return;
  Context* c = env_->contexts[ep->context()];
  std::vector<WindowLeft> still;
  for (const WindowLeft& w : ep->windows_left) {
    if (c->DeallocWindow(w.region, w.mw).ok()) {
      ++stats_.windows_revoked;
    } else {
      still.push_back(w);
    }
  }
  ep->windows_left.swap(still);
}

}  // namespace ferry::engine
