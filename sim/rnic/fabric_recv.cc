// sim/rnic/fabric_recv.cc: the receive side of an RC QP. ibv_post_recv; a
// SEND placed into the receive WR at the head of the responder's receive
// queue (consumed at the message's first packet, completed at its last);
// an RDMA WRITE with immediate, placed where it names and reported through
// a receive WR consumed at its last packet; the RNR NAK when no receive WR
// is posted and the requester's RNR wait, retried rnr_retry times (7 =
// forever) before RNR_RETRY_EXC_ERR; receive completions (opcode RECV /
// RECV_RDMA_WITH_IMM, byte_len, immediate, source QP) and their flush when
// the QP enters ERR. docs/simulator.md lists each rule and its test.
//
// What must stay true:
// - Receive WRs complete in the order they were posted, each at most once;
//   a duplicate packet (a resend after a lost ACK) consumes nothing.
// - A receive completion is queued only after every byte of its message
//   was placed; a message that could not be placed completes its receive
//   WR in error (LOC_LEN_ERR, LOC_PROT_ERR) and the responder enters ERR.
// - Every DMA into a receive buffer happens inside a packet event, checks
//   the lkey and range like a send SGE, and is checked against the shadow
//   memory.
// - Each loop is bounded by a queue length or a chain length.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "base/check.h"
#include "base/mutation.h"
#include "sim/rnic/fabric.h"
#include "sim/rnic/fabric_internal.h"

