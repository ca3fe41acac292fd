// sim/rnic/fabric_datapath.cc: stepping the simulated RNIC's event queue
// (event_queue.h) and the requester's side of the data path: post_send,
// starting WRs, sending request packets (serialization, arrival, loss),
// local DMA and rkey resolution. The responder, completions and faults have their own files
// (fabric.cc lists them).
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
#include "base/check.h"
#include "base/status_macros.h"
#include "sim/rnic/fabric.h"
#include "sim/rnic/fabric_internal.h"

namespace ferry::sim {

using namespace fabric_internal;  // NOLINT(build/namespaces): the fabric's own helpers

// ------------------------------------------------------------------ events

void Fabric::Push(EvType type, uint64_t t_ns, uint32_t a, uint32_t b, uint64_t c, uint32_t d,
                  uint32_t chan, uint32_t lane) {
  static_assert(kNone == EventQueue<Event>::kNoChannel && kNone == EventQueue<Event>::kNoLane);
  events_.Push(Event{t_ns, next_event_seq_++, c, a, b, d, chan, type}, lane);
}

bool Fabric::Runnable() { return !events_.empty() && events_.top_t_ns() <= clock_->NowNs(); }

uint64_t Fabric::Step() {
  for (uint32_t n = 0; n < config_.events_per_step_max && Runnable(); ++n) {
    const Event e = events_.PopNext();
    Dispatch(e);
  }
  return 0;
}

std::optional<uint64_t> Fabric::NextWakeNs() {
  if (events_.empty()) return std::nullopt;
  return events_.top_t_ns();
}

void Fabric::RunUntil(uint64_t t_ns) {
  while (!events_.empty() && events_.top_t_ns() <= t_ns) {
    const Event e = events_.PopNext();
    clock_->AdvanceTo(e.t_ns);
    Dispatch(e);
  }
  clock_->AdvanceTo(t_ns);
}

bool Fabric::Settle(uint64_t budget_ns) {
  const uint64_t end = clock_->NowNs() + budget_ns;
  while (!events_.empty() && events_.top_t_ns() <= end) {
    const Event e = events_.PopNext();
    clock_->AdvanceTo(e.t_ns);
    Dispatch(e);
  }
  return events_.empty();
}

void Fabric::Dispatch(const Event& e) {
  ++stats_.events;
  const bool qp_event = e.type == EvType::kReq || e.type == EvType::kResp ||
                        e.type == EvType::kTimer || e.type == EvType::kCqeDeliver ||
                        e.type == EvType::kStall || e.type == EvType::kRnrTimer;
  if (qp_event && e.a < qps_.size()) {
    const Qp& q = *qps_[e.a];
    touched_hosts_ |= uint64_t{1} << (q.host % 64);
    if (q.dst_dev != kNone) touched_hosts_ |= uint64_t{1} << (devices_[q.dst_dev].host % 64);
  } else {
    touched_hosts_ = ~uint64_t{0};
  }
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
    case EvType::kStall:
      OnStall(e);
      break;
    case EvType::kRnrTimer:
      OnRnrTimer(e);
      break;
  }
}

// ------------------------------------------------------------------ post

