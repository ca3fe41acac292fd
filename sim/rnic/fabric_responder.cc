// sim/rnic/fabric_responder.cc: the responder: a request packet arrives at the QP
// its requester is connected to; PSN window, duplicates (re-ACK with the last
// executed PSN, READ only from a resource), access checks, WRITE placement
// and READ responses.
//
// What must stay true: every DMA happens inside a packet event, touches only the
// packet's range and is checked against the shadow memory.
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

// OnReq's phases: find the packet's WR at the requester, find and gate the
// responder (PSN window, state), then execute it (ExecuteReq).
void Fabric::OnReq(const Event& e) {
  Qp& rq = *qps_[e.a];
  FERRY_CHECK_GT(rq.reqs_queued, 0u);
  --rq.reqs_queued;                                    // this packet has left the wire
  if (!rq.alive || rq.sq.empty()) return DropReq(rq);  // requester gone: no DMA of its memory
  const Wr* wp = FindPacketWr(rq, e.b, e.c);
  if (wp == nullptr) return DropReq(rq);
  const Wr& wr = *wp;
  // The sim moves a packet's payload when it arrives, but an RNIC fetches
  // it when it transmits. A WR that completed (in error: a success needs
  // this packet's ACK) before its packet arrived has returned its local
  // buffer to the user: its packets carry the bytes saved at completion
  // (FailAndFlush), or are dropped if none were saved.
  const bool completed =
      wr.seq < rq.done_seq && !config_.mutations.on(base::Mutation::kSimFetchAfterCompletion);
  if (completed && !wr.has_sent_payload) {
    ++stats_.late_packets_dropped;
    return DropReq(rq);
  }
  const uint32_t dev = rq.dst_dev;
  if (dev == kNone || !devices_[dev].port_up) return DropReq(rq);
  const uint32_t ri = PeerQpOf(rq);
  if (ri == kNone) return DropReq(rq);
  Qp& r = *qps_[ri];
  const QpState rs = r.attr.qp_state;
  if (rs != QpState::kRtr && rs != QpState::kRts && rs != QpState::kSqd) return DropReq(rq);
  const int32_t diff = PsnDiff(e.d, r.epsn);
  if (diff > 0) {  // a gap: NAK once with the expected PSN
    if (!r.nak_sent) {
      r.nak_sent = true;
      SendResp(ri, r, e.a, kNakSeq, r.epsn, e.c - static_cast<uint64_t>(diff));
    }
    return DropReq(rq);
  }
  const bool dup = diff < 0;
  if (dup) ++stats_.duplicates;
  if (rs == QpState::kRtr && !r.comm_est_sent) {
    r.comm_est_sent = true;
    RaiseAsync(r.ctx, AsyncEventType::kCommEst, ri, kNone, 0);
  }
  const uint64_t mtu = std::min(hal::MtuBytes(rq.attr.path_mtu), hal::MtuBytes(config_.active_mtu));
  ReqPacket p{e, rq, wr, ri, r, 0, 0, completed, dup};
  p.off = (e.c - wr.vpsn_first) * mtu;
  p.len = p.off < wr.len ? std::min(mtu, wr.len - p.off) : 0;
  ExecuteReq(p);
}

// A gated packet: a duplicate is re-acknowledged; otherwise the access
// check and the opcode's execution.
inline void Fabric::ExecuteReq(const ReqPacket& p) {
  const Event& e = p.e;
  Qp& rq = p.rq;
  const Wr& wr = p.wr;
  const uint32_t ri = p.ri;
  Qp& r = p.r;
  const uint32_t dev = rq.dst_dev;
  const bool dup = p.dup;
  const hal::Opcode op = wr.opcode;
  const bool is_write = CarriesPayload(op);  // WRITE, WRITE with immediate, SEND
  const bool redeliver =
      op == hal::Opcode::kSend && config_.mutations.on(base::Mutation::kSimDupSendRedelivered);
  if (dup && is_write && !redeliver) {
    // Re-acknowledged without executing, with the PSN of the last packet
    // this responder executed (epsn - 1), not the duplicate's own PSN: an
    // ACK says "everything up to here was placed" (IBA C9-105; rxe's
    // duplicate_request acks qp->resp.ack_psn - 1). A requester whose PSNs
    // are not this responder's (a QP paired from another handshake) thus
    // never sees its own unexecuted packets acknowledged (seed 13854).
    const uint32_t ack_psn =
        config_.mutations.on(base::Mutation::kSimDupAckEchoesPsn) ? e.d : ((r.epsn - 1) & kPsnMask);
    SendResp(ri, r, e.a, kAck, ack_psn, e.c);
    return;
  }
  if (ConsumesRecv(op) && RecvDropped(r)) return DropReq(rq);
  if (op == hal::Opcode::kSend) return ExecuteSend(p);  // no rkey: the receive WR says where
  const uint32_t need = is_write ? hal::kAccessRemoteWrite : hal::kAccessRemoteRead;
  const Mr* m = (r.attr.qp_access_flags & need) == need
                    ? ResolveRkey(dev, r.pd, ri, wr.rkey, wr.remote_addr, wr.len, need)
                    : nullptr;
  if (m == nullptr) {
    // Access violation: REM_ACCESS_ERR at the requester, responder to ERR.
    SendResp(ri, r, e.a, kNakAccess, e.d, e.c);
    RaiseAsync(r.ctx, AsyncEventType::kQpAccessErr, ri, kNone, 0);
    EnterErr(ri, r);
    return;
  }
  if (op == hal::Opcode::kRdmaWriteWithImm) return ExecuteWriteImm(p, *m);
  if (is_write) {
    ExecuteWrite(p, *m);
    return;
  }
  ExecuteRead(p);
}

