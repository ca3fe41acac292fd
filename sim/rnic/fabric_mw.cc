// sim/rnic/fabric_mw.cc: type 2 memory windows: allocation and
// deallocation, the bind and local-invalidate work requests (executed by the
// requester when it reaches them, completed in post order as BIND_MW /
// LOCAL_INV CQEs), and the responder's check of a window rkey.
//
// What must stay true (docs/simulator.md section 3; docs/hal.md, memory
// windows; rxe_mw.c is the reference, measured against rxe 6.1):
// - A window grants nothing until bound; once bound, only requests arriving
//   on the QP that posted the bind may use it, with the bound access, on the
//   bound range (profile mlx5, IBA) or anywhere in the bound MR (profile
//   rxe: rxe_resp.c checks only the MR's range; measured).
// - LOCAL_INV of its rkey and DeallocMw unbind it at once: a request that
//   arrives afterwards is refused (REM_ACCESS_ERR, responder to ERR).
// - A bind is refused (MW_BIND_ERR, QP to ERR) when the MR lacks
//   kAccessMwBind, the window is already bound, window, MR and QP are not of
//   one PD, the range is empty or outside the MR, or remote write/atomic is
//   asked of an MR without local write.
// - A bound window holds its MR: DeregMr fails (EINVAL) until it is unbound,
//   and its QP: destroy_qp fails the run (violation bound_mw_at_destroy; rxe
//   6.1 blocks 50 s and warns) until it is invalidated or deallocated.
// Each rule has a mutation switch that breaks it (base/mutation.h, sim_mw_*).
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "sim/rnic/fabric.h"
#include "sim/rnic/fabric_internal.h"

namespace ferry::sim {

using namespace fabric_internal;  // NOLINT(build/namespaces): the fabric's own helpers

namespace {

constexpr uint32_t kMwRemoteAccess =
    hal::kAccessRemoteRead | hal::kAccessRemoteWrite | hal::kAccessRemoteAtomic;
constexpr uint32_t kMaxMwIndex = (1u << 23) - 1;  // index bits 8-30 of a window key

}  // namespace

absl::StatusOr<hal::MwInfo> Fabric::VerbAllocMw(uint32_t host, hal::PdHandle pd, hal::MwType type) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t pi, CheckPd(host, pd, "ibv_alloc_mw"));
  const uint32_t ci = pds_[pi].ctx;
  Device& d = devices_[ctxs_[ci].dev];
  // Type 1 windows are bound by ibv_bind_mw, which the HAL does not offer.
  if (type != hal::MwType::kType2 || !limits_.mw_type2) return Errno("ibv_alloc_mw", EOPNOTSUPP);
  if (ctxs_[ci].fatal) return Errno("ibv_alloc_mw", EIO);
  if (d.live_mw >= limits_.max_mw || mws_.size() >= kMaxMwIndex) {
    return Errno("ibv_alloc_mw", ENOMEM);
  }
  if (InjectFault(FaultKind::kResourceFail)) return Errno("ibv_alloc_mw", ENOMEM);
  Mw w;
  w.ctx = ci;
  w.pd = pi;
  w.dev = ctxs_[ci].dev;
  w.key = kMwKeyBit | (static_cast<uint32_t>(mws_.size() + 1) << 8) |
          static_cast<uint32_t>(prng_.Below(256));
  mws_.push_back(w);
  ++pds_[pi].live_children;
  ++d.live_mw;
  ++live_[K(ObjectKind::kMw)];
  ++created_[K(ObjectKind::kMw)];
  return hal::MwInfo{hal::MwHandle{mws_.size()}, w.key};
}

absl::Status Fabric::VerbDeallocMw(uint32_t host, hal::MwHandle mw) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t wi, CheckMw(host, mw, "ibv_dealloc_mw"));
  FreeMwNow(wi);
  return absl::OkStatus();
}

void Fabric::FreeMwNow(uint32_t wi) {
  Mw& w = mws_[wi];
  FERRY_CHECK(w.alive);
  w.alive = false;
  // Under the mutation the freed window's binding stays honoured (and keeps
  // its MR pinned): the model of a device that frees lazily.
  if (!config_.mutations.on(base::Mutation::kSimMwInvalidateKeepsRkey)) UnbindMw(w);
  --pds_[w.pd].live_children;
  --devices_[w.dev].live_mw;
  --live_[K(ObjectKind::kMw)];
}

uint32_t Fabric::BoundMwsOnQpn(uint32_t host, std::string_view device, uint32_t qpn) const {
  uint32_t n = 0;
  for (uint32_t qi = 0; qi < qps_.size(); ++qi) {
    const Qp& q = *qps_[qi];
    if (q.alive && q.host == host && q.qpn == qpn && devices_[q.dev].name == device)
      n += BoundMwsOf(qi);
  }
  return n;
}

uint32_t Fabric::BoundMwsOf(uint32_t qi) const {
  uint32_t n = 0;
  for (const Mw& w : mws_) n += (w.alive && w.bound && w.qp == qi) ? 1 : 0;
  return n;
}

void Fabric::UnbindMw(Mw& w) {
  if (!w.bound) return;
  Mr& m = mrs_[w.mr];
  FERRY_CHECK_GT(m.bound_mws, 0u);
  --m.bound_mws;
  w.bound = false;
  w.mr = w.qp = kNone;
  w.addr = w.len = 0;
  w.access = 0;
}

