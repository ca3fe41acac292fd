// sim/rnic/fabric_qp.cc: the QP state machine: create, the transition table,
// modify (with the pairing ground truth), query, destroy and QPN reuse.
//
// What must stay true: an illegal transition or mask changes nothing; a failed
// call changes nothing; a destroyed QP never executes or completes again.
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

namespace {

// The send-side capacities a device reports for `cap`: mlx5 rounds the send
// queue to a power of two; rxe sizes the send WQE for the larger of the SGE
// list and the inline data and reports that size as max_inline_data
// (rxe_qp.c); the mlx5 model reports the inline size asked.
hal::QpCap ReportedSendCap(RnicProfile profile, const hal::DeviceAttr& limits,
                           const hal::QpCap& cap) {
  hal::QpCap out = cap;
  if (profile == RnicProfile::kMlx5 && cap.max_send_wr > 0) {
    out.max_send_wr = std::min(std::bit_ceil(cap.max_send_wr), limits.max_qp_wr);
  }
  if (profile == RnicProfile::kRxe) {
    out.max_inline_data = std::max<uint32_t>(
        cap.max_inline_data, std::max<uint32_t>(cap.max_send_sge, 1) * uint32_t{sizeof(hal::Sge)});
  }
  return out;
}

}  // namespace

absl::StatusOr<hal::QpInfo> Fabric::VerbCreateQp(uint32_t host, hal::PdHandle pd,
                                                 const hal::QpInitAttr& init) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t pi, CheckPd(host, pd, "ibv_create_qp"));
  FERRY_ASSIGN_OR_RETURN(const uint32_t sci, CheckCq(host, init.send_cq, "ibv_create_qp"));
  FERRY_ASSIGN_OR_RETURN(const uint32_t rci, CheckCq(host, init.recv_cq, "ibv_create_qp"));
  const uint32_t ci = pds_[pi].ctx;
  if (cqs_[sci].ctx != ci || cqs_[rci].ctx != ci) {
    return Violate(ViolationKind::kForeignHandle, "ibv_create_qp: CQ of another context");
  }
  Device& d = devices_[ctxs_[ci].dev];
  const hal::QpCap& cap = init.cap;
  if (cap.max_send_wr > limits_.max_qp_wr || cap.max_recv_wr > limits_.max_qp_wr ||
      cap.max_send_sge > limits_.max_sge || cap.max_recv_sge > limits_.max_sge ||
      cap.max_send_sge > hal::kMaxSgeInline ||
      cap.max_inline_data > ProfileMaxInlineData(config_.profile)) {
    return Errno("ibv_create_qp", EINVAL);
  }
  if (ctxs_[ci].fatal) return Errno("ibv_create_qp", EIO);
  if (d.live_qp >= limits_.max_qp) return Errno("ibv_create_qp", ENOMEM);
  if (InjectFault(FaultKind::kResourceFail)) return Errno("ibv_create_qp", ENOMEM);
  auto q = std::make_unique<Qp>();
  q->ctx = ci;
  q->pd = pi;
  q->dev = ctxs_[ci].dev;
  q->host = host;
  q->send_cq = sci;
  q->recv_cq = rci;
  q->cap = ReportedSendCap(config_.profile, limits_, cap);
  q->sq_sig_all = init.sq_sig_all;
  q->attr.cap = q->cap;
  q->sq.resize(std::max<uint32_t>(q->cap.max_send_wr, 1));
  q->sq_cold.resize(q->sq.size());
  // Receive queue depth: mlx5 rounds to a power of two (and says so at
  // create); rxe's ring holds 2^k - 1 >= the request, which only
  // ibv_query_qp reports (rdma-core providers/rxe, rxe_queue.c).
  q->rq_depth = cap.max_recv_wr;
  if (cap.max_recv_wr > 0) {
    q->rq_depth = config_.profile == RnicProfile::kMlx5
                      ? std::min(std::bit_ceil(cap.max_recv_wr), limits_.max_qp_wr)
                      : std::bit_ceil(cap.max_recv_wr + 1) - 1;
  }
  if (config_.profile == RnicProfile::kMlx5) q->cap.max_recv_wr = q->rq_depth;
  q->attr.cap.max_recv_wr = q->rq_depth;
  q->rq.resize(std::max<uint32_t>(q->rq_depth, 1));
  if (!d.free_qpns.empty()) {
    q->qpn = d.free_qpns.back();
    d.free_qpns.pop_back();
    ++stats_.qpns_reused;
  } else {
    q->qpn = d.next_qpn++;
  }
  const uint32_t qi = static_cast<uint32_t>(qps_.size());
  d.qpn_to_qp[q->qpn] = qi;
  ++qpn_epoch_;
  cqs_[sci].qps.push_back(qi);
  if (rci != sci) cqs_[rci].qps.push_back(qi);
  ++pds_[pi].live_children;
  ++d.live_qp;
  ++live_[K(ObjectKind::kQp)];
  ++created_[K(ObjectKind::kQp)];
  hal::QpInfo info{hal::QpHandle{qi + uint64_t{1}}, q->qpn, q->cap};
  qps_.push_back(std::move(q));
  return info;
}