namespace ferry::sim {

using namespace fabric_internal;  // NOLINT(build/namespaces): the fabric's own helpers

namespace {

// IBA's RNR NAK timer field (table 45, "RNR NAK timer field encodings"):
// code -> the least time the requester waits before it resends, in ns.
constexpr std::array<uint64_t, 32> kRnrTimerNs = {
    655'360'000, 10'000,      20'000,      30'000,      40'000,     60'000,     80'000,
    120'000,     160'000,     240'000,     320'000,     480'000,    640'000,    960'000,
    1'280'000,   1'920'000,   2'560'000,   3'840'000,   5'120'000,  7'680'000,  10'240'000,
    15'360'000,  20'480'000,  30'720'000,  40'960'000,  61'440'000, 81'920'000, 122'880'000,
    163'840'000, 245'760'000, 327'680'000, 491'520'000,
};

uint64_t RnrTimerNs(uint32_t code) { return kRnrTimerNs[code & 0x1f]; }

}  // namespace

// ------------------------------------------------------------------ post

hal::PostResult Fabric::VerbPostRecv(uint32_t host, hal::QpHandle qph,
                                     absl::Span<const hal::RecvWr> chain) {
  hal::PostResult r;
  auto qi_or = CheckQp(host, qph, "ibv_post_recv");
  if (!qi_or.ok()) {
    r.status = qi_or.status();
    return r;
  }
  const uint32_t qi = *qi_or;
  Qp& q = *qps_[qi];
  const bool can_post = q.attr.qp_state != QpState::kReset;
  const uint64_t depth =
      config_.mutations.on(base::Mutation::kSimRecvQueueUnbounded) ? ~uint64_t{0} : q.rq_depth;
  for (uint32_t i = 0; i < chain.size(); ++i) {
    const hal::RecvWr& wr = chain[i];
    int err = 0;
    if (!can_post) {
      err = EINVAL;
    } else if (wr.num_sge > q.cap.max_recv_sge || wr.num_sge > hal::kMaxSgeInline) {
      err = EINVAL;
    } else if (q.rq_post_seq - q.rq_free_seq >= depth) {
      err = ENOMEM;  // slots free when their CQEs are polled
    }
    if (err != 0) {
      r.status = Errno("ibv_post_recv", err);
      r.first_bad = i;
      return r;
    }
    Qp::RecvSlot& slot = q.rq[q.rq_post_seq % q.rq.size()];
    slot.seq = q.rq_post_seq++;
    slot.wr = wr;
  }
  r.first_bad = static_cast<uint32_t>(chain.size());
  // Posted in ERR: mlx5 flushes it at once; rxe's user-space post only
  // writes the ring, and the WR waits for the next modify to ERR (a hung
  // QP flushes when it recovers).
  if (q.attr.qp_state == QpState::kErr && !q.hung && config_.profile == RnicProfile::kMlx5) {
    FlushRecvQueue(qi, q);
  }
  return r;
}

// ------------------------------------------------------------------ responder

bool Fabric::RecvReady(Qp& r) {
  const uint64_t now = clock_->NowNs();
  if (r.rnr_storm_until_ns > now) return false;
  const RecvPlan& plan = config_.recv;
  if (plan.rnr_storm.num != 0 && recv_prng_.Chance(plan.rnr_storm)) {
    CountFault(FaultKind::kRnrStorm);
    r.rnr_storm_until_ns = now + recv_prng_.Range(1, std::max<uint64_t>(1, plan.rnr_storm_ns_max));
    return false;
  }
  return r.rq_done_seq < r.rq_post_seq;
}

bool Fabric::RecvDropped(Qp& r) {
  if (r.script_recv_drop > 0) {
    --r.script_recv_drop;
  } else if (config_.recv.drop.num == 0 || !recv_prng_.Chance(config_.recv.drop)) {
    return false;
  }
  CountFault(FaultKind::kRecvDrop);
  return true;
}

void Fabric::SendRnrNak(const ReqPacket& p) {
  ++stats_.rnr_naks;
  // The responder expects this PSN again; what follows it on the wire is
  // out of sequence and dropped without another NAK.
  p.r.nak_sent = true;
  SendResp(p.ri, p.r, p.e.a, kNakRnr, p.e.d, p.e.c, 0, p.r.attr.min_rnr_timer);
  DropReq(p.rq);
}

hal::WcStatus Fabric::ScatterRecv(const Qp& r, const hal::RecvWr& w, uint64_t off,
                                  const uint8_t* src, uint64_t len) {
  uint64_t pos = 0;
  uint64_t done = 0;
  for (uint32_t k = 0; k < w.num_sge && done < len; ++k) {
    const hal::Sge& sge = w.sg_list[k];
    const uint64_t s_end = pos + sge.length;
    if (s_end > off + done) {
      const uint64_t start = off + done - pos;
      const uint64_t n = std::min<uint64_t>(sge.length - start, len - done);
      const uint32_t idx = sge.lkey >> 8;
      if (idx == 0 || idx > mrs_.size()) return WcStatus::kLocProtErr;
      const Mr& m = mrs_[idx - 1];
      const uint64_t base = reinterpret_cast<uint64_t>(m.addr);
      if (!m.alive || m.key != sge.lkey || m.dev != r.dev || m.pd != r.pd ||
          (m.access & hal::kAccessLocalWrite) == 0 || sge.addr < base ||
          sge.addr + sge.length > base + m.len) {
        return WcStatus::kLocProtErr;
      }
      uint8_t* dst = reinterpret_cast<uint8_t*>(sge.addr) + start;
      ShadowCheck(dst, n, true, "receive buffer of SEND");
      std::memcpy(dst, src + done, n);
      done += n;
    }
    pos = s_end;
  }
  return done == len ? WcStatus::kSuccess : WcStatus::kLocLenErr;
}

void Fabric::ExecuteSend(const ReqPacket& p) {
  const Event& e = p.e;
  Qp& r = p.r;
  const bool first = e.c == p.wr.vpsn_first;
  const bool last = e.c + 1 == p.wr.vpsn_first + p.wr.npkts;
  if (first) {
    if (!RecvReady(r)) return SendRnrNak(p);
    r.recv_active = true;  // the head receive WR is this message's
    r.recv_off = 0;
  } else if (!r.recv_active) {
    return DropReq(p.rq);  // a middle packet with no message under way
  }
  recv_scratch_.resize(p.len);
  if (!FetchPayload(p, recv_scratch_.data())) return;
  const hal::RecvWr* into = &r.recv_early_wr;
  if (!r.recv_early) {
    const Qp::RecvSlot& slot = r.rq[r.rq_done_seq % r.rq.size()];
    FERRY_CHECK_EQ(slot.seq, r.rq_done_seq);
    into = &slot.wr;
  }
  WcStatus placed = ScatterRecv(r, *into, r.recv_off, recv_scratch_.data(), p.len);
  if (placed == WcStatus::kLocLenErr && config_.mutations.on(base::Mutation::kSimRecvTruncates)) {
    placed = WcStatus::kSuccess;  // mutation: the rest of the message is dropped unseen
  }
  if (placed != WcStatus::kSuccess) {
    // The receive WR completes in error, the requester gets a NAK, and the
    // responder enters ERR, flushing the rest. A message longer than the
    // receive WR: LOC_LEN_ERR / invalid request (REM_INV_REQ_ERR) on mlx5;
    // rxe reports LOC_QP_OP_ERR / REM_OP_ERR (rxe_resp.c check_length). A
    // bad receive SGE: LOC_PROT_ERR / REM_OP_ERR.
    const bool rxe = config_.profile == RnicProfile::kRxe;
    const bool too_long = placed == WcStatus::kLocLenErr;
    if (too_long && rxe) placed = WcStatus::kLocQpOpErr;
    r.recv_active = false;
    CompleteRecv(p.ri, r, placed, hal::Opcode::kRecv, 0, 0, std::nullopt);
    SendResp(p.ri, r, e.a, too_long && !rxe ? kNakInvReq : kNakRemOp, e.d, e.c);
    RaiseAsync(r.ctx, AsyncEventType::kQpReqErr, p.ri, kNone, 0);
    EnterErr(p.ri, r);
    return;
  }
  r.recv_off += p.len;
  ++stats_.packets_executed;
  if (!p.dup) {  // (a duplicate gets here only under sim_dup_send_redelivered)
    r.epsn = (r.epsn + 1) & kPsnMask;
    r.nak_sent = false;
  }
  if (first && !last && config_.mutations.on(base::Mutation::kSimRecvCqeBeforeData)) {
    // Mutation: the CQE goes out now, claiming the whole message; the rest
    // is placed into the completed WR's buffer as it comes.
    r.recv_early_wr = *into;
    r.recv_early = true;
    CompleteRecv(p.ri, r, WcStatus::kSuccess, hal::Opcode::kRecv, static_cast<uint32_t>(p.wr.len),
                 RecvSrcQpn(p.rq), std::nullopt);
  }
  if (last) {
    r.recv_active = false;
    if (!std::exchange(r.recv_early, false)) {
      CompleteRecv(p.ri, r, WcStatus::kSuccess, hal::Opcode::kRecv,
                   static_cast<uint32_t>(r.recv_off), RecvSrcQpn(p.rq), std::nullopt);
    }
  }
  AckExecuted(p);
}

void Fabric::ExecuteWriteImm(const ReqPacket& p, const Mr& m) {
  // The immediate rides on the last packet: it consumes the receive WR,
  // and an RNR there leaves the earlier packets' bytes placed.
  const bool last = p.e.c + 1 == p.wr.vpsn_first + p.wr.npkts;
  if (config_.mutations.on(base::Mutation::kSimWriteImmNoRecv)) {
    ExecuteWrite(p, m);  // mutation: a plain WRITE
    return;
  }
  if (last && !RecvReady(p.r)) return SendRnrNak(p);
  if (!ExecuteWrite(p, m)) return;
  if (last) {
    CompleteRecv(p.ri, p.r, WcStatus::kSuccess, hal::Opcode::kRecvRdmaWithImm,
                 static_cast<uint32_t>(p.wr.len), RecvSrcQpn(p.rq), p.wr.imm_data);
  }
}

void Fabric::CompleteRecv(uint32_t ri, Qp& r, WcStatus status, hal::Opcode op, uint32_t byte_len,
                          uint32_t src_qpn, std::optional<uint32_t> imm) {
  FERRY_CHECK_LT(r.rq_done_seq, r.rq_post_seq);
  const Qp::RecvSlot& slot = r.rq[r.rq_done_seq % r.rq.size()];
  FERRY_CHECK_EQ(slot.seq, r.rq_done_seq);
  ++r.rq_done_seq;
  ++stats_.recv_cqes;
  Cqe c;
  c.qp = ri;
  c.wr_seq = slot.seq;
  c.recv = true;
  c.wc.wr_id = slot.wr.wr_id;
  c.wc.status = status;
  c.wc.qp_num = r.qpn;
  if (status == WcStatus::kSuccess) {
    c.wc.opcode = op;
    c.wc.byte_len = byte_len;
    c.wc.src_qp = src_qpn;
    if (imm.has_value()) {
      c.wc.wc_flags = hal::kWcWithImm;
      c.wc.imm_data = *imm;
    }
  } else {
    FillErrorCqe(c);
  }
  QueueCqe(ri, r, c, status == WcStatus::kWrFlushErr);
}

void Fabric::FlushRecvQueue(uint32_t qi, Qp& q) {
  q.recv_active = false;
  q.recv_early = false;
  if (config_.mutations.on(base::Mutation::kSimRecvNoFlush)) return;
  const uint64_t end = q.rq_post_seq;
  for (uint64_t s = q.rq_done_seq; s < end && q.alive; ++s) {
    CompleteRecv(qi, q, WcStatus::kWrFlushErr, hal::Opcode::kRecv, 0, 0, std::nullopt);
  }
}

// ------------------------------------------------------------------ requester

void Fabric::OnRnrNak(uint32_t qi, Qp& q, uint64_t vpsn, uint32_t timer) {
  if (vpsn < q.ack_vpsn) return;
  // An RNR NAK acknowledges every packet before the one it refuses.
  if (vpsn > q.ack_vpsn) AckUpTo(qi, q, vpsn - 1, /*implied_nak=*/false);
  if (!Executing(q.attr.qp_state) || q.rnr_wait) return;
  // rnr_retry 7 retries forever (IBA; rxe_comp.c and mlx5 alike).
  const bool forever =
      q.attr.rnr_retry == 7 || config_.mutations.on(base::Mutation::kSimRnrRetryForever);
  if (!forever && ++q.rnr_retries > q.attr.rnr_retry) {
    FailAndFlush(qi, q, WrSeqOfVpsn(q, vpsn), WcStatus::kRnrRetryExcErr);
    return;
  }
  // Stop sending; everything from the oldest unacknowledged packet goes
  // again once the timer the responder named has passed.
  q.rnr_wait = true;
  q.sent_vpsn = q.ack_vpsn;
  q.send_seq = q.done_seq;
  ++q.retransmits;
  ++stats_.retransmits;
  Push(EvType::kRnrTimer, clock_->NowNs() + RnrWaitNs(timer), qi, 0, ++q.rnr_token, 0);
}

void Fabric::OnRnrTimer(const Event& e) {
  Qp& q = *qps_[e.a];
  if (!q.alive || !q.rnr_wait || q.rnr_token != e.c) return;
  q.rnr_wait = false;
  if (!Executing(q.attr.qp_state) || q.hung) return;
  Kick(e.a);
}

uint32_t Fabric::RecvSrcQpn(const Qp& requester) const {
  // rxe leaves src_qp 0 on RC (it is defined for UD); mlx5 reports the
  // sender's QP number.
  return config_.profile == RnicProfile::kRxe ? 0 : requester.qpn;
}

uint64_t Fabric::RnrWaitNs(uint32_t timer) const {
  const uint64_t ns = RnrTimerNs(timer);
  if (config_.profile != RnicProfile::kRxe) return ns;
  // rxe waits in jiffies, at least one (rxe_comp.c rnrnak_jiffies); a
  // Debian kernel ticks at 250 Hz.
  constexpr uint64_t kJiffyNs = 4'000'000;
  return std::max(kJiffyNs, (ns + kJiffyNs - 1) / kJiffyNs * kJiffyNs);
}

}  // namespace ferry::sim
