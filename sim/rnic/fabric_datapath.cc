// sim/rnic/fabric_datapath.cc: the simulated RNIC's data path: post_send,
// packet events (requests, ACK/NAK, READ responses), the responder, the
// retry timer, completions (per-QP order, seeded interleaving, error and
// flush), CQ overrun, faults, and the hal::Verbs adapter (SimVerbs).
//
// What must stay true:
// - Per QP, WRs complete in post order: done_seq only advances from the head,
//   and a QP's CQEs reach its CQ through one FIFO (pending) whose ready times
//   never decrease.
// - Every DMA happens inside a packet event, touches only the packet's range
//   of registered memory, and is checked against the shadow memory.
// - Each loop is bounded by a queue length or a packet count.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/string_view.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "hal/errno_status.h"
#include "sim/rnic/fabric.h"

namespace ferry::sim {

namespace {
using base::AV;
}  // namespace

using hal::AsyncEventType;
using hal::QpState;
using hal::WcStatus;

namespace {

constexpr uint32_t kPsnMask = 0xffffff;
constexpr uint64_t kNoSeq = ~uint64_t{0};
constexpr uint64_t kHeaderBytes = 58;  // Eth+IP+UDP+BTH+RETH, roughly
constexpr uint32_t kAckEvery = 16;     // coalesced ACKs: at least every 16 WRITEs

// Signed distance a - b in 24-bit PSN space.
int32_t PsnDiff(uint32_t a, uint32_t b) {
  const uint32_t d = (a - b) & kPsnMask;
  return d >= 0x800000 ? static_cast<int32_t>(d) - 0x1000000 : static_cast<int32_t>(d);
}

absl::Status Errno(std::string_view call, int err) { return hal::ErrnoToStatus(call, err); }

bool Executing(QpState s) { return s == QpState::kRts || s == QpState::kSqd; }

}  // namespace

// ------------------------------------------------------------------ events

void Fabric::Push(EvType type, uint64_t t_ns, uint32_t a, uint32_t b, uint64_t c, uint32_t d,
                  uint32_t chan) {
  FERRY_CHECK_LT(events_.size(), size_t{1} << 28);
  const Event e{t_ns, next_event_seq_++, c, a, b, d, chan, type};
  if (chan == kNone) {
    events_.push(e);
    return;
  }
  if (chan >= chans_.size()) chans_.resize(chan + 1);
  std::deque<Event>& f = chans_[chan];
  FERRY_CHECK_LT(f.size(), size_t{1} << 26);
  if (f.empty()) {
    events_.push(e);
  } else {
    FERRY_CHECK_LE(f.back().t_ns, t_ns);  // a channel is FIFO in time
  }
  f.push_back(e);
}

Fabric::Event Fabric::PopNext() {
  const Event e = events_.top();
  if (e.chan != kNone) {
    std::deque<Event>& f = chans_[e.chan];
    FERRY_CHECK(!f.empty() && f.front().seq == e.seq);
    f.pop_front();
    if (!f.empty()) {
      events_.replace_top(f.front());
      return e;
    }
  }
  events_.pop();
  return e;
}

bool Fabric::Runnable() { return !events_.empty() && events_.top().t_ns <= clock_->NowNs(); }

uint64_t Fabric::Step() {
  for (uint32_t n = 0; n < config_.events_per_step_max && Runnable(); ++n) {
    const Event e = PopNext();
    Dispatch(e);
  }
  return 0;
}

std::optional<uint64_t> Fabric::NextWakeNs() {
  if (events_.empty()) return std::nullopt;
  return events_.top().t_ns;
}

void Fabric::RunUntil(uint64_t t_ns) {
  while (!events_.empty() && events_.top().t_ns <= t_ns) {
    const Event e = PopNext();
    clock_->AdvanceTo(e.t_ns);
    Dispatch(e);
  }
  clock_->AdvanceTo(t_ns);
}

bool Fabric::Settle(uint64_t budget_ns) {
  const uint64_t end = clock_->NowNs() + budget_ns;
  while (!events_.empty() && events_.top().t_ns <= end) {
    const Event e = PopNext();
    clock_->AdvanceTo(e.t_ns);
    Dispatch(e);
  }
  return events_.empty();
}

void Fabric::Dispatch(const Event& e) {
  ++stats_.events;
  switch (e.type) {
    case EvType::kReq:
      OnReq(e);
      break;
    case EvType::kResp:
      OnResp(e);
      break;
    case EvType::kTimer:
      OnTimer(e);
      break;
    case EvType::kCqeDeliver:
      DeliverPending(e.a);
      break;
    case EvType::kFaultTick:
      for (uint32_t d = 0; d < devices_.size(); ++d) {
        if (InjectFault(FaultKind::kLinkDown)) {
          LinkDown(d, config_.link_down_ns);
        } else if (InjectFault(FaultKind::kPortFlap)) {
          LinkDown(d, config_.port_flap_ns);
        }
      }
      Push(EvType::kFaultTick, clock_->NowNs() + config_.fault_tick_ns, 0, 0, 0, 0);
      break;
    case EvType::kScript: {
      const ScriptedFault& f = config_.script[e.a];
      if (!ApplyScripted(f).ok()) missed_.push_back(f);
      break;
    }
    case EvType::kPortUp:
      LinkUp(e.a);
      break;
  }
}

// ------------------------------------------------------------------ post

hal::PostResult Fabric::VPostSend(uint32_t host, hal::QpHandle qph,
                                  absl::Span<const hal::SendWr> chain) {
  hal::PostResult r;
  auto qi_or = CheckQp(host, qph, "ibv_post_send");
  if (!qi_or.ok()) {
    r.status = qi_or.status();
    return r;
  }
  const uint32_t qi = *qi_or;
  Qp& q = *qps_[qi];
  uint64_t enomem_at = kNoSeq;
  if (q.script_post_enomem > 0) {
    --q.script_post_enomem;
    CountFault(FaultKind::kPostSendEnomem);
    enomem_at = 0;
  } else if (!chain.empty() && InjectFault(FaultKind::kPostSendEnomem)) {
    enomem_at = prng_.Below(chain.size());
  }
  const QpState s = q.attr.qp_state;
  const bool can_post = s == QpState::kRts || s == QpState::kSqd || s == QpState::kErr;
  const uint64_t mtu = std::min(hal::MtuBytes(q.attr.path_mtu), hal::MtuBytes(config_.active_mtu));
  for (uint32_t i = 0; i < chain.size(); ++i) {
    const hal::SendWr& wr = chain[i];
    int err = 0;
    uint64_t len = 0;
    if (i == enomem_at) {
      err = ENOMEM;
    } else if (!can_post) {
      err = EINVAL;
    } else if (wr.opcode != hal::Opcode::kRdmaWrite && wr.opcode != hal::Opcode::kRdmaRead) {
      err = EINVAL;  // SEND/WRITE_WITH_IMM need receive queues: not modelled
    } else if (wr.num_sge > q.cap.max_send_sge || wr.num_sge > hal::kMaxSgeInline) {
      err = EINVAL;
    } else if (q.post_seq - q.free_seq >= q.cap.max_send_wr) {
      err = ENOMEM;  // slots free when CQEs are polled, not on execution
    } else {
      for (uint32_t k = 0; k < wr.num_sge; ++k) len += wr.sg_list[k].length;
      if (len > (uint64_t{1} << 31)) err = EINVAL;
    }
    if (err != 0) {
      r.status = Errno("ibv_post_send", err);
      r.first_bad = i;
      if (Executing(s) && !q.hung) Kick(qi);
      return r;
    }
    Wr& w = q.sq[q.post_seq % q.sq.size()];
    w.seq = q.post_seq++;
    w.wr = wr;
    if (!w.sent_payload.empty()) w.sent_payload = {};
    w.len = len;
    w.npkts = static_cast<uint32_t>(std::max<uint64_t>(1, (len + mtu - 1) / mtu));
    w.vpsn_first = q.next_vpsn;
    q.next_vpsn += w.npkts;
    w.signaled = q.sq_sig_all || (wr.send_flags & hal::kSendSignaled) != 0;
    w.started = false;
    ++stats_.wrs_posted;
    if (s == QpState::kErr && !q.hung && q.done_seq == w.seq) {
      // Posted in ERR: flushed at once.
      ++q.done_seq;
      q.send_seq = q.post_seq;
      q.sent_vpsn = q.ack_vpsn = q.next_vpsn;
      EmitCqe(qi, q, w, WcStatus::kWrFlushErr);
    }
  }
  r.first_bad = static_cast<uint32_t>(chain.size());
  if (s == QpState::kRts && !q.hung) Kick(qi);
  return r;
}

// ------------------------------------------------------------------ requester

uint64_t Fabric::TimeoutNs(const Qp& q) const { return uint64_t{4096} << q.attr.timeout; }

void Fabric::ArmTimer(uint32_t qi, Qp& q) {
  if (q.timer_pending || q.attr.timeout == 0 || q.sent_vpsn == q.ack_vpsn) return;
  q.timer_pending = true;
  Push(EvType::kTimer, q.last_progress_ns + TimeoutNs(q), qi, 0, 0, 0);
}

bool Fabric::StartWr(uint32_t qi, Qp& q, Wr& w) {
  w.started = true;
  if (InjectFault(FaultKind::kWrFlush)) {
    RaiseAsync(q.ctx, AsyncEventType::kQpFatal, qi, kNone, 0);
    EnterErr(qi, q);
    return false;
  }
  // Local keys are checked when the WR starts executing (as hardware does):
  // a bad lkey or range completes LOC_PROT_ERR.
  for (uint32_t k = 0; k < w.wr.num_sge; ++k) {
    const hal::Sge& sge = w.wr.sg_list[k];
    const uint32_t idx = sge.lkey >> 8;
    bool ok = idx != 0 && idx <= mrs_.size();
    if (ok) {
      const Mr& m = mrs_[idx - 1];
      ok = m.alive && m.key == sge.lkey && m.dev == q.dev && m.pd == q.pd &&
           sge.addr >= reinterpret_cast<uint64_t>(m.addr) &&
           sge.addr + sge.length <= reinterpret_cast<uint64_t>(m.addr) + m.len &&
           (w.wr.opcode != hal::Opcode::kRdmaRead || (m.access & hal::kAccessLocalWrite) != 0);
    }
    if (!ok) {
      FailAndFlush(qi, q, w.seq, WcStatus::kLocProtErr);
      return false;
    }
  }
  return true;
}

void Fabric::Kick(uint32_t qi) {
  Qp& q = *qps_[qi];
  if (!q.alive || q.attr.qp_state != QpState::kRts || q.hung) return;
  const bool was_idle = q.sent_vpsn == q.ack_vpsn;
  // The retry timer of an idle QP starts when its first packet starts to
  // leave, not when it joins the port's queue behind other QPs' packets.
  const uint64_t tx_start_ns = std::max(clock_->NowNs(), devices_[q.dev].tx_free_ns);
  while (q.send_seq < q.post_seq) {
    Wr& w = q.sq[q.send_seq % q.sq.size()];
    if (!w.started && !StartWr(qi, q, w)) return;
    const uint64_t end = w.vpsn_first + w.npkts;
    if (q.sent_vpsn < w.vpsn_first) q.sent_vpsn = w.vpsn_first;
    for (; q.sent_vpsn < end; ++q.sent_vpsn) SendReq(qi, q, w, q.sent_vpsn);
    ++q.send_seq;
  }
  if (was_idle && q.sent_vpsn != q.ack_vpsn) q.last_progress_ns = tx_start_ns;
  ArmTimer(qi, q);
}

uint64_t Fabric::Serialize(uint32_t dev, uint64_t payload_bytes) {
  Device& d = devices_[dev];
  const uint64_t ser =
      std::max<uint64_t>(1, (payload_bytes + kHeaderBytes) * 8 / config_.link_gbps);
  d.tx_free_ns = std::max(clock_->NowNs(), d.tx_free_ns) + ser;
  return d.tx_free_ns;
}

uint64_t Fabric::Arrival(uint64_t depart_ns, uint64_t* last_arrival_ns, uint64_t* path_faults) {
  uint64_t t = depart_ns + config_.link_latency_ns;
  if (config_.link_jitter_ns != 0) t += prng_.Below(config_.link_jitter_ns + 1);
  if (config_.straggler.num != 0 && prng_.Chance(config_.straggler)) {
    t += prng_.Below(config_.fabric_lifetime_ns + 1);
    if (path_faults != nullptr) ++*path_faults;
  }
  t = std::max(t, *last_arrival_ns);  // one path is FIFO
  *last_arrival_ns = t;
  return t;
}

bool Fabric::PacketLost(uint32_t src_dev, uint32_t dst_dev) {
  if (dst_dev == kNone || !devices_[src_dev].port_up || !devices_[dst_dev].port_up) return true;
  return InjectFault(FaultKind::kPacketLoss);
}

void Fabric::SendReq(uint32_t qi, Qp& q, Wr& w, uint64_t vpsn) {
  ++stats_.packets_sent;
  const uint64_t mtu = std::min(hal::MtuBytes(q.attr.path_mtu), hal::MtuBytes(config_.active_mtu));
  const uint64_t off = (vpsn - w.vpsn_first) * mtu;
  const uint64_t len =
      w.wr.opcode == hal::Opcode::kRdmaWrite && off < w.len ? std::min(mtu, w.len - off) : 0;
  const uint64_t depart_ns = Serialize(q.dev, len);
  if (q.script_drop > 0) {
    --q.script_drop;
    CountFault(FaultKind::kPacketLoss);
    ++stats_.packets_dropped;
    ++q.path_faults;
    return;
  }
  if (PacketLost(q.dev, q.dst_dev)) {
    ++stats_.packets_dropped;
    ++q.path_faults;
    return;
  }
  const uint64_t t = Arrival(depart_ns, &q.last_req_arrival_ns, &q.path_faults);
  q.sent_vpsn_hi = std::max(q.sent_vpsn_hi, vpsn + 1);
  Push(EvType::kReq, t, qi, static_cast<uint32_t>(w.seq), vpsn,
       static_cast<uint32_t>((q.psn_base + vpsn) & kPsnMask), ReqChan(qi));
}

void Fabric::SendResp(uint32_t ri, Qp& r, uint32_t src_qi, RespKind kind, uint32_t wire_psn,
                      uint64_t src_vpsn, uint64_t payload_bytes) {
  ++stats_.packets_sent;
  uint32_t req_qi = src_qi;
  if (!config_.mutations.on(base::Mutation::kSimRespToSource)) {
    req_qi = r.dst_dev == kNone ? kNone : FindQpByNumber(r.dst_dev, r.attr.dest_qp_num);
  }
  const uint64_t depart_ns = Serialize(r.dev, payload_bytes);
  if (req_qi == kNone) {  // the peer QP is gone: the response goes nowhere
    ++stats_.packets_dropped;
    return;
  }
  Qp& req = *qps_[req_qi];
  if (PacketLost(r.dev, req.dev)) {
    ++stats_.packets_dropped;
    ++req.path_faults;
    return;
  }
  const uint64_t t = Arrival(depart_ns, &r.last_resp_arrival_ns, &req.path_faults);
  Push(EvType::kResp, t, req_qi, kind, src_vpsn, wire_psn, RespChan(ri));
}

void Fabric::ShadowCheck(const void* addr, uint64_t len, bool local, std::string_view what) {
  if (shadow_.empty()) return;
  auto v = shadow_.Check(addr, len);
  if (v.has_value()) {
    Violate(local ? ViolationKind::kLocalAfterRelease : ViolationKind::kRemoteAfterFence,
            absl::StrCat(*v, " (", AV(what), ")"))
        .IgnoreError();
  }
}

const Fabric::Mr* Fabric::ResolveRkey(uint32_t dev, uint32_t pd, uint32_t rkey, uint64_t addr,
                                      uint64_t len, uint32_t need_access) const {
  const uint32_t idx = rkey >> 8;
  if (idx == 0 || idx > mrs_.size()) return nullptr;
  const Mr& m = mrs_[idx - 1];
  if (!m.alive || m.key != rkey || m.dev != dev || (pd != kNone && m.pd != pd)) return nullptr;
  if ((m.access & need_access) != need_access) return nullptr;
  const uint64_t base = reinterpret_cast<uint64_t>(m.addr);
  if (addr < base || addr + len > base + m.len || addr + len < addr) return nullptr;
  return &m;
}

bool Fabric::DmaLocal(uint32_t qi, Qp& q, const Wr& w, uint64_t off, uint64_t len, uint8_t* remote,
                      bool to_remote) {
  (void)qi;
  uint64_t pos = 0;
  uint64_t done = 0;
  for (uint32_t k = 0; k < w.wr.num_sge && done < len; ++k) {
    const hal::Sge& sge = w.wr.sg_list[k];
    const uint64_t s_end = pos + sge.length;
    if (s_end > off + done) {
      const uint64_t start = off + done - pos;
      const uint64_t n = std::min<uint64_t>(sge.length - start, len - done);
      const uint32_t idx = sge.lkey >> 8;
      if (idx == 0 || idx > mrs_.size()) return false;
      const Mr& m = mrs_[idx - 1];
      if (!m.alive || m.key != sge.lkey || m.dev != q.dev) return false;
      uint8_t* local = reinterpret_cast<uint8_t*>(sge.addr) + start;
      ShadowCheck(local, n, true, to_remote ? "local source of WRITE" : "local target of READ");
      if (to_remote) {
        std::memcpy(remote + done, local, n);
      } else {
        std::memcpy(local, remote + done, n);
      }
      done += n;
    }
    pos = s_end;
  }
  return true;
}

// ------------------------------------------------------------------ responder

void Fabric::OnReq(const Event& e) {
  Qp& rq = *qps_[e.a];
  auto drop = [this, &rq] {
    ++stats_.packets_dropped;
    ++rq.path_faults;
  };
  if (!rq.alive || rq.sq.empty()) return drop();  // requester gone: no DMA of its memory
  const Wr* wp = nullptr;
  {
    // Find the WR by its low 32 bits: it lies within the ring window.
    const uint64_t lo = rq.post_seq > rq.sq.size() ? rq.post_seq - rq.sq.size() : 0;
    uint64_t seq = (rq.post_seq & ~uint64_t{0xffffffff}) | e.b;
    if (seq >= rq.post_seq) seq -= uint64_t{1} << 32;
    if (seq >= lo && seq < rq.post_seq) {
      const Wr& cand = rq.sq[seq % rq.sq.size()];
      if (cand.seq == seq && e.c >= cand.vpsn_first && e.c < cand.vpsn_first + cand.npkts) {
        wp = &cand;
      }
    }
  }
  if (wp == nullptr) return drop();
  const Wr& wr = *wp;
  // The sim moves a packet's payload when it arrives, but an RNIC fetches
  // it when it transmits. A WR that completed (in error: a success needs
  // this packet's ACK) before its packet arrived has returned its local
  // buffer to the user: its packets carry the bytes saved at completion
  // (FailAndFlush), or are dropped if none were saved.
  const bool completed =
      wr.seq < rq.done_seq && !config_.mutations.on(base::Mutation::kSimFetchAfterCompletion);
  if (completed && wr.sent_payload.empty()) {
    ++stats_.late_packets_dropped;
    return drop();
  }
  const uint32_t dev = rq.dst_dev;
  if (dev == kNone || !devices_[dev].port_up) return drop();
  const uint32_t ri = FindQpByNumber(dev, rq.attr.dest_qp_num);
  if (ri == kNone) return drop();
  Qp& r = *qps_[ri];
  const QpState rs = r.attr.qp_state;
  if (rs != QpState::kRtr && rs != QpState::kRts && rs != QpState::kSqd) return drop();
  const int32_t diff = PsnDiff(e.d, r.epsn);
  if (diff > 0) {  // a gap: NAK once with the expected PSN
    if (!r.nak_sent) {
      r.nak_sent = true;
      SendResp(ri, r, e.a, kNakSeq, r.epsn, e.c - static_cast<uint64_t>(diff));
    }
    return drop();
  }
  const bool dup = diff < 0;
  if (dup) ++stats_.duplicates;
  if (rs == QpState::kRtr && !r.comm_est_sent) {
    r.comm_est_sent = true;
    RaiseAsync(r.ctx, AsyncEventType::kCommEst, ri, kNone, 0);
  }
  const uint64_t mtu = std::min(hal::MtuBytes(rq.attr.path_mtu), hal::MtuBytes(config_.active_mtu));
  const uint64_t off = (e.c - wr.vpsn_first) * mtu;
  const uint64_t len = off < wr.len ? std::min(mtu, wr.len - off) : 0;
  const bool is_write = wr.wr.opcode == hal::Opcode::kRdmaWrite;
  const bool last = e.c + 1 == wr.vpsn_first + wr.npkts;
  if (dup && is_write) {
    // Re-acknowledged without executing, with the PSN of the last packet
    // this responder executed (epsn - 1), not the duplicate's own PSN: an
    // ACK says "everything up to here was placed" (IBA C9-105; rxe's
    // duplicate_request acks qp->resp.ack_psn - 1). A requester whose PSNs
    // are not this responder's (a QP paired from another handshake) thus
    // never sees its own unexecuted packets acknowledged (seed 13854).
    const uint32_t ack_psn = config_.mutations.on(base::Mutation::kSimDupAckEchoesPsn)
                                 ? e.d
                                 : ((r.epsn - 1) & kPsnMask);
    SendResp(ri, r, e.a, kAck, ack_psn, e.c);
    return;
  }
  const uint32_t need = is_write ? hal::kAccessRemoteWrite : hal::kAccessRemoteRead;
  const Mr* m = (r.attr.qp_access_flags & need) == need
                    ? ResolveRkey(dev, r.pd, wr.wr.rkey, wr.wr.remote_addr, wr.len, need)
                    : nullptr;
  if (m == nullptr) {
    // Access violation: REM_ACCESS_ERR at the requester, responder to ERR.
    SendResp(ri, r, e.a, kNakAccess, e.d, e.c);
    RaiseAsync(r.ctx, AsyncEventType::kQpAccessErr, ri, kNone, 0);
    EnterErr(ri, r);
    return;
  }
  if (is_write) {
    uint8_t* dst = m->addr + (wr.wr.remote_addr - reinterpret_cast<uint64_t>(m->addr)) + off;
    ShadowCheck(dst, len, false, "remote target of WRITE");
    if (completed) {
      if (off + len > wr.sent_payload.size()) return drop();  // not sent before completion
      std::memcpy(dst, wr.sent_payload.data() + off, len);
      ++stats_.late_packets_landed;
    } else if (!DmaLocal(e.a, rq, wr, off, len, dst, true)) {
      // The requester's local MR vanished mid-WR: nothing placed.
      if (Executing(rq.attr.qp_state)) FailAndFlush(e.a, rq, wr.seq, WcStatus::kLocProtErr);
      return;
    }
    ++stats_.packets_executed;
    r.epsn = (r.epsn + 1) & kPsnMask;
    r.nak_sent = false;
    // ACK coalescing: while more of this requester's packets are already
    // on the wire behind this one, acknowledge only every kAckEvery-th
    // packet; the last one in a burst is always acknowledged.
    if (last) {
      ++r.unacked_wrs;
      const bool more = e.chan < chans_.size() && !chans_[e.chan].empty();
      if (!more || r.unacked_wrs >= kAckEvery) {
        r.unacked_wrs = 0;
        SendResp(ri, r, e.a, kAck, e.d, e.c);
      }
    }
    return;
  }
  // READ: the response carries the data; it is placed when it arrives. It
  // also acknowledges the WRITEs before it (the requester takes it as an
  // implicit ACK), so the coalescing count restarts.
  if (!dup) {
    ++stats_.packets_executed;
    r.epsn = (r.epsn + 1) & kPsnMask;
    r.nak_sent = false;
    r.unacked_wrs = 0;
    NoteReadResource(r, (e.d - static_cast<uint32_t>(e.c - wr.vpsn_first)) & kPsnMask, wr.npkts);
  } else if (!HasReadResource(r, e.d) &&
             !config_.mutations.on(base::Mutation::kSimDupReadAnyPsn)) {
    // A duplicate READ this responder never executed (its PSN is only
    // "old" in this responder's numbering: a requester paired from another
    // handshake): dropped. Re-executing it would answer with its own PSN,
    // which the requester takes as an ACK of the WRITEs before it, never
    // placed (seed 13854).
    return drop();
  }
  SendResp(ri, r, e.a, kReadResp, e.d, e.c, len);  // carries the data: serialized
}

void Fabric::NoteReadResource(Qp& r, uint32_t first_psn, uint32_t npkts) {
  if (r.read_res.empty()) r.read_res.resize(Qp::kReadResources);
  const uint32_t last = (r.read_res_next + Qp::kReadResources - 1) % Qp::kReadResources;
  if (r.read_res[last].npkts != 0 && r.read_res[last].first_psn == first_psn) return;
  r.read_res[r.read_res_next] = Qp::ReadResource{first_psn, npkts};
  r.read_res_next = (r.read_res_next + 1) % Qp::kReadResources;
}

bool Fabric::HasReadResource(const Qp& r, uint32_t psn) const {
  for (const Qp::ReadResource& res : r.read_res) {
    const uint32_t into = (psn - res.first_psn) & kPsnMask;
    if (res.npkts != 0 && into < res.npkts) return true;
  }
  return false;
}

// ------------------------------------------------------------------ responses

void Fabric::CompleteHead(uint32_t qi, Qp& q) {
  Wr& w = q.sq[q.done_seq % q.sq.size()];
  FERRY_CHECK_EQ(w.seq, q.done_seq);
  ++q.done_seq;
  EmitCqe(qi, q, w, WcStatus::kSuccess);
}

void Fabric::AckUpTo(uint32_t qi, Qp& q, uint64_t last, bool implied_nak) {
  bool progress = false;
  while (q.done_seq < q.post_seq && q.ack_vpsn <= last && Executing(q.attr.qp_state)) {
    Wr& w = q.sq[q.done_seq % q.sq.size()];
    const uint64_t end = w.vpsn_first + w.npkts;
    if (w.wr.opcode == hal::Opcode::kRdmaRead) {
      if (!implied_nak) break;
      // An ACK beyond an unfinished READ: its response was lost (implied
      // NAK): retransmit from the READ.
      ++q.retransmits;
      ++stats_.retransmits;
      q.sent_vpsn = q.ack_vpsn;
      q.send_seq = q.done_seq;
      Kick(qi);
      break;
    }
    progress = true;
    if (last + 1 >= end) {
      q.ack_vpsn = end;
      CompleteHead(qi, q);
    } else {
      q.ack_vpsn = last + 1;
      break;
    }
  }
  if (progress) {
    q.retries = 0;
    q.last_progress_ns = clock_->NowNs();
  }
}

void Fabric::OnResp(const Event& e) {
  Qp& q = *qps_[e.a];
  if (!q.alive || q.hung || !Executing(q.attr.qp_state)) return;
  // The wire PSN is read in this QP's own window [ack_vpsn, sent_vpsn_hi):
  // older is a duplicate, newer was never sent (a stale requester's
  // response, e.g. after QPN reuse): both are ignored, as hardware does.
  uint64_t vpsn = e.c;  // mutation sim_resp_to_source: the source's own vpsn, trusted
  if (!config_.mutations.on(base::Mutation::kSimRespToSource)) {
    const int32_t ahead = PsnDiff(e.d, (q.psn_base + q.ack_vpsn) & kPsnMask);
    if (ahead < 0) return;  // a duplicate: everything before ack_vpsn is done
    vpsn = q.ack_vpsn + static_cast<uint64_t>(ahead);
    if (vpsn >= q.sent_vpsn_hi) {
      ++stats_.responses_ignored;
      return;
    }
  }
  switch (static_cast<RespKind>(e.b)) {
    case kAck:
      if (vpsn >= q.ack_vpsn) AckUpTo(e.a, q, vpsn);
      break;
    case kReadResp: {
      if (vpsn > q.ack_vpsn) {
        // A READ response implicitly acknowledges every earlier request
        // (IBA 9.7.5.1.2): WRITEs before this READ may have had their
        // coalesced ACK deferred because this READ was behind them on the
        // wire. Without this a WRITE followed by a READ waited for the
        // retry timer with no loss (ferry-bench p999 = the ACK timeout).
        AckUpTo(e.a, q, vpsn - 1, /*implied_nak=*/false);
        if (!Executing(q.attr.qp_state)) return;
      }
      if (vpsn != q.ack_vpsn || q.done_seq >= q.post_seq) return;
      Wr& w = q.sq[q.done_seq % q.sq.size()];
      if (w.wr.opcode != hal::Opcode::kRdmaRead || vpsn < w.vpsn_first ||
          vpsn >= w.vpsn_first + w.npkts) {
        return;
      }
      const uint64_t mtu =
          std::min(hal::MtuBytes(q.attr.path_mtu), hal::MtuBytes(config_.active_mtu));
      const uint64_t off = (vpsn - w.vpsn_first) * mtu;
      const uint64_t len = off < w.len ? std::min(mtu, w.len - off) : 0;
      if (len > 0) {
        const Mr* m = q.dst_dev == kNone
                          ? nullptr
                          : ResolveRkey(q.dst_dev, kNone, w.wr.rkey, w.wr.remote_addr, w.len,
                                        hal::kAccessRemoteRead);
        if (m == nullptr) {  // target fenced meanwhile: lost, the retry will NAK
          ++q.path_faults;
          return;
        }
        uint8_t* src = m->addr + (w.wr.remote_addr - reinterpret_cast<uint64_t>(m->addr)) + off;
        ShadowCheck(src, len, false, "remote source of READ");
        if (!DmaLocal(e.a, q, w, off, len, src, false)) {
          FailAndFlush(e.a, q, w.seq, WcStatus::kLocProtErr);
          return;
        }
      }
      ++q.ack_vpsn;
      q.retries = 0;
      q.last_progress_ns = clock_->NowNs();
      if (q.ack_vpsn == w.vpsn_first + w.npkts) CompleteHead(e.a, q);
      break;
    }
    case kNakSeq:
      if (vpsn < q.ack_vpsn) return;
      if (vpsn > q.ack_vpsn) AckUpTo(e.a, q, vpsn - 1);
      if (!Executing(q.attr.qp_state) || q.sent_vpsn == q.ack_vpsn) return;
      ++q.retransmits;
      ++stats_.retransmits;
      q.sent_vpsn = q.ack_vpsn;
      q.send_seq = q.done_seq;
      Kick(e.a);
      break;
    case kNakAccess: {
      if (vpsn < q.ack_vpsn) return;
      if (vpsn > q.ack_vpsn) AckUpTo(e.a, q, vpsn - 1);
      if (!Executing(q.attr.qp_state)) return;
      uint64_t fail = q.done_seq;
      for (uint64_t s = q.done_seq; s < q.post_seq; ++s) {
        const Wr& w = q.sq[s % q.sq.size()];
        if (vpsn >= w.vpsn_first && vpsn < w.vpsn_first + w.npkts) {
          fail = s;
          break;
        }
      }
      FailAndFlush(e.a, q, fail, WcStatus::kRemAccessErr);
      break;
    }
  }
}

void Fabric::OnTimer(const Event& e) {
  Qp& q = *qps_[e.a];
  q.timer_pending = false;
  if (!q.alive || q.hung || !Executing(q.attr.qp_state) || q.attr.timeout == 0 ||
      q.sent_vpsn == q.ack_vpsn) {
    return;
  }
  const uint64_t deadline = q.last_progress_ns + TimeoutNs(q);
  if (clock_->NowNs() < deadline) {
    ArmTimer(e.a, q);
    return;
  }
  if (q.path_faults == 0) ++stats_.timeouts_without_loss;  // a sim bug: see FabricStats
  // rxe never counts retry_cnt 7 down: it retries forever (rxe_comp.c).
  const bool forever = config_.profile == RnicProfile::kRxe && q.attr.retry_cnt == 7;
  if (++q.retries > q.attr.retry_cnt && !forever) {
    FailAndFlush(e.a, q, q.done_seq, WcStatus::kRetryExcErr);
    return;
  }
  ++q.retransmits;
  ++stats_.retransmits;
  q.sent_vpsn = q.ack_vpsn;
  q.send_seq = q.done_seq;
  Kick(e.a);
}

// ------------------------------------------------------------------ errors

void Fabric::FailAndFlush(uint32_t qi, Qp& q, uint64_t fail_seq, WcStatus status) {
  q.attr.qp_state = QpState::kErr;
  q.attr.cur_qp_state = QpState::kErr;
  if (q.hung) return;  // a hung QP neither executes nor flushes
  const bool no_flush = config_.mutations.on(base::Mutation::kSimNoFlushAfterError);
  if (no_flush) {
    if (fail_seq != kNoSeq && fail_seq >= q.done_seq && fail_seq < q.post_seq) {
      q.done_seq = fail_seq + 1;
      EmitCqe(qi, q, q.sq[fail_seq % q.sq.size()], status);
    }
    return;
  }
  const uint64_t end = q.post_seq;
  SaveSentPayloads(qi, q);
  for (uint64_t s = q.done_seq; s < end; ++s) {
    q.done_seq = s + 1;
    EmitCqe(qi, q, q.sq[s % q.sq.size()], s == fail_seq ? status : WcStatus::kWrFlushErr);
    if (!q.alive) return;
  }
  q.send_seq = q.post_seq;
  q.sent_vpsn = q.ack_vpsn = q.next_vpsn;
}

void Fabric::SaveSentPayloads(uint32_t qi, Qp& q) {
  if (config_.mutations.on(base::Mutation::kSimFetchAfterCompletion)) return;
  const uint64_t mtu = std::min(hal::MtuBytes(q.attr.path_mtu), hal::MtuBytes(config_.active_mtu));
  for (uint64_t s = q.done_seq; s < q.post_seq; ++s) {
    Wr& w = q.sq[s % q.sq.size()];
    if (w.wr.opcode != hal::Opcode::kRdmaWrite || q.sent_vpsn_hi <= w.vpsn_first) continue;
    const uint64_t sent_pkts = std::min<uint64_t>(q.sent_vpsn_hi - w.vpsn_first, w.npkts);
    const uint64_t bytes = std::min(w.len, sent_pkts * mtu);
    if (bytes == 0) continue;
    w.sent_payload.resize(bytes);
    // The task still owns its buffer here (this WR's CQE is not out yet).
    if (!DmaLocal(qi, q, w, 0, bytes, w.sent_payload.data(), true)) w.sent_payload = {};
  }
}

void Fabric::EnterErr(uint32_t qi, Qp& q) { FailAndFlush(qi, q, kNoSeq, WcStatus::kWrFlushErr); }

// ------------------------------------------------------------------ CQEs

void Fabric::EmitCqe(uint32_t qi, Qp& q, const Wr& w, WcStatus status) {
  if (status == WcStatus::kSuccess && !w.signaled) return;
  Cqe c;
  c.qp = qi;
  c.wr_seq = w.seq;
  c.wc.wr_id = w.wr.wr_id;
  c.wc.status = status;
  c.wc.qp_num = q.qpn;
  if (status == WcStatus::kSuccess) {
    c.wc.opcode = w.wr.opcode;
    c.wc.byte_len = static_cast<uint32_t>(w.len);
    c.wc.vendor_err = 0;
  } else if (config_.profile == RnicProfile::kRxe) {
    // rxe: raw opcode 0 (IBV_WC_SEND, reported as kSend) and vendor_err 0
    // (softroce.md); byte_len is garbage.
    c.wc.opcode = hal::Opcode::kSend;
    c.wc.byte_len = static_cast<uint32_t>(prng_.Next());
    c.wc.vendor_err = 0;
  } else {
    c.wc.opcode = static_cast<hal::Opcode>(prng_.Below(4));
    c.wc.byte_len = static_cast<uint32_t>(prng_.Next());
    c.wc.vendor_err = status == WcStatus::kWrFlushErr ? 0xf9 : 0x80 + prng_.Below(16);
  }
  uint64_t delay = 0;
  if (config_.cqe_jitter_ns != 0) delay = prng_.Below(config_.cqe_jitter_ns + 1);
  if (q.script_late > 0) {
    --q.script_late;
    CountFault(FaultKind::kLateCqe);
    delay += config_.late_cqe_max_ns;
  } else if (InjectFault(FaultKind::kLateCqe)) {
    delay += prng_.Range(1, std::max<uint64_t>(1, config_.late_cqe_max_ns));
  }
  const uint64_t now = clock_->NowNs();
  uint64_t ready = now + delay;
  if (!config_.mutations.on(base::Mutation::kSimPerQpOrderOff)) {
    ready = std::max(ready, q.last_cqe_ready_ns);
    q.last_cqe_ready_ns = ready;
  }
  const bool flush = status == WcStatus::kWrFlushErr;
  if (ready <= now && q.pending.empty()) {
    WriteCqe(qi, c, flush);
    return;
  }
  FERRY_CHECK_LT(q.pending.size(), size_t{1} << 24);
  q.pending.push_back(PendingCqe{ready, c, flush});
  Push(EvType::kCqeDeliver, ready, qi, 0, 0, 0,
       config_.mutations.on(base::Mutation::kSimPerQpOrderOff) ? kNone : CqeChan(qi));
}

void Fabric::DeliverPending(uint32_t qi) {
  Qp& q = *qps_[qi];
  if (!q.alive) return;
  const uint64_t now = clock_->NowNs();
  if (!config_.mutations.on(base::Mutation::kSimPerQpOrderOff)) {
    for (size_t n = q.pending.size(); n > 0 && !q.pending.empty(); --n) {
      if (q.pending.front().ready_ns > now) break;
      const PendingCqe p = q.pending.front();
      q.pending.pop_front();
      WriteCqe(qi, p.cqe, p.flush);
      if (!q.alive) return;
    }
    return;
  }
  // Mutation: deliver whatever is ready, regardless of post order.
  for (size_t i = 0; i < q.pending.size();) {
    if (q.pending[i].ready_ns > now) {
      ++i;
      continue;
    }
    const PendingCqe p = q.pending[i];
    q.pending.erase(q.pending.begin() + static_cast<std::ptrdiff_t>(i));
    WriteCqe(qi, p.cqe, p.flush);
    if (!q.alive) return;
  }
}

void Fabric::Overrun(uint32_t ci) {
  Cq& c = cqs_[ci];
  if (c.errored) return;
  c.errored = true;
  c.count = 0;  // CQEs lost
  RaiseAsync(c.ctx, AsyncEventType::kCqErr, kNone, ci, 0);
}

void Fabric::WriteCqe(uint32_t qi, const Cqe& cqe, bool flush) {
  Qp& q = *qps_[qi];
  const uint32_t ci = q.send_cq;
  Cq& c = cqs_[ci];
  if (!c.alive || c.errored) return;
  if (flush && q.flush_dropped) return;  // rxe: rest of the SQ dropped silently
  const bool full = c.count == c.capacity;
  const bool forced = !full && InjectFault(FaultKind::kCqOverrun);
  if (full || forced) {
    if (full && flush && config_.profile == RnicProfile::kRxe) {
      q.flush_dropped = true;
      return;
    }
    if (config_.mutations.on(base::Mutation::kSimOverrunUndetected)) {
      if (full) {  // silently overwrite the oldest CQE
        c.head = c.head + 1 == c.capacity ? 0 : c.head + 1;
        --c.count;
      }
    } else {
      Overrun(ci);
      if (q.attr.qp_state != QpState::kErr) {
        RaiseAsync(q.ctx, AsyncEventType::kQpFatal, qi, kNone, 0);
        EnterErr(qi, q);
      }
      return;
    }
  }
  uint32_t slot = c.head + c.count;
  if (slot >= c.capacity) slot -= c.capacity;
  c.ring[slot] = cqe;
  ++c.count;
  ++stats_.cqes_written;
  if (c.armed && (!c.solicited_only || cqe.wc.status != WcStatus::kSuccess)) {
    c.armed = false;
    channels_[c.channel].events.push_back(ci);
  }
}

void Fabric::ScrubCq(uint32_t ci, uint32_t qi) {
  Cq& c = cqs_[ci];
  if (!c.alive || c.count == 0) return;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < c.count; ++i) {
    uint32_t from = c.head + i;
    if (from >= c.capacity) from -= c.capacity;
    if (c.ring[from].qp == qi) continue;
    uint32_t to = c.head + kept;
    if (to >= c.capacity) to -= c.capacity;
    c.ring[to] = c.ring[from];
    ++kept;
  }
  c.count = kept;
}