namespace {

using hal::QpAttrMask;
constexpr uint32_t kRtrReq = hal::kQpAv | hal::kQpPathMtu | hal::kQpDestQpn | hal::kQpRqPsn |
                             hal::kQpMaxDestRdAtomic | hal::kQpMinRnrTimer;
constexpr uint32_t kRtsReq =
    hal::kQpSqPsn | hal::kQpMaxQpRdAtomic | hal::kQpRetryCnt | hal::kQpRnrRetry | hal::kQpTimeout;

struct Transition {
  bool valid = false;
  uint32_t req = 0;
  uint32_t opt = 0;
};

// The kernel's qp_state_table, RC entries (drivers/infiniband/core/verbs.c).
// It has no RESET->ERR entry: rejected with EINVAL in both profiles
// (measured on rxe, kernel 6.1.0-57; docs/simulator.md section 2).
Transition Table(QpState cur, QpState next) {
  using S = QpState;
  const uint32_t s = hal::kQpState;
  if (next == S::kReset) return {true, s, 0};
  if (next == S::kErr) {
    if (cur == S::kReset) return {};
    return {true, s, 0};
  }
  switch (cur) {
    case S::kReset:
      if (next == S::kInit) {
        return {true, s | hal::kQpPkeyIndex | hal::kQpPort | hal::kQpAccessFlags, 0};
      }
      break;
    case S::kInit:
      if (next == S::kInit)
        return {true, 0, hal::kQpPkeyIndex | hal::kQpPort | hal::kQpAccessFlags};
      if (next == S::kRtr) {
        return {true, s | kRtrReq, hal::kQpAltPath | hal::kQpAccessFlags | hal::kQpPkeyIndex};
      }
      break;
    case S::kRtr:
      if (next == S::kRts) {
        return {true, s | kRtsReq,
                hal::kQpCurState | hal::kQpAltPath | hal::kQpAccessFlags | hal::kQpMinRnrTimer |
                    hal::kQpPathMigState};
      }
      break;
    case S::kRts:
      if (next == S::kRts) {
        return {true, 0,
                hal::kQpCurState | hal::kQpAccessFlags | hal::kQpAltPath | hal::kQpPathMigState |
                    hal::kQpMinRnrTimer};
      }
      if (next == S::kSqd) return {true, s, hal::kQpEnSqdAsyncNotify};
      break;
    case S::kSqd:
      if (next == S::kRts) {
        return {true, s,
                hal::kQpCurState | hal::kQpAccessFlags | hal::kQpAltPath | hal::kQpMinRnrTimer |
                    hal::kQpPathMigState};
      }
      if (next == S::kSqd) {
        return {true, 0,
                hal::kQpPkeyIndex | hal::kQpAv | hal::kQpTimeout | hal::kQpRetryCnt |
                    hal::kQpRnrRetry | hal::kQpMaxQpRdAtomic | hal::kQpMaxDestRdAtomic |
                    hal::kQpAltPath | hal::kQpAccessFlags | hal::kQpMinRnrTimer |
                    hal::kQpPathMigState};
      }
      break;
    case S::kSqe:
      if (next == S::kRts) return {true, s, hal::kQpCurState | hal::kQpQkey};
      break;
    case S::kErr:
      break;
  }
  return {};
}

}  // namespace