hal::PostResult Fabric::VerbPostSend(uint32_t host, hal::QpHandle qph,
                                     absl::Span<const hal::SendWr> chain) {
  hal::PostResult r;
  uint32_t qi = UsableQp(host, qph);
  if (qi == kNone) {
    auto qi_or = CheckQp(host, qph, "ibv_post_send");
    if (!qi_or.ok()) {
      r.status = qi_or.status();
      return r;
    }
    qi = *qi_or;
  }
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
    } else if (!CarriesPayload(wr.opcode) && wr.opcode != hal::Opcode::kRdmaRead &&
               !IsLocalOp(wr.opcode)) {
      err = EINVAL;  // an opcode this RC send queue does not know
    } else if (wr.num_sge > q.cap.max_send_sge || wr.num_sge > hal::kMaxSgeInline ||
               (IsLocalOp(wr.opcode) && wr.num_sge != 0)) {
      err = EINVAL;
    } else if (absl::Status bad = wr.opcode == hal::Opcode::kBindMw ? CheckBindHandles(host, wr)
                                                                    : absl::OkStatus();
               !bad.ok()) {
      r.status = bad;  // a destroyed or foreign window or MR: a violation
      r.first_bad = i;
      return r;
    } else if (q.post_seq - q.free_seq >= q.cap.max_send_wr) {
      err = ENOMEM;  // slots free when CQEs are polled, not on execution
    } else {
      for (uint32_t k = 0; k < wr.num_sge; ++k) len += wr.sg_list[k].length;
      if (len > (uint64_t{1} << 31)) err = EINVAL;
      // Inline: at most the QP's max_inline_data (rxe's validate_send_wr);
      // only a WR that carries a payload (stricter than rxe, which copies
      // for any opcode and then ignores the bytes).
      if ((wr.send_flags & hal::kSendInline) != 0 &&
          (len > q.cap.max_inline_data || !CarriesPayload(wr.opcode)))
        err = EINVAL;
    }
    if (err != 0) {
      r.status = Errno("ibv_post_send", err);
      r.first_bad = i;
      if (Executing(s) && !q.hung) Kick(qi);
      return r;
    }
    EnqueueWr(qi, q, wr, len, mtu);
  }
  r.first_bad = static_cast<uint32_t>(chain.size());
  if (s == QpState::kRts && !q.hung) Kick(qi);
  return r;
}

void Fabric::EnqueueWr(uint32_t qi, Qp& q, const hal::SendWr& wr, uint64_t len, uint64_t mtu) {
  Wr& w = q.sq[q.post_seq % q.sq.size()];
  w.seq = q.post_seq++;
  w.wr_id = wr.wr_id;
  w.remote_addr = wr.remote_addr;
  w.rkey = wr.rkey;
  w.imm_data = wr.imm_data;
  w.opcode = wr.opcode;
  w.num_sge = static_cast<uint8_t>(wr.num_sge);
  w.sge0 = wr.sg_list[0];
  // The cold half is written only where this WR has something for it.
  if (w.has_sent_payload || wr.num_sge > 1 || IsLocalOp(wr.opcode)) {
    WrCold& cold = ColdOf(q, w);
    if (w.has_sent_payload) cold.sent_payload = {};
    for (uint32_t k = 1; k < wr.num_sge; ++k) cold.sges[k - 1] = wr.sg_list[k];
    cold.bind = wr.bind;
    cold.invalidate_rkey = wr.invalidate_rkey;
  }
  w.has_sent_payload = false;
  w.len = len;
  // Inline: the bytes are copied now, as the driver copies them into the
  // WQE; the RNIC never reads the caller's buffer for this WR. Test-only:
  // the bug of reading it when the packet is sent.
  w.inline_data = (wr.send_flags & hal::kSendInline) != 0 &&
                  !config_.mutations.on(base::Mutation::kSimInlineReadsLate);
  if (w.inline_data) CopyInline(q, w);
  // A local operation sends no packet and takes no PSN.
  w.npkts = IsLocalOp(wr.opcode)
                ? 0
                : static_cast<uint32_t>(std::max<uint64_t>(1, (len + mtu - 1) / mtu));
  w.vpsn_first = q.next_vpsn;
  q.next_vpsn += w.npkts;
  w.reads_before = q.reads_posted;
  if (wr.opcode == hal::Opcode::kRdmaRead) ++q.reads_posted;
  w.signaled = q.sq_sig_all || (wr.send_flags & hal::kSendSignaled) != 0;
  w.started = false;
  w.local_status = WcStatus::kSuccess;
  w.post_index = stats_.wrs_posted++;
  if (q.attr.qp_state == QpState::kErr && !q.hung && q.done_seq == w.seq) {
    // Posted in ERR: flushed at once.
    ++q.done_seq;
    q.send_seq = q.post_seq;
    q.sent_vpsn = q.ack_vpsn = q.next_vpsn;
    EmitCqe(qi, q, w, WcStatus::kWrFlushErr);
  }
}

