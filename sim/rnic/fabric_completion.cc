// sim/rnic/fabric_completion.cc: responses at the requester (ACK, NAK, READ
// data, implied NAK), the retry timer, error-then-flush, and completions:
// per-QP order, seeded interleaving, late CQEs, overrun, scrub.
//
// What must stay true: per QP, WRs complete in post order: done_seq only advances
// from the head, and a QP's CQEs reach its CQ through one FIFO (pending)
// whose ready times never decrease; a response PSN outside the window is
// ignored.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "sim/rnic/fabric.h"
#include "sim/rnic/fabric_internal.h"

namespace ferry::sim {

using namespace fabric_internal;  // NOLINT(build/namespaces): the fabric's own helpers

void Fabric::CompleteHead(uint32_t qi, Qp& q) {
  CompleteOne(qi, q);
  CompleteLocalOpsAtHead(qi, q);
}

void Fabric::CompleteOne(uint32_t qi, Qp& q) {
  Wr& w = q.sq[q.done_seq % q.sq.size()];
  FERRY_CHECK_EQ(w.seq, q.done_seq);
  ++q.done_seq;
  // Acknowledged while the requester was rewound (an RNR wait: a READ
  // response of an earlier transmission acks the WRs before it, seed 970
  // --notify on): what is done is never sent again. Test-only: the model
  // before, which left send_seq behind done_seq.
  if (q.send_seq < q.done_seq && !config_.mutations.on(base::Mutation::kSimAckLeavesSendBehind)) {
    q.send_seq = q.done_seq;
    q.sent_vpsn = std::max(q.sent_vpsn, q.ack_vpsn);
  }
  EmitCqe(qi, q, w, WcStatus::kSuccess);
}

void Fabric::AckUpTo(uint32_t qi, Qp& q, uint64_t last, bool implied_nak) {
  bool progress = false;
  bool implied = false;
  while (q.done_seq < q.post_seq && q.ack_vpsn <= last && Executing(q.attr.qp_state)) {
    Wr& w = q.sq[q.done_seq % q.sq.size()];
    if (IsLocalOp(w.opcode)) break;  // completes when executed (CompleteLocalOpsAtHead)
    const uint64_t end = w.vpsn_first + w.npkts;
    if (w.opcode == hal::Opcode::kRdmaRead) {
      // An ACK beyond an unfinished READ: its response was lost (implied
      // NAK): retransmit from the READ, once the progress this ACK made
      // before it is booked (it ends any retry under way). Under
      // sim_implied_nak_unbounded: at once, before the progress (the old
      // model, kept exact so the seeds found under it replay).
      if (implied_nak && config_.mutations.on(base::Mutation::kSimImpliedNakUnbounded)) {
        StartRetry(qi, q, /*timeout=*/false);
        break;
      }
      implied = implied_nak;
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
  if (progress) NoteProgress(q);
  if (implied) StartRetry(qi, q, /*timeout=*/false);
}

// A READ response at requester qi, at virtual PSN vpsn of its own window:
// acknowledges what came before it, then places its data if it is the next
// packet of the READ at the head.
void Fabric::OnReadResp(uint32_t qi, Qp& q, uint64_t vpsn) {
  if (vpsn > q.ack_vpsn) {
    // A READ response implicitly acknowledges every earlier request
    // (IBA 9.7.5.1.2): WRITEs before this READ may have had their
    // coalesced ACK deferred because this READ was behind them on the
    // wire. Without this a WRITE followed by a READ waited for the
    // retry timer with no loss (ferry-bench p999 = the ACK timeout).
    AckUpTo(qi, q, vpsn - 1, /*implied_nak=*/false);
    if (!Executing(q.attr.qp_state)) return;
  }
  if (vpsn != q.ack_vpsn || q.done_seq >= q.post_seq) return;
  Wr& w = q.sq[q.done_seq % q.sq.size()];
  if (w.opcode != hal::Opcode::kRdmaRead || vpsn < w.vpsn_first || vpsn >= w.vpsn_first + w.npkts) {
    return;
  }
  const uint64_t mtu = std::min(hal::MtuBytes(q.attr.path_mtu), hal::MtuBytes(config_.active_mtu));
  const uint64_t off = (vpsn - w.vpsn_first) * mtu;
  const uint64_t len = off < w.len ? std::min(mtu, w.len - off) : 0;
  if (len > 0) {
    // A window rkey is honoured only for its bound QP, which must still be
    // the responder; an MR rkey needs no responder (a response in flight
    // lands even if the responder QP was destroyed meanwhile).
    const uint32_t ri = IsMwKey(w.rkey) && q.dst_dev != kNone
                            ? FindQpByNumber(q.dst_dev, q.attr.dest_qp_num)
                            : kNone;
    const Mr* m = q.dst_dev == kNone ? nullptr
                                     : ResolveRkey(q.dst_dev, kNone, ri, w.rkey, w.remote_addr,
                                                   w.len, hal::kAccessRemoteRead);
    if (m == nullptr) {  // target fenced meanwhile: lost, the retry will NAK
      ++q.path_faults;
      return;
    }
    uint8_t* src = m->addr + (w.remote_addr - reinterpret_cast<uint64_t>(m->addr)) + off;
    ShadowCheck(src, len, false, "remote source of READ");
    if (!DmaLocal(qi, q, w, off, len, src, false)) {
      FailAndFlush(qi, q, w.seq, WcStatus::kLocProtErr);
      return;
    }
  }
  ++q.ack_vpsn;
  NoteProgress(q);
  if (q.ack_vpsn == w.vpsn_first + w.npkts) {
    CompleteHead(qi, q);
    // A READ slot is free again: what waited for it goes now.
    if (q.send_seq < q.post_seq) Kick(qi);
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
  switch (static_cast<RespKind>(e.b & 0xff)) {
    case kAck:
      if (vpsn >= q.ack_vpsn) AckUpTo(e.a, q, vpsn);
      break;
    case kReadResp:
      OnReadResp(e.a, q, vpsn);
      break;
    case kNakSeq:
      if (vpsn < q.ack_vpsn) return;
      // The NAK itself restarts from the oldest unacknowledged packet (an
      // unfinished READ included): no implied NAK on the way there.
      if (vpsn > q.ack_vpsn)
        AckUpTo(e.a, q, vpsn - 1,
                /*implied_nak=*/config_.mutations.on(base::Mutation::kSimImpliedNakUnbounded));
      if (!Executing(q.attr.qp_state) || q.sent_vpsn == q.ack_vpsn) return;
      StartRetry(e.a, q, /*timeout=*/false);
      break;
    case kNakRnr:
      OnRnrNak(e.a, q, vpsn, e.b >> 8);
      break;
    case kNakAccess:
    case kNakInvReq:
    case kNakRemOp: {
      if (vpsn < q.ack_vpsn) return;
      if (vpsn > q.ack_vpsn) AckUpTo(e.a, q, vpsn - 1);
      if (!Executing(q.attr.qp_state)) return;
      const auto kind = static_cast<RespKind>(e.b & 0xff);
      FailAndFlush(e.a, q, WrSeqOfVpsn(q, vpsn),
                   kind == kNakAccess   ? WcStatus::kRemAccessErr
                   : kind == kNakInvReq ? WcStatus::kRemInvReqErr
                                        : WcStatus::kRemOpErr);
      break;
    }
  }
}

uint64_t Fabric::WrSeqOfVpsn(const Qp& q, uint64_t vpsn) const {
  for (uint64_t s = q.done_seq; s < q.post_seq; ++s) {
    const Wr& w = q.sq[s % q.sq.size()];
    if (vpsn >= w.vpsn_first && vpsn < w.vpsn_first + w.npkts) return s;
  }
  return q.done_seq;
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
  StartRetry(e.a, q, /*timeout=*/true);
}

// Every retry counts against retry_cnt, whatever started it: the local ACK
// timeout, a NAK-sequence error or an implied NAK (IBA's transport retry
// counter; rxe_comp.c COMPST_ERROR_RETRY; NVIDIA's "retransmissions due to
// a Local Ack Timeout, NAK-Sequence Error, or Implied NAK"). And while a
// retry sequence is under way only a timeout starts another (rxe's
// started_retry): every retransmitted WRITE behind a READ whose response
// was lost is a duplicate the responder acknowledges, each such ACK is an
// implied NAK again, and restarting on each one multiplied the packets on
// the wire without bound, with no retry ever counted (seed 12132945: one
// QP sent millions of packets at one instant and its device's transmit
// queue starved every other QP on it into RETRY_EXC_ERR).
void Fabric::StartRetry(uint32_t qi, Qp& q, bool timeout) {
  const bool unbounded = config_.mutations.on(base::Mutation::kSimImpliedNakUnbounded);
  if (!timeout && unbounded) {
    Rewind(qi, q);
    return;
  }
  if (q.retry_started && !timeout) {
    ++stats_.retries_suppressed;
    return;
  }
  // rxe never counts retry_cnt 7 down: it retries forever (rxe_comp.c).
  const bool forever = config_.profile == RnicProfile::kRxe && q.attr.retry_cnt == 7;
  if (++q.retries > q.attr.retry_cnt && !forever) {
    FailAndFlush(qi, q, q.done_seq, WcStatus::kRetryExcErr);
    return;
  }
  q.retry_started = true;
  Rewind(qi, q);
}

void Fabric::Rewind(uint32_t qi, Qp& q) {
  ++q.retransmits;
  ++stats_.retransmits;
  q.sent_vpsn = q.ack_vpsn;
  q.send_seq = q.done_seq;
  Kick(qi);
}

void Fabric::NoteProgress(Qp& q) {
  q.retries = 0;
  q.rnr_retries = 0;
  q.retry_started = false;
  q.last_progress_ns = clock_->NowNs();
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
  q.rnr_wait = false;
  FlushRecvQueue(qi, q);
}

void Fabric::SaveSentPayloads(uint32_t qi, Qp& q) {
  if (config_.mutations.on(base::Mutation::kSimFetchAfterCompletion)) return;
  const uint64_t mtu = std::min(hal::MtuBytes(q.attr.path_mtu), hal::MtuBytes(config_.active_mtu));
  for (uint64_t s = q.done_seq; s < q.post_seq; ++s) {
    Wr& w = q.sq[s % q.sq.size()];
    if (!CarriesPayload(w.opcode) || q.sent_vpsn_hi <= w.vpsn_first) continue;
    const uint64_t sent_pkts = std::min<uint64_t>(q.sent_vpsn_hi - w.vpsn_first, w.npkts);
    const uint64_t bytes = std::min(w.len, sent_pkts * mtu);
    if (bytes == 0) continue;
    WrCold& cold = ColdOf(q, w);
    if (w.inline_data) {  // its bytes went with the WQE
      cold.sent_payload.assign(cold.inline_payload.begin(), cold.inline_payload.begin() + bytes);
    } else {
      cold.sent_payload.resize(bytes);
      // The task still owns its buffer here (this WR's CQE is not out yet).
      if (!DmaLocal(qi, q, w, 0, bytes, cold.sent_payload.data(), true)) cold.sent_payload = {};
    }
    w.has_sent_payload = !cold.sent_payload.empty();
  }
}

void Fabric::EnterErr(uint32_t qi, Qp& q) { FailAndFlush(qi, q, kNoSeq, WcStatus::kWrFlushErr); }

// ------------------------------------------------------------------ CQEs

void Fabric::EmitCqe(uint32_t qi, Qp& q, const Wr& w, WcStatus status) {
  if (status == WcStatus::kSuccess && !w.signaled) return;
  Cqe c;
  c.qp = qi;
  c.wr_seq = w.seq;
  c.wc.wr_id = w.wr_id;
  c.wc.status = status;
  c.wc.qp_num = q.qpn;
  if (status == WcStatus::kSuccess) {
    c.wc.opcode = w.opcode;  // BIND_MW and LOCAL_INV too (rxe_comp.c wr_to_wc_opcode)
    // A WRITE with immediate completes IBV_WC_RDMA_WRITE at the requester.
    if (w.opcode == hal::Opcode::kRdmaWriteWithImm) c.wc.opcode = hal::Opcode::kRdmaWrite;
    if (IsLocalOp(w.opcode) && config_.mutations.on(base::Mutation::kSimMwWcOpcodeSend)) {
      c.wc.opcode = hal::Opcode::kSend;
    }
    c.wc.byte_len = static_cast<uint32_t>(w.len);
    c.wc.vendor_err = 0;
  } else {
    FillErrorCqe(c);
  }
  QueueCqe(qi, q, c, status == WcStatus::kWrFlushErr);
}

void Fabric::FillErrorCqe(Cqe& c) {
  if (config_.profile == RnicProfile::kRxe) {
    // rxe: raw opcode 0 (IBV_WC_SEND, reported as kSend) and vendor_err 0
    // (softroce.md); byte_len is garbage.
    c.wc.opcode = hal::Opcode::kSend;
    c.wc.byte_len = static_cast<uint32_t>(prng_.Next());
    c.wc.vendor_err = 0;
  } else {
    c.wc.opcode = static_cast<hal::Opcode>(prng_.Below(4));
    c.wc.byte_len = static_cast<uint32_t>(prng_.Next());
    c.wc.vendor_err = c.wc.status == WcStatus::kWrFlushErr ? 0xf9 : 0x80 + prng_.Below(16);
  }
}

inline void Fabric::QueueCqe(uint32_t qi, Qp& q, const Cqe& c, bool flush) {
  uint64_t delay = 0;
  if (config_.cqe_jitter_ns != 0) delay = prng_.Below(config_.cqe_jitter_ns + 1);
  if (q.script_late > 0) {
    --q.script_late;
    CountFault(FaultKind::kLateCqe);
    delay += config_.late_cqe_ns_max;
  } else if (InjectFault(FaultKind::kLateCqe)) {
    delay += prng_.Range(1, std::max<uint64_t>(1, config_.late_cqe_ns_max));
  }
  const uint64_t now = clock_->NowNs();
  uint64_t ready = now + delay;
  if (!config_.mutations.on(base::Mutation::kSimPerQpOrderOff)) {
    ready = std::max(ready, q.last_cqe_ready_ns);
    q.last_cqe_ready_ns = ready;
  }
  if (ready <= now && q.pending.empty()) {
    WriteCqe(qi, c, flush);
    return;
  }
  FERRY_CHECK_LT(q.pending.size(), size_t{1} << 24);
  q.pending.push_back(PendingCqe{ready, c, flush});
  if (c.recv) ++q.pending_recv;
  Push(EvType::kCqeDeliver, ready, qi, 0, 0, 0,
       config_.mutations.on(base::Mutation::kSimPerQpOrderOff) ? kNone : CqeChan(qi), kCqeLane);
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
      if (p.cqe.recv) --q.pending_recv;
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
    if (p.cqe.recv) --q.pending_recv;
    WriteCqe(qi, p.cqe, p.flush);
    if (!q.alive) return;
  }
}

void Fabric::Overrun(uint32_t ci) {
  Cq& c = cqs_[ci];
  if (c.errored) return;
  c.errored = true;
  c.count = 0;  // CQEs lost
  c.dups = 0;
  RaiseAsync(c.ctx, AsyncEventType::kCqErr, kNone, ci, 0);
}

void Fabric::WriteCqe(uint32_t qi, const Cqe& cqe, bool flush) {
  Qp& q = *qps_[qi];
  const uint32_t ci = cqe.recv ? q.recv_cq : q.send_cq;
  Cq& c = cqs_[ci];
  if (!c.alive || c.errored) return;
  bool& flush_dropped = cqe.recv ? q.rq_flush_dropped : q.flush_dropped;
  if (flush && flush_dropped) return;  // rxe: rest of the queue dropped silently
  const bool full = c.count == c.capacity;
  const bool forced = !full && InjectFault(FaultKind::kCqOverrun);
  if (full || forced) {
    if (full && flush && config_.profile == RnicProfile::kRxe) {
      flush_dropped = true;
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
  MaybeDupCqe(qi, q, cqe);
}

void Fabric::ScrubCq(uint32_t ci, uint32_t qi) {
  Cq& c = cqs_[ci];
  if (!c.alive || c.count == 0) return;
  uint32_t kept = 0, dups = 0;
  for (uint32_t i = 0; i < c.count; ++i) {
    uint32_t from = c.head + i;
    if (from >= c.capacity) from -= c.capacity;
    if (c.ring[from].qp == qi) continue;
    uint32_t to = c.head + kept;
    if (to >= c.capacity) to -= c.capacity;
    c.ring[to] = c.ring[from];
    ++kept;
    if (c.ring[to].dup) ++dups;
  }
  c.count = kept;
  c.dups = dups;
}

void Fabric::DropQpCqes(uint32_t qi) {
  qps_[qi]->pending.clear();
  qps_[qi]->pending_recv = 0;
}

void Fabric::ResetQpQueues(Qp& q) {
  q.pending.clear();
  q.pending_recv = 0;
  q.done_seq = q.free_seq = q.send_seq = q.post_seq;
  q.sent_vpsn = q.ack_vpsn = q.next_vpsn;
  q.retries = 0;
  q.retry_started = false;
  q.rq_done_seq = q.rq_free_seq = q.rq_post_seq;
  q.recv_active = false;
  q.recv_early = false;
  q.recv_off = 0;
  q.rnr_retries = 0;
  q.rnr_wait = false;
  ++q.rnr_token;
  q.rnr_storm_until_ns = 0;
}

}  // namespace ferry::sim