void Fabric::DropQpCqes(uint32_t qi) { qps_[qi]->pending.clear(); }

void Fabric::ResetQpQueues(Qp& q) {
  q.pending.clear();
  q.done_seq = q.free_seq = q.send_seq = q.post_seq;
  q.sent_vpsn = q.ack_vpsn = q.next_vpsn;
  q.retries = 0;
}

// ------------------------------------------------------------------ world faults

void Fabric::LinkDown(uint32_t dev, uint64_t up_after_ns) {
  Device& d = devices_[dev];
  if (!d.port_up) return;
  d.port_up = false;
  RaiseDeviceAsync(dev, AsyncEventType::kPortErr);
  if (up_after_ns != 0) Push(EvType::kPortUp, clock_->NowNs() + up_after_ns, dev, 0, 0, 0);
}

void Fabric::LinkUp(uint32_t dev) {
  Device& d = devices_[dev];
  if (d.port_up) return;
  d.port_up = true;
  d.rtr_fail_until_ns = clock_->NowNs() + config_.rtr_fail_after_active_ns;
  RaiseDeviceAsync(dev, AsyncEventType::kPortActive);
}

absl::Status Fabric::SetLinkUp(uint32_t host, std::string_view device, bool up) {
  const uint32_t dev = host < hosts_.size() ? FindDevice(host, device) : kNone;
  if (dev == kNone)
    return absl::NotFoundError(absl::StrCat("no AV(device) h", host, "/", AV(device)));
  if (up) {
    LinkUp(dev);
  } else {
    LinkDown(dev, 0);
  }
  return absl::OkStatus();
}