// ------------------------------------------------------------------ requester

uint64_t Fabric::TimeoutNs(const Qp& q) const { return uint64_t{4096} << q.attr.timeout; }

void Fabric::ArmTimer(uint32_t qi, Qp& q) {
  if (q.timer_pending || q.attr.timeout == 0 || q.sent_vpsn == q.ack_vpsn) return;
  q.timer_pending = true;
  Push(EvType::kTimer, q.last_progress_ns + TimeoutNs(q), qi, 0, 0, 0, kNone, kTimerLane);
}

bool Fabric::StartWr(uint32_t qi, Qp& q, Wr& w) {
  w.started = true;
  if (InjectFault(FaultKind::kWrFlush)) {
    RaiseAsync(q.ctx, AsyncEventType::kQpFatal, qi, kNone, 0);
    EnterErr(qi, q);
    return false;
  }
  // Local keys are checked when the WR starts executing (as hardware does):
  // a bad lkey or range completes LOC_PROT_ERR. An inline WR's bytes are in
  // the WQE: no key is used.
  for (uint32_t k = 0; k < w.num_sge && !w.inline_data; ++k) {
    const hal::Sge& sge = SgeOf(q, w, k);
    const uint32_t idx = sge.lkey >> 8;
    bool ok = idx != 0 && idx <= mrs_.size();
    if (ok) {
      const Mr& m = mrs_[idx - 1];
      ok = m.alive && m.key == sge.lkey && m.dev == q.dev && m.pd == q.pd &&
           sge.addr >= reinterpret_cast<uint64_t>(m.addr) &&
           sge.addr + sge.length <= reinterpret_cast<uint64_t>(m.addr) + m.len &&
           (w.opcode != hal::Opcode::kRdmaRead || (m.access & hal::kAccessLocalWrite) != 0);
    }
    if (!ok) {
      FailAndFlush(qi, q, w.seq, WcStatus::kLocProtErr);
      return false;
    }
  }
  return true;
}

uint64_t Fabric::ReadsInFlight(const Qp& q) {
  const auto before = [&q](uint64_t seq) {
    return seq == q.post_seq ? q.reads_posted : q.sq[seq % q.sq.size()].reads_before;
  };
  FERRY_CHECK_LE(q.done_seq, q.send_seq);
  return before(q.send_seq) - before(q.done_seq);
}

void Fabric::Kick(uint32_t qi) {
  Qp& q = *qps_[qi];
  if (!q.alive || q.attr.qp_state != QpState::kRts || q.hung || q.rnr_wait) return;
  const bool was_idle = q.sent_vpsn == q.ack_vpsn;
  // The retry timer of an idle QP starts when its first packet starts to
  // leave, not when it joins the port's queue behind other QPs' packets.
  const uint64_t tx_start_ns = std::max(clock_->NowNs(), devices_[q.dev].tx_free_ns);
  while (q.send_seq < q.post_seq) {
    Wr& w = q.sq[q.send_seq % q.sq.size()];
    if (IsLocalOp(w.opcode)) {
      if (!w.started) {
        w.started = true;
        w.local_status = ExecuteLocalOp(qi, q, w);
      }
      if (w.local_status != WcStatus::kSuccess) break;  // the requester stops there
      ++q.send_seq;
      continue;
    }
    // The requester has at most max_rd_atomic READs outstanding (in order:
    // what is posted behind a waiting READ waits too). Test-only: the sim
    // before it honoured max_rd_atomic.
    if (w.opcode == hal::Opcode::kRdmaRead && q.sent_vpsn <= w.vpsn_first &&
        ReadsInFlight(q) >= std::max<uint64_t>(1, q.attr.max_rd_atomic) &&
        !config_.mutations.on(base::Mutation::kSimReadDepthUnbounded)) {
      ++stats_.read_depth_waits;
      break;
    }
    if (!w.started && !StartWr(qi, q, w)) return;
    const uint64_t end = w.vpsn_first + w.npkts;
    if (q.sent_vpsn < w.vpsn_first) q.sent_vpsn = w.vpsn_first;
    for (; q.sent_vpsn < end; ++q.sent_vpsn) SendReq(qi, q, w, q.sent_vpsn);
    ++q.send_seq;
  }
  if (was_idle && q.sent_vpsn != q.ack_vpsn) q.last_progress_ns = tx_start_ns;
  ArmTimer(qi, q);
  CompleteLocalOpsAtHead(qi, q);
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
  const uint64_t len = CarriesPayload(w.opcode) && off < w.len ? std::min(mtu, w.len - off) : 0;
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
  ++q.reqs_queued;
  Push(EvType::kReq, t, qi, static_cast<uint32_t>(w.seq), vpsn,
       static_cast<uint32_t>((q.psn_base + vpsn) & kPsnMask), ReqChan(qi), PacketLane(q.dev));
}