absl::Status Fabric::CheckBindHandles(uint32_t host, const hal::SendWr& wr) {
  if (wr.opcode != hal::Opcode::kBindMw) return absl::OkStatus();
  FERRY_RETURN_IF_ERROR(CheckMw(host, wr.bind.mw, "ibv_post_send (bind_mw)").status());
  return CheckMr(host, wr.bind.mr, "ibv_post_send (bind_mw)").status();
}

hal::WcStatus Fabric::ExecuteLocalOp(uint32_t qi, const Qp& q, const Wr& w) {
  FERRY_CHECK(IsLocalOp(w.opcode));
  const WrCold& cold = ColdOf(q, w);
  if (w.opcode == hal::Opcode::kBindMw) return ExecuteBind(qi, q, cold.bind);
  return ExecuteLocalInv(q, cold.invalidate_rkey);
}

// rxe_check_bind_mw / rxe_do_bind_mw for a type 2 window. Handles were
// checked at post; the objects may have died since (then: MW_BIND_ERR).
hal::WcStatus Fabric::ExecuteBind(uint32_t qi, const Qp& q, const hal::MwBind& b) {
  Mw& w = mws_[b.mw.id - 1];
  Mr& m = mrs_[b.mr.id - 1];
  if (!w.alive || !m.alive) return WcStatus::kMwBindErr;
  const uint64_t base = reinterpret_cast<uint64_t>(m.addr);
  const bool writable = (b.access & (hal::kAccessRemoteWrite | hal::kAccessRemoteAtomic)) != 0;
  const bool ok = !w.bound && w.pd == q.pd && m.pd == q.pd &&
                  (m.access & hal::kAccessMwBind) != 0 && (b.access & ~kMwRemoteAccess) == 0 &&
                  (!writable || (m.access & hal::kAccessLocalWrite) != 0) && b.length > 0 &&
                  b.addr >= base && b.addr + b.length >= b.addr &&
                  b.addr + b.length <= base + m.len;
  if (!ok && !config_.mutations.on(base::Mutation::kSimMwBindUnchecked)) {
    return WcStatus::kMwBindErr;
  }
  UnbindMw(w);  // (only under the mutation can it be bound here)
  w.bound = true;
  w.mr = static_cast<uint32_t>(b.mr.id - 1);
  w.qp = qi;
  w.addr = b.addr;
  w.len = b.length;
  w.access = b.access;
  w.key = (w.key & ~uint32_t{0xff}) | (b.rkey & 0xff);  // the consumer's tag byte only
  ++m.bound_mws;
  return WcStatus::kSuccess;
}

// rxe_invalidate_mw. Invalidating an MR rkey (fast-registered MRs) is not
// modelled: LOC_QP_OP_ERR, as rxe gives for an MR it cannot invalidate.
hal::WcStatus Fabric::ExecuteLocalInv(const Qp& q, uint32_t rkey) {
  if (!IsMwKey(rkey)) return WcStatus::kLocQpOpErr;
  const uint32_t idx = (rkey & ~kMwKeyBit) >> 8;
  if (idx == 0 || idx > mws_.size()) return WcStatus::kLocQpOpErr;
  Mw& w = mws_[idx - 1];
  if (!w.alive || !w.bound || w.key != rkey || w.pd != q.pd || w.dev != q.dev) {
    return WcStatus::kLocQpOpErr;
  }
  if (!config_.mutations.on(base::Mutation::kSimMwInvalidateKeepsRkey)) UnbindMw(w);
  return WcStatus::kSuccess;
}

void Fabric::CompleteLocalOpsAtHead(uint32_t qi, Qp& q) {
  // Bounded by the send queue: each round completes one WR or returns.
  while (q.alive && q.done_seq < q.post_seq && Executing(q.attr.qp_state)) {
    const Wr& h = q.sq[q.done_seq % q.sq.size()];
    if (!IsLocalOp(h.opcode) || !h.started) return;
    if (h.local_status != WcStatus::kSuccess) {
      FailAndFlush(qi, q, h.seq, h.local_status);
      return;
    }
    CompleteOne(qi, q);
  }
}

// rxe_lookup_mw, then check_rkey's range check.
const Fabric::Mr* Fabric::ResolveMw(uint32_t dev, uint32_t pd, uint32_t responder_qi, uint32_t rkey,
                                    uint64_t addr, uint64_t len, uint32_t need_access) const {
  const uint32_t idx = (rkey & ~kMwKeyBit) >> 8;
  if (idx == 0 || idx > mws_.size()) return nullptr;
  const Mw& w = mws_[idx - 1];
  const base::Mutations& mu = config_.mutations;
  if (!w.alive && !mu.on(base::Mutation::kSimMwInvalidateKeepsRkey)) return nullptr;
  if (!w.bound || w.key != rkey || w.dev != dev || (pd != kNone && w.pd != pd)) return nullptr;
  if (w.qp != responder_qi && !mu.on(base::Mutation::kSimMwAnyQp)) return nullptr;
  const Mr& m = mrs_[w.mr];
  if (!m.alive) return nullptr;
  if (addr + len < addr) return nullptr;
  if (!mu.on(base::Mutation::kSimMwIgnoreWindow)) {
    if ((w.access & need_access) != need_access) return nullptr;
    // mlx5 (IBA): the bound range; rxe: only the MR's (below).
    const bool check_window = config_.profile == RnicProfile::kMlx5;
    if (check_window && (addr < w.addr || addr + len > w.addr + w.len)) return nullptr;
  }
  const uint64_t base = reinterpret_cast<uint64_t>(m.addr);
  if (addr < base || addr + len > base + m.len) return nullptr;
  return &m;
}

}  // namespace ferry::sim