absl::Status Fabric::Inject(const ScriptedFault& f) { return ApplyScripted(f); }

absl::Status Fabric::ApplyScripted(const ScriptedFault& f) {
  switch (f.kind) {
    case FaultKind::kPausedPeer:
    case FaultKind::kCtrlDelay:
    case FaultKind::kCtrlLoss:
    case FaultKind::kCtrlDup:
    case FaultKind::kCtrlReorder:
    case FaultKind::kCtrlPartition:
      external_.push_back(f);
      return absl::OkStatus();
    default:
      break;
  }
  const FaultTarget& t = f.target;
  if (t.host >= hosts_.size()) return absl::NotFoundError("no such host");
  if (t.kind == TargetKind::kHost) {
    if (f.kind == FaultKind::kPeerRestart) {
      RestartHost(t.host);
      return absl::OkStatus();
    }
    if (f.kind == FaultKind::kResourceFail) {
      ++hosts_[t.host].script_resource_fail;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat(AV(FaultKindName(f.kind)), " needs a qp/cq/dev"));
  }
  const uint32_t dev = FindDevice(t.host, t.device);
  if (dev == kNone) return absl::NotFoundError(absl::StrCat("no AV(device) ", t.ToString()));
  if (t.kind == TargetKind::kDevice) {
    CountFault(f.kind);
    switch (f.kind) {
      case FaultKind::kLinkDown:
        LinkDown(dev, 0);
        return absl::OkStatus();
      case FaultKind::kLinkUp:
        LinkUp(dev);
        return absl::OkStatus();
      case FaultKind::kPortFlap:
        LinkDown(dev, config_.port_flap_ns);
        return absl::OkStatus();
      case FaultKind::kGidChange:
        RaiseDeviceAsync(dev, AsyncEventType::kGidChange);
        return absl::OkStatus();
      case FaultKind::kDeviceFatal:
        for (uint32_t ci = 0; ci < ctxs_.size(); ++ci) {
          if (!ctxs_[ci].alive || ctxs_[ci].dev != dev) continue;
          ctxs_[ci].fatal = true;
          RaiseAsync(ci, AsyncEventType::kDeviceFatal, kNone, kNone, 0);
          for (uint32_t qi = 0; qi < qps_.size(); ++qi) {
            Qp& q = *qps_[qi];
            if (q.alive && q.ctx == ci && q.attr.qp_state != QpState::kReset) EnterErr(qi, q);
          }
        }
        return absl::OkStatus();
      case FaultKind::kResourceFail:
        ++hosts_[t.host].script_resource_fail;
        return absl::OkStatus();
      default:
        return absl::InvalidArgumentError(
            absl::StrCat(AV(FaultKindName(f.kind)), " does not apply to a device"));
    }
  }
  if (t.kind == TargetKind::kCq) {
    for (uint32_t ci = 0; ci < cqs_.size(); ++ci) {
      if (cqs_[ci].alive && cqs_[ci].dev == dev && cqs_[ci].ordinal == t.number) {
        if (f.kind != FaultKind::kCqOverrun) {
          return absl::InvalidArgumentError("only cq_overrun applies to a cq");
        }
        CountFault(f.kind);
        Overrun(ci);
        return absl::OkStatus();
      }
    }
    return absl::NotFoundError(absl::StrCat("no cq ", t.ToString()));
  }
  const uint32_t qi = FindQpByNumber(dev, t.number);
  if (qi == kNone) return absl::NotFoundError(absl::StrCat("no qp ", t.ToString()));
  Qp& q = *qps_[qi];
  switch (f.kind) {
    case FaultKind::kWrFlush:
      CountFault(f.kind);
      if (q.attr.qp_state != QpState::kReset) {
        RaiseAsync(q.ctx, AsyncEventType::kQpFatal, qi, kNone, 0);
        EnterErr(qi, q);
      }
      return absl::OkStatus();
    case FaultKind::kHungQp:
      CountFault(f.kind);
      q.hung = true;
      return absl::OkStatus();
    case FaultKind::kDestroyQpFail:
      ++q.script_destroy_fail;
      return absl::OkStatus();
    case FaultKind::kModifyQpFail:
      ++q.script_modify_fail;
      return absl::OkStatus();
    case FaultKind::kPostSendEnomem:
      ++q.script_post_enomem;
      return absl::OkStatus();
    case FaultKind::kLateCqe:
      ++q.script_late;
      return absl::OkStatus();
    case FaultKind::kPacketLoss:
      ++q.script_drop;
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(AV(FaultKindName(f.kind)), " does not apply to a qp"));
  }
}