// ibv_modify_qp in three phases: check everything (nothing changes on an
// error), apply the attributes, then run what entering the new state does.
absl::Status Fabric::VerbModifyQp(uint32_t host, hal::QpHandle qph, const hal::QpAttr& attr,
                                  uint32_t mask) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t qi, CheckQp(host, qph, "ibv_modify_qp"));
  Qp& q = *qps_[qi];
  // A held move to ERR (qp_err_hold) happens before any later modify.
  if (q.hold_token != 0) EndErrHold(qi, q);
  const QpState cur = q.attr.qp_state;
  const QpState next = (mask & hal::kQpState) != 0 ? attr.qp_state : cur;
  FERRY_RETURN_IF_ERROR(CheckModifyAttrs(cur, next, attr, mask));
  uint32_t dst_dev = q.dst_dev;
  if (next == QpState::kRtr && cur == QpState::kInit) {
    const Device& d = devices_[q.dev];
    if (!d.port_up || clock_->NowNs() < d.rtr_fail_until_ns) {
      return Errno("ibv_modify_qp", ENETUNREACH);
    }
    dst_dev = kNone;
    for (uint32_t i = 0; i < devices_.size(); ++i) {
      // Any GID of the peer's table addresses it (both are routable in
      // the sim; docs/simulator.md).
      if (devices_[i].gid == attr.ah_attr.dgid || devices_[i].link_local_gid == attr.ah_attr.dgid)
        dst_dev = i;
    }
  }
  if (q.script_modify_fail > 0) {
    --q.script_modify_fail;
    CountFault(FaultKind::kModifyQpFail);
    return Errno("ibv_modify_qp", ETIMEDOUT);
  }
  if (InjectFault(FaultKind::kModifyQpFail)) return Errno("ibv_modify_qp", ETIMEDOUT);

  // Apply (nothing above changed state).
  ApplyQpAttrs(q, attr, mask);
  q.dst_dev = dst_dev;
  if (next == QpState::kErr && Executing(cur) && MaybeHoldErr(qi, q, mask)) {
    return absl::OkStatus();  // the QP executes on; the hold's end applies ERR
  }
  q.attr.qp_state = next;
  q.attr.cur_qp_state = next;
  if (next != cur) {
    EnterQpState(qi, q, cur, mask);
  } else if (next == QpState::kErr && !q.hung) {
    FlushRecvQueue(qi, q);  // ERR -> ERR flushes receive WRs posted in ERR (rxe keeps them)
  }
  return absl::OkStatus();
}

absl::Status Fabric::CheckModifyAttrs(QpState cur, QpState next, const hal::QpAttr& attr,
                                      uint32_t mask) const {
  Transition t = Table(cur, next);
  if ((mask & hal::kQpState) == 0) t.req &= ~uint32_t{hal::kQpState};
  if (!t.valid || (mask & t.req) != t.req || (mask & ~(t.req | t.opt | hal::kQpState)) != 0) {
    return Errno("ibv_modify_qp", EINVAL);
  }
  if ((mask & hal::kQpCurState) != 0 && attr.cur_qp_state != cur) {
    return Errno("ibv_modify_qp", EINVAL);
  }
  if ((mask & hal::kQpTimeout) != 0 && attr.timeout > 31) return Errno("ibv_modify_qp", EINVAL);
  if ((mask & hal::kQpRetryCnt) != 0 && attr.retry_cnt > 7) return Errno("ibv_modify_qp", EINVAL);
  if ((mask & hal::kQpRnrRetry) != 0 && attr.rnr_retry > 7) return Errno("ibv_modify_qp", EINVAL);
  if ((mask & hal::kQpPort) != 0 && attr.port_num != 1) return Errno("ibv_modify_qp", EINVAL);
  if ((mask & hal::kQpPathMtu) != 0 &&
      (static_cast<uint8_t>(attr.path_mtu) < 1 || static_cast<uint8_t>(attr.path_mtu) > 5)) {
    return Errno("ibv_modify_qp", EINVAL);
  }
  if ((mask & hal::kQpMaxQpRdAtomic) != 0 && attr.max_rd_atomic > limits_.max_qp_init_rd_atom) {
    return Errno("ibv_modify_qp", EINVAL);
  }
  if ((mask & hal::kQpMaxDestRdAtomic) != 0 && attr.max_dest_rd_atomic > limits_.max_qp_rd_atom) {
    return Errno("ibv_modify_qp", EINVAL);
  }
  return absl::OkStatus();
}