void Fabric::DropReq(Qp& requester) {
  ++stats_.packets_dropped;
  ++requester.path_faults;
}

const Fabric::Wr* Fabric::FindPacketWr(const Qp& rq, uint32_t seq_lo, uint64_t vpsn) const {
  // Find the WR by its low 32 bits: it lies within the ring window.
  const uint64_t lo = rq.post_seq > rq.sq.size() ? rq.post_seq - rq.sq.size() : 0;
  uint64_t seq = (rq.post_seq & ~uint64_t{0xffffffff}) | seq_lo;
  if (seq >= rq.post_seq) seq -= uint64_t{1} << 32;
  if (seq < lo || seq >= rq.post_seq) return nullptr;
  const Wr& cand = rq.sq[seq % rq.sq.size()];
  if (cand.seq == seq && vpsn >= cand.vpsn_first && vpsn < cand.vpsn_first + cand.npkts)
    return &cand;
  return nullptr;
}

inline bool Fabric::FetchPayload(const ReqPacket& p, uint8_t* dst) {
  if (p.completed) {
    const std::vector<uint8_t>& sent = ColdOf(p.rq, p.wr).sent_payload;
    if (p.off + p.len > sent.size()) {  // not sent before completion
      DropReq(p.rq);
      return false;
    }
    std::memcpy(dst, sent.data() + p.off, p.len);
    ++stats_.late_packets_landed;
    return true;
  }
  if (p.wr.inline_data) {  // copied at post_send
    const std::vector<uint8_t>& payload = ColdOf(p.rq, p.wr).inline_payload;
    FERRY_CHECK_LE(p.off + p.len, payload.size());
    std::memcpy(dst, payload.data() + p.off, p.len);
    return true;
  }
  if (!DmaLocal(p.e.a, p.rq, p.wr, p.off, p.len, dst, true)) {
    // The requester's local MR vanished mid-WR: nothing placed.
    if (Executing(p.rq.attr.qp_state)) {
      FailAndFlush(p.e.a, p.rq, p.wr.seq, WcStatus::kLocProtErr);
    }
    return false;
  }
  return true;
}

bool Fabric::ExecuteWrite(const ReqPacket& p, const Mr& m) {
  const Wr& wr = p.wr;
  Qp& r = p.r;
  uint8_t* dst = m.addr + (wr.remote_addr - reinterpret_cast<uint64_t>(m.addr)) + p.off;
  ShadowCheck(dst, p.len, false, "remote target of WRITE");
  if (!FetchPayload(p, dst)) return false;
  ++stats_.packets_executed;
  r.epsn = (r.epsn + 1) & kPsnMask;
  r.nak_sent = false;
  AckExecuted(p);
  return true;
}

inline void Fabric::AckExecuted(const ReqPacket& p) {
  const Event& e = p.e;
  const Wr& wr = p.wr;
  Qp& r = p.r;
  // ACK coalescing: while more of this requester's packets are already
  // on the wire behind this one, acknowledge only every kAckEvery-th
  // packet; the last one in a burst is always acknowledged.
  if (e.c + 1 == wr.vpsn_first + wr.npkts) {
    ++r.unacked_wrs;
    const bool more = qps_[e.a]->reqs_queued != 0;
    if (!more || r.unacked_wrs >= kAckEvery) {
      r.unacked_wrs = 0;
      SendResp(p.ri, r, e.a, kAck, e.d, e.c);
    }
  }
}

void Fabric::ExecuteRead(const ReqPacket& p) {
  const Event& e = p.e;
  Qp& r = p.r;
  // READ: the response carries the data; it is placed when it arrives. It
  // also acknowledges the WRITEs before it (the requester takes it as an
  // implicit ACK), so the coalescing count restarts.
  if (!p.dup) {
    ++stats_.packets_executed;
    r.epsn = (r.epsn + 1) & kPsnMask;
    r.nak_sent = false;
    r.unacked_wrs = 0;
    NoteReadResource(r, (e.d - static_cast<uint32_t>(e.c - p.wr.vpsn_first)) & kPsnMask,
                     p.wr.npkts);
  } else if (!HasReadResource(r, e.d) && !config_.mutations.on(base::Mutation::kSimDupReadAnyPsn)) {
    // A duplicate READ this responder never executed (its PSN is only
    // "old" in this responder's numbering: a requester paired from another
    // handshake): dropped. Re-executing it would answer with its own PSN,
    // which the requester takes as an ACK of the WRITEs before it, never
    // placed (seed 13854).
    return DropReq(p.rq);
  }
  SendResp(p.ri, r, e.a, kReadResp, e.d, e.c, p.len);  // carries the data: serialized
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

}  // namespace ferry::sim