// ------------------------------------------------------------------ SimVerbs

// The hal::Verbs of one host: forwards to the Fabric with the host id.
class SimVerbs final : public hal::Verbs {
 public:
  SimVerbs(Fabric* f, uint32_t host) : f_(f), host_(host) {}

  absl::StatusOr<std::vector<hal::DeviceInfo>> ListDevices() override {
    return f_->VListDevices(host_);
  }
  absl::StatusOr<hal::ContextHandle> OpenDevice(std::string_view name) override {
    return f_->VOpenDevice(host_, name);
  }
  absl::Status CloseDevice(hal::ContextHandle ctx) override { return f_->VCloseDevice(host_, ctx); }
  absl::StatusOr<hal::DeviceAttr> QueryDevice(hal::ContextHandle ctx) override {
    return f_->VQueryDevice(host_, ctx);
  }
  absl::StatusOr<hal::PortAttr> QueryPort(hal::ContextHandle ctx, uint8_t port) override {
    return f_->VQueryPort(host_, ctx, port);
  }
  absl::StatusOr<hal::Gid> QueryGid(hal::ContextHandle ctx, uint8_t port, int index) override {
    return f_->VQueryGid(host_, ctx, port, index);
  }
  absl::StatusOr<hal::GidEntry> QueryGidEntry(hal::ContextHandle ctx, uint8_t port,
                                              int index) override {
    return f_->VQueryGidEntry(host_, ctx, port, index);
  }
  absl::StatusOr<hal::PdHandle> AllocPd(hal::ContextHandle ctx) override {
    return f_->VAllocPd(host_, ctx);
  }
  absl::Status DeallocPd(hal::PdHandle pd) override { return f_->VDeallocPd(host_, pd); }
  absl::StatusOr<hal::MrInfo> RegMr(hal::PdHandle pd, void* addr, size_t length,
                                    uint32_t access) override {
    return f_->VRegMr(host_, pd, addr, length, access);
  }
  absl::Status DeregMr(hal::MrHandle mr) override { return f_->VDeregMr(host_, mr); }
  absl::StatusOr<hal::CompChannelHandle> CreateCompChannel(hal::ContextHandle ctx) override {
    return f_->VCreateCompChannel(host_, ctx);
  }
  absl::Status DestroyCompChannel(hal::CompChannelHandle ch) override {
    return f_->VDestroyCompChannel(host_, ch);
  }
  absl::StatusOr<hal::CqHandle> GetCqEvent(hal::CompChannelHandle ch) override {
    return f_->VGetCqEvent(host_, ch);
  }
  void AckCqEvents(hal::CqHandle cq, uint32_t count) override {
    f_->VAckCqEvents(host_, cq, count);
  }
  absl::StatusOr<hal::CqInfo> CreateCq(hal::ContextHandle ctx, uint32_t cqe,
                                       hal::CompChannelHandle ch) override {
    return f_->VCreateCq(host_, ctx, cqe, ch);
  }
  absl::Status DestroyCq(hal::CqHandle cq) override { return f_->VDestroyCq(host_, cq); }
  absl::StatusOr<uint32_t> PollCq(hal::CqHandle cq, absl::Span<hal::WorkCompletion> out) override {
    return f_->VPollCq(host_, cq, out);
  }
  absl::Status ReqNotifyCq(hal::CqHandle cq, bool solicited_only) override {
    return f_->VReqNotifyCq(host_, cq, solicited_only);
  }
  absl::StatusOr<hal::QpInfo> CreateQp(hal::PdHandle pd, const hal::QpInitAttr& init) override {
    return f_->VCreateQp(host_, pd, init);
  }
  absl::Status ModifyQp(hal::QpHandle qp, const hal::QpAttr& attr, uint32_t mask) override {
    return f_->VModifyQp(host_, qp, attr, mask);
  }
  absl::StatusOr<hal::QpAttr> QueryQp(hal::QpHandle qp) override { return f_->VQueryQp(host_, qp); }
  absl::Status DestroyQp(hal::QpHandle qp) override { return f_->VDestroyQp(host_, qp); }
  hal::PostResult PostSend(hal::QpHandle qp, absl::Span<const hal::SendWr> chain) override {
    return f_->VPostSend(host_, qp, chain);
  }
  absl::StatusOr<hal::AsyncEvent> GetAsyncEvent(hal::ContextHandle ctx) override {
    return f_->VGetAsyncEvent(host_, ctx);
  }
  void AckAsyncEvent(const hal::AsyncEvent& event) override { f_->VAckAsyncEvent(host_, event); }
  absl::StatusOr<int> CompChannelFd(hal::CompChannelHandle) override {
    return absl::UnimplementedError("sim rnic: no file descriptors; the scheduler knows readiness");
  }
  absl::StatusOr<int> AsyncEventFd(hal::ContextHandle) override {
    return absl::UnimplementedError("sim rnic: no file descriptors; the scheduler knows readiness");
  }

 private:
  Fabric* f_;
  uint32_t host_;
};

std::unique_ptr<hal::Verbs> Fabric::NewVerbs(uint32_t host) {
  FERRY_CHECK_LT(host, hosts_.size());
  return std::make_unique<SimVerbs>(this, host);
}

}  // namespace ferry::sim