void Fabric::ApplyQpAttrs(Qp& q, const hal::QpAttr& attr, uint32_t mask) {
  if (mask & hal::kQpAccessFlags) q.attr.qp_access_flags = attr.qp_access_flags;
  if (mask & hal::kQpPkeyIndex) q.attr.pkey_index = attr.pkey_index;
  if (mask & hal::kQpPort) q.attr.port_num = attr.port_num;
  if (mask & hal::kQpAv) q.attr.ah_attr = attr.ah_attr;
  if (mask & hal::kQpPathMtu) q.attr.path_mtu = attr.path_mtu;
  if (mask & hal::kQpDestQpn) q.attr.dest_qp_num = attr.dest_qp_num;
  if (mask & hal::kQpRqPsn) q.attr.rq_psn = attr.rq_psn & 0xffffff;
  if (mask & hal::kQpSqPsn) q.attr.sq_psn = attr.sq_psn & 0xffffff;
  if (mask & hal::kQpMaxDestRdAtomic) q.attr.max_dest_rd_atomic = attr.max_dest_rd_atomic;
  if (mask & hal::kQpMaxQpRdAtomic) q.attr.max_rd_atomic = attr.max_rd_atomic;
  if (mask & hal::kQpMinRnrTimer) q.attr.min_rnr_timer = attr.min_rnr_timer;
  if (mask & hal::kQpTimeout) q.attr.timeout = attr.timeout;
  if (mask & hal::kQpRetryCnt) q.attr.retry_cnt = attr.retry_cnt;
  if (mask & hal::kQpRnrRetry) q.attr.rnr_retry = attr.rnr_retry;
}

void Fabric::EnterQpState(uint32_t qi, Qp& q, QpState cur, uint32_t mask) {
  switch (q.attr.qp_state) {
    case QpState::kReset:
      // mlx5 scrubs the QP's CQEs on modify to RESET as on destroy.
      ResetQpQueues(q);
      if (config_.profile == RnicProfile::kMlx5) {
        ScrubCq(q.send_cq, qi);
        if (q.recv_cq != q.send_cq) ScrubCq(q.recv_cq, qi);
      }
      {
        const hal::QpCap keep = q.cap;
        q.attr = hal::QpAttr{};
        q.attr.cap = keep;
        q.attr.cap.max_recv_wr = q.rq_depth;
      }
      q.dst_dev = kNone;
      q.hung = false;
      q.hang_token = 0;
      q.flush_dropped = false;
      q.comm_est_sent = false;
      break;
    case QpState::kRtr:
      q.epsn = q.attr.rq_psn;
      q.nak_sent = false;
      q.read_res.clear();
      q.read_res_next = 0;
      CheckPairing(qi, q);
      break;
    case QpState::kRts:
      if (cur == QpState::kRtr) {
        q.psn_base = static_cast<uint32_t>((q.attr.sq_psn - q.next_vpsn) & 0xffffff);
        q.retries = 0;
        q.retry_started = false;
        if (InjectFault(FaultKind::kHungQp)) {
          q.hung = true;
        } else if (StallChance(config_.stall.hung_recover)) {
          StartHang(qi, q,
                    stall_prng_.Range(1, std::max<uint64_t>(1, config_.stall.hung_recover_ns_max)));
        }
        CheckPairing(qi, q);
      }
      Kick(qi);
      break;
    case QpState::kSqd:
      if (mask & hal::kQpEnSqdAsyncNotify) {
        RaiseAsync(q.ctx, AsyncEventType::kSqDrained, qi, kNone, 0);
      }
      break;
    case QpState::kErr:
      EnterErr(qi, q);
      break;
    default:
      break;
  }
}

void Fabric::CheckPairing(uint32_t qi, const Qp& q) {
  if (q.dst_dev == kNone) return;
  const uint32_t pi = FindQpByNumber(q.dst_dev, q.attr.dest_qp_num);
  if (pi == kNone || pi == qi) return;
  const Qp& p = *qps_[pi];
  const QpState ps = p.attr.qp_state;
  if (ps != QpState::kRtr && ps != QpState::kRts && ps != QpState::kSqd) return;
  if (p.dst_dev != q.dev || p.attr.dest_qp_num != q.qpn) return;  // not a pair
  // RTR PSNs are set from RTR on; send PSNs from RTS on.
  auto rts = [](const Qp& x) {
    return x.attr.qp_state == QpState::kRts || x.attr.qp_state == QpState::kSqd;
  };
  auto check = [&](const Qp& sender, const Qp& receiver) {
    if (!rts(sender) || sender.attr.sq_psn == receiver.attr.rq_psn) return;
    Violate(ViolationKind::kMispairedQps,
            absl::StrCat("h", sender.host, " qpn ", sender.qpn, " sends from psn ",
                         sender.attr.sq_psn, " to h", receiver.host, " qpn ", receiver.qpn,
                         ", which expects psn ", receiver.attr.rq_psn,
                         " (connected to each other by number, set up from different "
                         "handshakes)"))
        .IgnoreError();
  };
  check(q, p);
  check(p, q);
}