void Fabric::SendResp(uint32_t ri, Qp& r, uint32_t src_qi, RespKind kind, uint32_t wire_psn,
                      uint64_t src_vpsn, uint64_t payload_bytes, uint32_t rnr_timer) {
  ++stats_.packets_sent;
  uint32_t req_qi = src_qi;
  if (!config_.mutations.on(base::Mutation::kSimRespToSource)) {
    req_qi = r.dst_dev == kNone ? kNone : PeerQpOf(r);
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
  Push(EvType::kResp, t, req_qi, static_cast<uint32_t>(kind) | (rnr_timer & 0x1f) << 8, src_vpsn,
       wire_psn, RespChan(ri), PacketLane(r.dev));
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

const Fabric::Mr* Fabric::ResolveRkey(uint32_t dev, uint32_t pd, uint32_t responder_qi,
                                      uint32_t rkey, uint64_t addr, uint64_t len,
                                      uint32_t need_access) const {
  if (IsMwKey(rkey)) return ResolveMw(dev, pd, responder_qi, rkey, addr, len, need_access);
  const uint32_t idx = rkey >> 8;
  if (idx == 0 || idx > mrs_.size()) return nullptr;
  const Mr& m = mrs_[idx - 1];
  if (!m.alive || m.key != rkey || m.dev != dev || (pd != kNone && m.pd != pd)) return nullptr;
  // The MR's own remote access flags (ibv_reg_mr): a WRITE into a region
  // registered without REMOTE_WRITE is refused like a bad rkey.
  if ((m.access & need_access) != need_access &&
      !config_.mutations.on(base::Mutation::kSimIgnoreMrAccess)) {
    return nullptr;
  }
  const uint64_t base = reinterpret_cast<uint64_t>(m.addr);
  if (addr < base || addr + len > base + m.len || addr + len < addr) return nullptr;
  return &m;
}

void Fabric::CopyInline(Qp& q, const Wr& w) {
  std::vector<uint8_t>& payload = ColdOf(q, w).inline_payload;
  payload.resize(w.len);
  uint64_t done = 0;
  for (uint32_t k = 0; k < w.num_sge; ++k) {
    const hal::Sge& sge = SgeOf(q, w, k);
    const auto* src = reinterpret_cast<const uint8_t*>(sge.addr);
    ShadowCheck(src, sge.length, true, "inline source at post_send");
    if (sge.length > 0) std::memcpy(payload.data() + done, src, sge.length);
    done += sge.length;
  }
  FERRY_CHECK_EQ(done, w.len);
}

bool Fabric::DmaLocal(uint32_t qi, Qp& q, const Wr& w, uint64_t off, uint64_t len, uint8_t* remote,
                      bool to_remote) {
  (void)qi;
  uint64_t pos = 0;
  uint64_t done = 0;
  for (uint32_t k = 0; k < w.num_sge && done < len; ++k) {
    const hal::Sge& sge = SgeOf(q, w, k);
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

}  // namespace ferry::sim