absl::StatusOr<hal::QpAttr> Fabric::VerbQueryQp(uint32_t host, hal::QpHandle qph) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t qi, CheckQp(host, qph, "ibv_query_qp"));
  hal::QpAttr a = qps_[qi]->attr;
  a.cur_qp_state = a.qp_state;
  return a;
}

void Fabric::FreeQpn(uint32_t dev, uint32_t qpn) {
  devices_[dev].qpn_to_qp.erase(qpn);
  ++qpn_epoch_;
  devices_[dev].free_qpns.push_back(qpn);
}

void Fabric::DestroyQpNow(uint32_t qi, bool scrub) {
  Qp& q = *qps_[qi];
  FERRY_CHECK(q.alive);
  DropQpCqes(qi);
  if (scrub) {
    ScrubCq(q.send_cq, qi);
    if (q.recv_cq != q.send_cq) ScrubCq(q.recv_cq, qi);
  }
  q.alive = false;
  q.hang_token = q.hold_token = 0;
  std::erase(cqs_[q.send_cq].qps, qi);
  if (q.recv_cq != q.send_cq) std::erase(cqs_[q.recv_cq].qps, qi);
  std::erase_if(ctxs_[q.ctx].async_queue, [qi](const AsyncRec& r) { return r.qp == qi; });
  FreeQpn(q.dev, q.qpn);
  --pds_[q.pd].live_children;
  --devices_[q.dev].live_qp;
  --live_[K(ObjectKind::kQp)];
  std::vector<Wr>().swap(q.sq);
  std::vector<WrCold>().swap(q.sq_cold);
  std::vector<Qp::RecvSlot>().swap(q.rq);
  q.done_seq = q.post_seq;
  q.rq_done_seq = q.rq_post_seq;
}

absl::Status Fabric::VerbDestroyQp(uint32_t host, hal::QpHandle qph) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t qi, CheckQp(host, qph, "ibv_destroy_qp"));
  Qp& q = *qps_[qi];
  if (q.events_unacked > 0) {
    return Violate(ViolationKind::kUnackedEventsAtDestroy,
                   absl::StrCat("ibv_destroy_qp: qpn ", q.qpn, " has ", q.events_unacked,
                                " unacknowledged async events (real verbs would block forever)"));
  }
  // rxe 6.1 (measured): ibv_destroy_qp of a QP with a bound type 2 window
  // waits 50 s for the window's reference, warns, and the window's later
  // dealloc drops a reference of the freed QP (a second kernel warning).
  // Invalidate or deallocate windows first.
  if (const uint32_t n = BoundMwsOf(qi);
      n > 0 && !config_.mutations.on(base::Mutation::kSimMwDestroyQpUnchecked)) {
    return Violate(ViolationKind::kBoundMwAtDestroy,
                   absl::StrCat("ibv_destroy_qp: qpn ", q.qpn, " has ", n,
                                " bound memory windows (rxe blocks 50 s in destroy_qp and "
                                "warns; invalidate or deallocate them first)"));
  }
  int fail_errno = 0;
  if (q.script_destroy_fail > 0) {
    --q.script_destroy_fail;
    CountFault(FaultKind::kDestroyQpFail);
    fail_errno = EBUSY;
  } else if (InjectFault(FaultKind::kDestroyQpFail)) {
    fail_errno = prng_.Below(2) == 0 ? EBUSY : EIO;
  }
  if (fail_errno != 0) {
    // The QP stays alive and keeps executing, completing and flushing.
    if (config_.mutations.on(base::Mutation::kSimDestroyFailSilently)) return absl::OkStatus();
    return Errno("ibv_destroy_qp", fail_errno);
  }
  bool scrub = config_.profile == RnicProfile::kMlx5;
  if (config_.mutations.on(base::Mutation::kSimScrubUnderRxe)) scrub = true;
  DestroyQpNow(qi, scrub);
  return absl::OkStatus();
}

}  // namespace ferry::sim
