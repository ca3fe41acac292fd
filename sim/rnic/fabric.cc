// sim/rnic/fabric.cc: the simulated RNIC: object tables, the verbs control
// path for devices, PDs, MRs, channels and CQs, handle checks and
// violations, contexts, async events, ground-truth queries. One file per
// job for the rest: fabric_qp.cc (the QP state machine: create, modify,
// query, destroy), event_queue.h (future events in (t_ns, seq) order),
// fabric_datapath.cc (stepping events, post_send, the requester's
// packets), fabric_responder.cc, fabric_completion.cc (responses, retry
// timer, error and flush, CQEs, overrun), fabric_faults.cc (link and
// scripted faults), fabric_stall.cc (the stall kinds: a QP that hangs and
// recovers, a held move to ERR, a duplicated CQE), fabric_mw.cc (memory
// windows) and sim_verbs.cc (the hal::Verbs adapter).
//
// What must stay true: a failed call changes nothing; every object created is
// counted in live_/created_ and uncounted exactly once when destroyed (by its
// own destroy call, or by closing its context).
#include "sim/rnic/fabric.h"

#include <algorithm>
#include <bit>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "base/string_view.h"
#include "hal/errno_status.h"
#include "sim/rnic/fabric_internal.h"

namespace ferry::sim {

using namespace fabric_internal;  // NOLINT(build/namespaces): the fabric's own helpers

std::string_view RnicProfileName(RnicProfile p) { return p == RnicProfile::kMlx5 ? "mlx5" : "rxe"; }

hal::DeviceAttr ProfileLimits(RnicProfile p) {
  hal::DeviceAttr a;
  if (p == RnicProfile::kMlx5) {
    a.max_qp = 262144;
    a.max_qp_wr = 32768;
    a.max_sge = 30;
    a.max_cq = 16777216;
    a.max_cqe = 4194303;
    a.max_mr = 16777216;
    a.max_pd = 16777216;
    a.max_mr_size = ~uint64_t{0};
    a.max_qp_rd_atom = 16;
    a.max_qp_init_rd_atom = 16;
    a.max_mw = 16777216;
  } else {
    a.max_qp = 65536;
    a.max_qp_wr = 16384;
    a.max_sge = 32;
    a.max_cq = 16384;
    a.max_cqe = 32767;
    a.max_mr = 262144;
    a.max_pd = 65536;
    a.max_mr_size = ~uint64_t{0};
    a.max_qp_rd_atom = 128;
    a.max_qp_init_rd_atom = 128;  // rxe_param.h: both RXE_MAX_QP_*RD_ATOM
    a.max_mw = 524287;            // ibv_devinfo -v on rxe, kernel 6.1
  }
  a.phys_port_cnt = 1;
  a.mw_type2 = true;  // ConnectX: type 2B; rxe: MEM_WINDOW_TYPE_2B (measured)
  return a;
}

uint32_t ProfileMaxInlineData(RnicProfile p) {
  // rxe: RXE_MAX_INLINE_DATA, the module parameter's default (kernel 6.1;
  // the conformance case InlineWriteTakesItsBytesAtPost prints a real
  // device's answer). mlx5: a model value of the same order.
  return p == RnicProfile::kMlx5 ? 256 : 400;
}

std::string_view ViolationKindName(ViolationKind k) {
  switch (k) {
    case ViolationKind::kWrongActor:
      return "wrong_actor";
    case ViolationKind::kForeignHandle:
      return "foreign_handle";
    case ViolationKind::kDestroyedHandle:
      return "destroyed_handle";
    case ViolationKind::kUnackedEventsAtDestroy:
      return "unacked_events_at_destroy";
    case ViolationKind::kBadAck:
      return "bad_ack";
    case ViolationKind::kLocalAfterRelease:
      return "local_after_release";
    case ViolationKind::kRemoteAfterFence:
      return "remote_after_fence";
    case ViolationKind::kMispairedQps:
      return "mispaired_qps";
    case ViolationKind::kBoundMwAtDestroy:
      return "bound_mw_at_destroy";
  }
  return "?";
}

std::string_view ObjectKindName(ObjectKind k) {
  switch (k) {
    case ObjectKind::kContext:
      return "context";
    case ObjectKind::kPd:
      return "pd";
    case ObjectKind::kMr:
      return "mr";
    case ObjectKind::kCompChannel:
      return "comp_channel";
    case ObjectKind::kCq:
      return "cq";
    case ObjectKind::kQp:
      return "qp";
    case ObjectKind::kMw:
      return "mw";
    case ObjectKind::kCount:
      break;
  }
  return "?";
}

Fabric::Fabric(FabricConfig config, Prng prng, VirtualClock* clock, Trace* trace)
    : config_(std::move(config)),
      limits_(config_.limits.value_or(ProfileLimits(config_.profile))),
      prng_(prng),
      stall_prng_(config_.stall.seed),
      recv_prng_(config_.recv.seed),
      clock_(clock),
      trace_(trace) {
  FERRY_CHECK(clock_ != nullptr);
  FERRY_CHECK_GE(config_.hosts, 1u);
  FERRY_CHECK_GE(config_.devices_per_host, 1u);
  FERRY_CHECK_LE(config_.hosts * config_.devices_per_host, 4096u);
  FERRY_CHECK_GE(config_.link_gbps, 1u);
  // Every draw of the RNIC's stream is folded into the run's trace, so the
  // determinism check sees it (docs/design.md section 7).
  if (trace_ != nullptr) prng_.AttachTrace(trace_, kTraceStream);
  if (trace_ != nullptr) stall_prng_.AttachTrace(trace_, kStallTraceStream);
  if (trace_ != nullptr) recv_prng_.AttachTrace(trace_, kRecvTraceStream);
  hosts_.resize(config_.hosts);
  for (uint32_t h = 0; h < config_.hosts; ++h) {
    for (uint32_t d = 0; d < config_.devices_per_host; ++d) {
      Device dev;
      dev.host = h;
      dev.name = absl::StrCat("sim", d);
      // IPv4-mapped GID ::ffff:10.<h>.<d>.1 (the address packets route by)
      // and a link-local one fe80::5e:<h>:<d>:1, each listed as RoCE v1
      // and v2, in rxe's order (VGidTable).
      dev.gid.raw[10] = 0xff;
      dev.gid.raw[11] = 0xff;
      dev.gid.raw[12] = 10;
      dev.gid.raw[13] = static_cast<uint8_t>(h);
      dev.gid.raw[14] = static_cast<uint8_t>(d);
      dev.gid.raw[15] = 1;
      dev.link_local_gid.raw[0] = 0xfe;
      dev.link_local_gid.raw[1] = 0x80;
      dev.link_local_gid.raw[9] = 0x5e;
      dev.link_local_gid.raw[11] = static_cast<uint8_t>(h);
      dev.link_local_gid.raw[13] = static_cast<uint8_t>(d);
      dev.link_local_gid.raw[15] = 1;
      dev.guid = (uint64_t{0x5e} << 56) | (uint64_t{h} << 16) | d;
      devices_.push_back(std::move(dev));
    }
  }
  for (size_t i = 0; i < config_.script.size(); ++i) {
    Push(EvType::kScript, config_.script[i].at_ns, static_cast<uint32_t>(i), 0, 0, 0);
  }
  if (config_.plan.Enabled(FaultKind::kLinkDown) || config_.plan.Enabled(FaultKind::kPortFlap)) {
    FERRY_CHECK_GT(config_.fault_tick_ns, 0u);
    Push(EvType::kFaultTick, clock_->NowNs() + config_.fault_tick_ns, 0, 0, 0, 0);
  }
}

Fabric::~Fabric() = default;

std::string Fabric::Describe() const {
  std::string out = absl::StrFormat(
      "rnic profile=%s hosts=%u devices_per_host=%u mtu=%u latency_ns=%u jitter_ns=%u "
      "cqe_jitter_ns=%u\n",
      RnicProfileName(config_.profile), config_.hosts, config_.devices_per_host,
      hal::MtuBytes(config_.active_mtu), config_.link_latency_ns, config_.link_jitter_ns,
      config_.cqe_jitter_ns);
  absl::StrAppend(&out, config_.plan.ToString());
  if (config_.stall.AnyEnabled()) absl::StrAppend(&out, config_.stall.ToString());
  if (config_.recv.AnyEnabled()) absl::StrAppend(&out, config_.recv.ToString());
  if (!config_.script.empty()) {
    absl::StrAppend(&out, "fault script:\n");
    for (const auto& f : config_.script) absl::StrAppend(&out, "  ", f.ToString(), "\n");
  }
  return out;
}

// ------------------------------------------------------------------ callers

absl::Status Fabric::Violate(ViolationKind k, std::string message) {
  if (trace_ != nullptr) trace_->Event("violation", static_cast<uint64_t>(k), current_actor_);
  violations_.push_back(Violation{k, clock_->NowNs(), current_actor_, message});
  return absl::FailedPreconditionError(
      absl::StrCat("sim rnic violation ", AV(ViolationKindName(k)), ": ", message));
}

bool Fabric::HasViolation(ViolationKind k) const {
  return std::any_of(violations_.begin(), violations_.end(),
                     [k](const Violation& v) { return v.kind == k; });
}

void Fabric::GrowCallTable() {
  FERRY_CHECK_LT(current_actor_, 1u << 20);
  calls_by_actor_.resize(current_actor_ + 1);
}

uint64_t Fabric::CallsBy(uint32_t actor) const {
  return actor < calls_by_actor_.size() ? calls_by_actor_[actor] : 0;
}

uint32_t Fabric::LastCallerOf(hal::QpHandle qp) const {
  if (qp.id == 0 || qp.id > qps_.size()) return 0;
  return qps_[qp.id - 1]->last_caller;
}

absl::Status Fabric::BindOwner(hal::QpHandle qp, uint32_t actor) {
  if (qp.id == 0 || qp.id > qps_.size() || !qps_[qp.id - 1]->alive) {
    return absl::NotFoundError("BindOwner: no live QP with that handle");
  }
  qps_[qp.id - 1]->owner = actor;
  return absl::OkStatus();
}

absl::Status Fabric::BindOwner(hal::CqHandle cq, uint32_t actor) {
  if (cq.id == 0 || cq.id > cqs_.size() || !cqs_[cq.id - 1].alive) {
    return absl::NotFoundError("BindOwner: no live CQ with that handle");
  }
  cqs_[cq.id - 1].owner = actor;
  if (owned_cqs_.size() <= actor) owned_cqs_.resize(actor + 1);
  owned_cqs_[actor].push_back(static_cast<uint32_t>(cq.id - 1));
  return absl::OkStatus();
}

bool Fabric::OwnerCqReady(uint32_t actor) {
  if (actor >= owned_cqs_.size()) return false;
  std::vector<uint32_t>& list = owned_cqs_[actor];
  bool ready = false;
  size_t keep = 0;
  for (uint32_t ci : list) {
    const Cq& c = cqs_[ci];
    if (!c.alive || c.owner != actor) continue;
    list[keep++] = ci;
    ready = ready || c.count > 0 || c.errored;
  }
  list.resize(keep);
  return ready;
}

// Generic handle check: the object exists in this fabric, belongs to the
// caller's host, and is alive.
#define FERRY_SIM_CHECK_HANDLE_(table, kindname, hostexpr)                                       \
  NoteCall();                                                                                    \
  if (h.id == 0 || h.id > table.size()) {                                                        \
    return Violate(                                                                              \
        ViolationKind::kForeignHandle,                                                           \
        absl::StrCat(AV(call), ": ", kindname, " handle ", h.id, " is not of this fabric"));     \
  }                                                                                              \
  const uint32_t idx = static_cast<uint32_t>(h.id - 1);                                          \
  if ((hostexpr) != host) {                                                                      \
    return Violate(ViolationKind::kForeignHandle,                                                \
                   absl::StrCat(AV(call), ": ", kindname, " handle ", h.id, " belongs to host ", \
                                (hostexpr), ", caller is host ", host));                         \
  }

absl::StatusOr<uint32_t> Fabric::CheckCtx(uint32_t host, hal::ContextHandle h,
                                          std::string_view call) {
  FERRY_SIM_CHECK_HANDLE_(ctxs_, "context", ctxs_[idx].host);
  if (!ctxs_[idx].alive) {
    return Violate(ViolationKind::kDestroyedHandle,
                   absl::StrCat(AV(call), ": context ", h.id, " was closed"));
  }
  return idx;
}

absl::StatusOr<uint32_t> Fabric::CheckPd(uint32_t host, hal::PdHandle h, std::string_view call) {
  FERRY_SIM_CHECK_HANDLE_(pds_, "pd", ctxs_[pds_[idx].ctx].host);
  if (!pds_[idx].alive) {
    return Violate(ViolationKind::kDestroyedHandle,
                   absl::StrCat(AV(call), ": pd ", h.id, " was freed"));
  }
  return idx;
}

absl::StatusOr<uint32_t> Fabric::CheckMr(uint32_t host, hal::MrHandle h, std::string_view call) {
  FERRY_SIM_CHECK_HANDLE_(mrs_, "mr", ctxs_[mrs_[idx].ctx].host);
  if (!mrs_[idx].alive) {
    return Violate(ViolationKind::kDestroyedHandle,
                   absl::StrCat(AV(call), ": mr ", h.id, " was deregistered"));
  }
  return idx;
}

absl::StatusOr<uint32_t> Fabric::CheckMw(uint32_t host, hal::MwHandle h, std::string_view call) {
  FERRY_SIM_CHECK_HANDLE_(mws_, "mw", ctxs_[mws_[idx].ctx].host);
  if (!mws_[idx].alive) {
    return Violate(ViolationKind::kDestroyedHandle,
                   absl::StrCat(AV(call), ": mw ", h.id, " was deallocated"));
  }
  return idx;
}

absl::StatusOr<uint32_t> Fabric::CheckChannel(uint32_t host, hal::CompChannelHandle h,
                                              std::string_view call) {
  FERRY_SIM_CHECK_HANDLE_(channels_, "comp channel", ctxs_[channels_[idx].ctx].host);
  if (!channels_[idx].alive) {
    return Violate(ViolationKind::kDestroyedHandle,
                   absl::StrCat(AV(call), ": comp channel ", h.id, " was destroyed"));
  }
  return idx;
}

absl::StatusOr<uint32_t> Fabric::CheckCq(uint32_t host, hal::CqHandle h, std::string_view call) {
  FERRY_SIM_CHECK_HANDLE_(cqs_, "cq", ctxs_[cqs_[idx].ctx].host);
  const Cq& cq = cqs_[idx];
  if (!cq.alive) {
    return Violate(ViolationKind::kDestroyedHandle,
                   absl::StrCat(AV(call), ": cq ", h.id, " was destroyed"));
  }
  if (cq.owner != 0 && cq.owner != current_actor_) {
    return Violate(ViolationKind::kWrongActor,
                   absl::StrCat(AV(call), ": cq ", h.id, " is owned by actor ", cq.owner,
                                ", called by actor ", current_actor_));
  }
  return idx;
}

absl::StatusOr<uint32_t> Fabric::CheckQp(uint32_t host, hal::QpHandle h, std::string_view call) {
  FERRY_SIM_CHECK_HANDLE_(qps_, "qp", qps_[idx]->host);
  Qp& q = *qps_[idx];
  if (!q.alive) {
    return Violate(ViolationKind::kDestroyedHandle,
                   absl::StrCat(AV(call), ": qp ", h.id, " (qpn ", q.qpn, ") was destroyed"));
  }
  if (q.owner != 0 && q.owner != current_actor_) {
    return Violate(ViolationKind::kWrongActor,
                   absl::StrCat(AV(call), ": qp ", h.id, " (qpn ", q.qpn, ") is owned by actor ",
                                q.owner, ", called by actor ", current_actor_));
  }
  q.last_caller = current_actor_;
  return idx;
}

#undef FERRY_SIM_CHECK_HANDLE_

// ------------------------------------------------------------------ devices

uint32_t Fabric::FindDevice(uint32_t host, std::string_view name) const {
  for (uint32_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i].host == host && devices_[i].name == name) return i;
  }
  return kNone;
}

uint32_t Fabric::FindQpByNumber(uint32_t dev, uint32_t qpn) const {
  auto it = devices_[dev].qpn_to_qp.find(qpn);
  return it == devices_[dev].qpn_to_qp.end() ? kNone : it->second;
}

uint32_t Fabric::PeerQpOf(const Qp& q) const {
  Qp::PeerQpCache& c = q.peer_qp_cache;
  if (c.epoch != qpn_epoch_ || c.dev != q.dst_dev || c.qpn != q.attr.dest_qp_num) {
    c = Qp::PeerQpCache{qpn_epoch_, q.dst_dev, q.attr.dest_qp_num,
                        FindQpByNumber(q.dst_dev, q.attr.dest_qp_num)};
  }
  return c.qi;
}

absl::StatusOr<std::vector<hal::DeviceInfo>> Fabric::VerbListDevices(uint32_t host) {
  NoteCall();
  std::vector<hal::DeviceInfo> out;
  for (const Device& d : devices_) {
    if (d.host == host) out.push_back(hal::DeviceInfo{d.name, d.guid});
  }
  return out;
}

bool Fabric::InjectFault(FaultKind k) {
  const Ratio r = config_.plan.Rate(k);
  if (r.num == 0) return false;
  if (!prng_.Chance(r)) return false;
  CountFault(k);
  return true;
}

void Fabric::StopSeededFaults() {
  config_.plan = FaultPlan{};
  config_.straggler = kNever;
  // The stall kinds end too; a hang or a hold already started runs its
  // course (its end is an event already queued).
  config_.stall.hung_recover = config_.stall.err_hold = config_.stall.dup_cqe = kNever;
  config_.recv.drop = config_.recv.rnr_storm = kNever;  // a storm under way ends on its time
  if (trace_ != nullptr) trace_->Event("rnic.stop_seeded_faults");
}

void Fabric::CountFault(FaultKind k) {
  ++stats_.faults[static_cast<size_t>(k)];
  if (trace_ != nullptr) trace_->Event("fault", static_cast<uint64_t>(k));
}

absl::StatusOr<hal::ContextHandle> Fabric::VerbOpenDevice(uint32_t host, std::string_view name) {
  NoteCall();
  const uint32_t dev = FindDevice(host, name);
  if (dev == kNone) return Errno("ibv_open_device", ENODEV);
  if (hosts_[host].script_resource_fail > 0) {
    --hosts_[host].script_resource_fail;
    CountFault(FaultKind::kResourceFail);
    return Errno("ibv_open_device", ENOMEM);
  }
  if (InjectFault(FaultKind::kResourceFail)) return Errno("ibv_open_device", ENOMEM);
  Context c;
  c.host = host;
  c.dev = dev;
  ctxs_.push_back(std::move(c));
  ++live_[K(ObjectKind::kContext)];
  ++created_[K(ObjectKind::kContext)];
  return hal::ContextHandle{ctxs_.size()};
}

absl::StatusOr<hal::DeviceAttr> Fabric::VerbQueryDevice(uint32_t host, hal::ContextHandle ctx) {
  FERRY_RETURN_IF_ERROR(CheckCtx(host, ctx, "ibv_query_device").status());
  return limits_;
}

absl::StatusOr<hal::PortAttr> Fabric::VerbQueryPort(uint32_t host, hal::ContextHandle ctx,
                                                    uint8_t port) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t ci, CheckCtx(host, ctx, "ibv_query_port"));
  if (port != 1) return Errno("ibv_query_port", EINVAL);
  const Device& d = devices_[ctxs_[ci].dev];
  hal::PortAttr p;
  p.state = d.port_up ? hal::PortState::kActive : hal::PortState::kDown;
  p.max_mtu = hal::Mtu::k4096;
  p.active_mtu = config_.active_mtu;
  p.lid = 0;
  p.link_layer_ethernet = 1;
  p.gid_tbl_len = kGidTableLen;
  return p;
}

std::optional<hal::GidEntry> Fabric::GidTableEntry(const Device& d, int index) {
  // rxe's order for one IPv6 link-local and one IPv4 address: each address
  // once as RoCE v1, once as RoCE v2; the rest of the table is empty.
  switch (index) {
    case 0:
      return hal::GidEntry{d.link_local_gid, hal::GidType::kRoceV1};
    case 1:
      return hal::GidEntry{d.link_local_gid, hal::GidType::kRoceV2};
    case 2:
      return hal::GidEntry{d.gid, hal::GidType::kRoceV1};
    case 3:
      return hal::GidEntry{d.gid, hal::GidType::kRoceV2};
    default:
      return std::nullopt;
  }
}

absl::StatusOr<hal::Gid> Fabric::VerbQueryGid(uint32_t host, hal::ContextHandle ctx, uint8_t port,
                                              int index) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t ci, CheckCtx(host, ctx, "ibv_query_gid"));
  if (port != 1 || index < 0 || index >= static_cast<int>(kGidTableLen)) {
    return Errno("ibv_query_gid", EINVAL);
  }
  const auto e = GidTableEntry(devices_[ctxs_[ci].dev], index);
  return e.has_value() ? e->gid : hal::Gid{};  // an empty slot reads as zeros
}

absl::StatusOr<hal::GidEntry> Fabric::VerbQueryGidEntry(uint32_t host, hal::ContextHandle ctx,
                                                        uint8_t port, int index) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t ci, CheckCtx(host, ctx, "ibv_query_gid_ex"));
  if (port != 1 || index < 0 || index >= static_cast<int>(kGidTableLen)) {
    return Errno("ibv_query_gid_ex", EINVAL);
  }
  const auto e = GidTableEntry(devices_[ctxs_[ci].dev], index);
  if (!e.has_value()) return absl::NotFoundError("ibv_query_gid_ex: GID entry is empty (ENODATA)");
  return *e;
}

absl::StatusOr<hal::PdHandle> Fabric::VerbAllocPd(uint32_t host, hal::ContextHandle ctx) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t ci, CheckCtx(host, ctx, "ibv_alloc_pd"));
  Device& d = devices_[ctxs_[ci].dev];
  if (ctxs_[ci].fatal) return Errno("ibv_alloc_pd", EIO);
  if (d.live_pd >= limits_.max_pd) return Errno("ibv_alloc_pd", ENOMEM);
  if (InjectFault(FaultKind::kResourceFail)) return Errno("ibv_alloc_pd", ENOMEM);
  pds_.push_back(Pd{true, ci, 0});
  ++d.live_pd;
  ++live_[K(ObjectKind::kPd)];
  ++created_[K(ObjectKind::kPd)];
  return hal::PdHandle{pds_.size()};
}

absl::Status Fabric::VerbDeallocPd(uint32_t host, hal::PdHandle pd) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t pi, CheckPd(host, pd, "ibv_dealloc_pd"));
  if (pds_[pi].live_children > 0) return Errno("ibv_dealloc_pd", EBUSY);
  pds_[pi].alive = false;
  --devices_[ctxs_[pds_[pi].ctx].dev].live_pd;
  --live_[K(ObjectKind::kPd)];
  return absl::OkStatus();
}

absl::StatusOr<hal::MrInfo> Fabric::VerbRegMr(uint32_t host, hal::PdHandle pd, void* addr,
                                              size_t len, uint32_t access) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t pi, CheckPd(host, pd, "ibv_reg_mr"));
  const uint32_t ci = pds_[pi].ctx;
  Device& d = devices_[ctxs_[ci].dev];
  if (addr == nullptr || len == 0 || len > limits_.max_mr_size) return Errno("ibv_reg_mr", EINVAL);
  // Remote write needs local write (ibv_reg_mr.3).
  if ((access & hal::kAccessRemoteWrite) != 0 && (access & hal::kAccessLocalWrite) == 0) {
    return Errno("ibv_reg_mr", EINVAL);
  }
  if (ctxs_[ci].fatal) return Errno("ibv_reg_mr", EIO);
  if (d.live_mr >= limits_.max_mr) return Errno("ibv_reg_mr", ENOMEM);
  if (InjectFault(FaultKind::kResourceFail)) return Errno("ibv_reg_mr", ENOMEM);
  if (mrs_.size() >= (1u << 23) - 1) return Errno("ibv_reg_mr", ENOMEM);  // key bit 31 is 0
  Mr mr;
  mr.ctx = ci;
  mr.pd = pi;
  mr.dev = ctxs_[ci].dev;
  mr.addr = static_cast<uint8_t*>(addr);
  mr.len = len;
  mr.access = access;
  mr.key = (static_cast<uint32_t>(mrs_.size() + 1) << 8) | static_cast<uint32_t>(prng_.Below(256));
  mrs_.push_back(mr);
  ++pds_[pi].live_children;
  ++d.live_mr;
  ++live_[K(ObjectKind::kMr)];
  ++created_[K(ObjectKind::kMr)];
  return hal::MrInfo{hal::MrHandle{mrs_.size()}, mr.key, mr.key};
}

absl::Status Fabric::VerbDeregMr(uint32_t host, hal::MrHandle mr) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t mi, CheckMr(host, mr, "ibv_dereg_mr"));
  Mr& m = mrs_[mi];
  // A bound memory window holds its MR (rxe_dereg_mr: "mr has mw's bound").
  if (m.bound_mws > 0) return Errno("ibv_dereg_mr", EINVAL);
  m.alive = false;
  --pds_[m.pd].live_children;
  --devices_[m.dev].live_mr;
  --live_[K(ObjectKind::kMr)];
  return absl::OkStatus();
}

absl::StatusOr<hal::CompChannelHandle> Fabric::VerbCreateCompChannel(uint32_t host,
                                                                     hal::ContextHandle ctx) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t ci, CheckCtx(host, ctx, "ibv_create_comp_channel"));
  if (InjectFault(FaultKind::kResourceFail)) return Errno("ibv_create_comp_channel", EMFILE);
  Channel ch;
  ch.ctx = ci;
  channels_.push_back(std::move(ch));
  ++live_[K(ObjectKind::kCompChannel)];
  ++created_[K(ObjectKind::kCompChannel)];
  return hal::CompChannelHandle{channels_.size()};
}

absl::Status Fabric::VerbDestroyCompChannel(uint32_t host, hal::CompChannelHandle ch) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t hi, CheckChannel(host, ch, "ibv_destroy_comp_channel"));
  if (channels_[hi].live_cqs > 0) return Errno("ibv_destroy_comp_channel", EBUSY);
  channels_[hi].alive = false;
  channels_[hi].events.clear();
  --live_[K(ObjectKind::kCompChannel)];
  return absl::OkStatus();
}

absl::StatusOr<hal::CqHandle> Fabric::VerbGetCqEvent(uint32_t host, hal::CompChannelHandle ch) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t hi, CheckChannel(host, ch, "ibv_get_cq_event"));
  Channel& c = channels_[hi];
  if (c.events.empty()) return absl::UnavailableError("ibv_get_cq_event: no event ready");
  const uint32_t cqi = c.events.front();
  c.events.pop_front();
  ++cqs_[cqi].events_unacked;
  return hal::CqHandle{cqi + uint64_t{1}};
}

void Fabric::VerbAckCqEvents(uint32_t host, hal::CqHandle cq, uint32_t n) {
  auto ci = CheckCq(host, cq, "ibv_ack_cq_events");
  if (!ci.ok()) return;
  Cq& c = cqs_[*ci];
  if (n > c.events_unacked) {
    Violate(ViolationKind::kBadAck, absl::StrCat("ibv_ack_cq_events: ack of ", n, " events, only ",
                                                 c.events_unacked, " unacked"))
        .IgnoreError();
    c.events_unacked = 0;
    return;
  }
  c.events_unacked -= n;
}

absl::StatusOr<hal::CqInfo> Fabric::VerbCreateCq(uint32_t host, hal::ContextHandle ctx,
                                                 uint32_t cqe, hal::CompChannelHandle ch) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t ci, CheckCtx(host, ctx, "ibv_create_cq"));
  uint32_t chi = kNone;
  if (ch.valid()) {
    FERRY_ASSIGN_OR_RETURN(chi, CheckChannel(host, ch, "ibv_create_cq"));
    if (channels_[chi].ctx != ci) {
      return Violate(ViolationKind::kForeignHandle,
                     "ibv_create_cq: comp channel belongs to another context");
    }
  }
  Device& d = devices_[ctxs_[ci].dev];
  if (cqe == 0 || cqe > limits_.max_cqe) return Errno("ibv_create_cq", EINVAL);
  if (ctxs_[ci].fatal) return Errno("ibv_create_cq", EIO);
  if (d.live_cq >= limits_.max_cq) return Errno("ibv_create_cq", ENOMEM);
  if (d.script_cq_create_fail > 0) {
    --d.script_cq_create_fail;
    CountFault(FaultKind::kResourceFail);
    return Errno("ibv_create_cq", ENOMEM);
  }
  if (InjectFault(FaultKind::kResourceFail)) return Errno("ibv_create_cq", ENOMEM);
  uint32_t capacity = cqe;
  if (config_.profile == RnicProfile::kMlx5) {
    capacity = std::min<uint32_t>(std::bit_ceil(cqe + 1) - 1, limits_.max_cqe);
  }
  Cq c;
  c.ctx = ci;
  c.dev = ctxs_[ci].dev;
  c.channel = chi;
  c.ordinal = ++d.cq_ordinal;
  c.capacity = capacity;
  c.ring.resize(capacity);
  cqs_.push_back(std::move(c));
  if (chi != kNone) ++channels_[chi].live_cqs;
  ++d.live_cq;
  ++live_[K(ObjectKind::kCq)];
  ++created_[K(ObjectKind::kCq)];
  return hal::CqInfo{hal::CqHandle{cqs_.size()}, capacity};
}

void Fabric::DestroyCqNow(uint32_t ci) {
  Cq& c = cqs_[ci];
  FERRY_CHECK(c.alive);
  FERRY_CHECK(c.qps.empty());
  c.alive = false;
  c.count = 0;
  std::vector<Cqe>().swap(c.ring);
  if (c.channel != kNone) {
    Channel& ch = channels_[c.channel];
    --ch.live_cqs;
    std::erase(ch.events, ci);
  }
  std::erase_if(ctxs_[c.ctx].async_queue, [ci](const AsyncRec& r) { return r.cq == ci; });
  --devices_[c.dev].live_cq;
  --live_[K(ObjectKind::kCq)];
}

absl::Status Fabric::VerbDestroyCq(uint32_t host, hal::CqHandle cq) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t ci, CheckCq(host, cq, "ibv_destroy_cq"));
  Cq& c = cqs_[ci];
  if (!c.qps.empty()) return Errno("ibv_destroy_cq", EBUSY);
  if (c.events_unacked > 0) {
    return Violate(ViolationKind::kUnackedEventsAtDestroy,
                   absl::StrCat("ibv_destroy_cq: cq ", cq.id, " has ", c.events_unacked,
                                " unacknowledged events (real verbs would block forever)"));
  }
  DestroyCqNow(ci);
  return absl::OkStatus();
}

absl::Status Fabric::VerbReqNotifyCq(uint32_t host, hal::CqHandle cq, bool solicited_only) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t ci, CheckCq(host, cq, "ibv_req_notify_cq"));
  Cq& c = cqs_[ci];
  if (c.channel == kNone) return Errno("ibv_req_notify_cq", EINVAL);
  c.armed = true;
  c.solicited_only = solicited_only;
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> Fabric::VerbPollCq(uint32_t host, hal::CqHandle cq,
                                            absl::Span<hal::WorkCompletion> out) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t ci, CheckCq(host, cq, "ibv_poll_cq"));
  Cq& c = cqs_[ci];
  if (c.errored) return Errno("ibv_poll_cq", EOVERFLOW);
  const uint32_t n = std::min<uint32_t>(c.count, static_cast<uint32_t>(out.size()));
  for (uint32_t i = 0; i < n; ++i) {
    const Cqe& e = c.ring[c.head];
    out[i] = e.wc;
    if (e.dup) {
      FERRY_CHECK_GT(c.dups, 0u);
      --c.dups;
    }
    if (e.qp != kNone) {
      Qp& q = *qps_[e.qp];
      uint64_t& free_seq = e.recv ? q.rq_free_seq : q.free_seq;
      if (q.alive && e.wr_seq + 1 > free_seq) free_seq = e.wr_seq + 1;
    }
    c.head = c.head + 1 == c.capacity ? 0 : c.head + 1;
  }
  c.count -= n;
  stats_.cqes_polled += n;
  return n;
}

// ------------------------------------------------------------------ contexts

void Fabric::CloseCtxNow(uint32_t ci) {
  Context& c = ctxs_[ci];
  FERRY_CHECK(c.alive);
  // As process exit: windows, QPs, CQs, MRs, channels, PDs, in dependency
  // order.
  for (uint32_t wi = 0; wi < mws_.size(); ++wi) {
    if (mws_[wi].alive && mws_[wi].ctx == ci) FreeMwNow(wi);
  }
  for (uint32_t qi = 0; qi < qps_.size(); ++qi) {
    if (qps_[qi]->alive && qps_[qi]->ctx == ci) DestroyQpNow(qi, true);
  }
  for (uint32_t i = 0; i < cqs_.size(); ++i) {
    if (cqs_[i].alive && cqs_[i].ctx == ci) DestroyCqNow(i);
  }
  for (Mr& m : mrs_) {
    if (m.alive && m.ctx == ci) {
      m.alive = false;
      --pds_[m.pd].live_children;
      --devices_[m.dev].live_mr;
      --live_[K(ObjectKind::kMr)];
    }
  }
  for (Channel& ch : channels_) {
    if (ch.alive && ch.ctx == ci) {
      ch.alive = false;
      ch.events.clear();
      --live_[K(ObjectKind::kCompChannel)];
    }
  }
  for (Pd& p : pds_) {
    if (p.alive && p.ctx == ci) {
      FERRY_CHECK_EQ(p.live_children, 0u);
      p.alive = false;
      --devices_[c.dev].live_pd;
      --live_[K(ObjectKind::kPd)];
    }
  }
  c.async_queue.clear();
  c.alive = false;
  --live_[K(ObjectKind::kContext)];
}

absl::Status Fabric::VerbCloseDevice(uint32_t host, hal::ContextHandle ctx) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t ci, CheckCtx(host, ctx, "ibv_close_device"));
  CloseCtxNow(ci);
  return absl::OkStatus();
}

void Fabric::RestartHost(uint32_t host) {
  FERRY_CHECK_LT(host, hosts_.size());
  for (uint32_t ci = 0; ci < ctxs_.size(); ++ci) {
    if (ctxs_[ci].alive && ctxs_[ci].host == host) CloseCtxNow(ci);
  }
  ++hosts_[host].incarnation;
  CountFault(FaultKind::kPeerRestart);
}

uint32_t Fabric::IncarnationOf(uint32_t host) const {
  FERRY_CHECK_LT(host, hosts_.size());
  return hosts_[host].incarnation;
}

// ------------------------------------------------------------------ async events

void Fabric::RaiseAsync(uint32_t ci, AsyncEventType type, uint32_t qi, uint32_t cqi, uint8_t port) {
  Context& c = ctxs_[ci];
  if (!c.alive) return;
  FERRY_CHECK_LT(c.async_queue.size(), 1u << 20);
  AsyncRec r;
  r.ev.type = type;
  r.ev.context = hal::ContextHandle{ci + uint64_t{1}};
  if (qi != kNone) r.ev.qp = hal::QpHandle{qi + uint64_t{1}};
  if (cqi != kNone) r.ev.cq = hal::CqHandle{cqi + uint64_t{1}};
  r.ev.port_num = port;
  r.ev.raw_type = static_cast<int>(type);
  r.qp = qi;
  r.cq = cqi;
  c.async_queue.push_back(r);
}

void Fabric::RaiseDeviceAsync(uint32_t dev, AsyncEventType type) {
  for (uint32_t ci = 0; ci < ctxs_.size(); ++ci) {
    if (ctxs_[ci].alive && ctxs_[ci].dev == dev) RaiseAsync(ci, type, kNone, kNone, 1);
  }
}

absl::StatusOr<hal::AsyncEvent> Fabric::VerbGetAsyncEvent(uint32_t host, hal::ContextHandle ctx) {
  FERRY_ASSIGN_OR_RETURN(const uint32_t ci, CheckCtx(host, ctx, "ibv_get_async_event"));
  Context& c = ctxs_[ci];
  if (c.async_queue.empty()) return absl::UnavailableError("ibv_get_async_event: none pending");
  AsyncRec r = c.async_queue.front();
  c.async_queue.pop_front();
  if (r.qp != kNone) {
    ++qps_[r.qp]->events_unacked;
  } else if (r.cq != kNone) {
    ++cqs_[r.cq].events_unacked;
  } else {
    ++c.async_unacked;
  }
  return r.ev;
}

void Fabric::VerbAckAsyncEvent(uint32_t host, const hal::AsyncEvent& ev) {
  NoteCall();
  uint32_t* counter = nullptr;
  if (ev.qp.valid()) {
    if (ev.qp.id <= qps_.size() && qps_[ev.qp.id - 1]->host == host) {
      counter = &qps_[ev.qp.id - 1]->events_unacked;
    }
  } else if (ev.cq.valid()) {
    if (ev.cq.id <= cqs_.size() && ctxs_[cqs_[ev.cq.id - 1].ctx].host == host) {
      counter = &cqs_[ev.cq.id - 1].events_unacked;
    }
  } else if (ev.context.valid() && ev.context.id <= ctxs_.size() &&
             ctxs_[ev.context.id - 1].host == host) {
    counter = &ctxs_[ev.context.id - 1].async_unacked;
  }
  if (counter == nullptr) {
    Violate(ViolationKind::kForeignHandle, "ibv_ack_async_event: event of another host or fabric")
        .IgnoreError();
    return;
  }
  if (*counter == 0) {
    Violate(ViolationKind::kBadAck,
            "ibv_ack_async_event: event was not handed out or already acked")
        .IgnoreError();
    return;
  }
  --*counter;
}

// ------------------------------------------------------------------ truth

std::string Fabric::UnconsumedWrOn(const void* addr, uint64_t len, const WrFilter& filter) const {
  const uint64_t lo = reinterpret_cast<uint64_t>(addr), hi = lo + len;
  for (const auto& qp : qps_) {
    const Qp& q = *qp;
    if (!q.alive || q.attr.qp_state == QpState::kReset || q.sq.empty()) continue;
    if ((filter.host && q.host != *filter.host) || (filter.qpn && q.qpn != *filter.qpn)) continue;
    for (uint64_t seq = q.free_seq; seq < q.post_seq; ++seq) {
      const Wr& w = q.sq[seq % q.sq.size()];
      if (w.post_index < filter.posted_from) continue;
      for (uint32_t k = 0; k < w.num_sge && k < hal::kMaxSgeInline; ++k) {
        const hal::Sge& g = SgeOf(q, w, k);
        if (g.addr < hi && lo < g.addr + g.length)
          return absl::StrCat("h", q.host, "/", devices_[q.dev].name, " qpn=", q.qpn,
                              " state=", AV(hal::QpStateName(q.attr.qp_state)), " wr seq=", seq,
                              q.hung ? " (hung)" : "");
      }
    }
  }
  return "";
}

bool Fabric::WriteMayLand(uint32_t host, uint64_t addr, uint64_t len) const {
  const uint64_t hi = addr + len;
  for (const auto& qp : qps_) {
    const Qp& q = *qp;
    if (!q.alive || q.sq.empty() || q.dst_dev == kNone || devices_[q.dst_dev].host != host)
      continue;
    const uint64_t lo_seq = q.post_seq > q.sq.size() ? q.post_seq - q.sq.size() : 0;
    for (uint64_t seq = lo_seq; seq < q.post_seq; ++seq) {
      const Wr& w = q.sq[seq % q.sq.size()];
      if (w.seq != seq || !WritesRemote(w.opcode)) continue;
      if (!(w.remote_addr < hi && addr < w.remote_addr + w.len)) continue;
      if (seq >= q.done_seq || w.has_sent_payload) return true;
    }
  }
  return false;
}

absl::StatusOr<CqTruth> Fabric::TruthOf(hal::CqHandle cq) const {
  if (cq.id == 0 || cq.id > cqs_.size() || !cqs_[cq.id - 1].alive) {
    return absl::NotFoundError("TruthOf: no live CQ");
  }
  const Cq& c = cqs_[cq.id - 1];
  CqTruth t;
  t.present = c.count - c.dups;  // a dup_cqe copy is the device's, not a WR's
  t.capacity = c.capacity;
  t.errored = c.errored;
  t.producible = ProducibleOf(static_cast<uint32_t>(cq.id - 1));
  return t;
}

uint64_t Fabric::ProducibleOf(uint32_t ci) const {
  uint64_t n = 0;
  for (uint32_t qi : cqs_[ci].qps) {
    const Qp& q = *qps_[qi];
    if (q.send_cq == ci) n += (q.post_seq - q.done_seq) + (q.pending.size() - q.pending_recv);
    if (q.recv_cq == ci) n += (q.rq_post_seq - q.rq_done_seq) + q.pending_recv;
  }
  return n;
}

std::vector<std::string> Fabric::LiveObjects() const {
  std::vector<std::string> out;
  auto where = [&](uint32_t ci) {
    const Device& d = devices_[ctxs_[ci].dev];
    return absl::StrCat("h", d.host, "/", d.name);
  };
  for (size_t i = 0; i < ctxs_.size(); ++i) {
    if (ctxs_[i].alive) out.push_back(absl::StrCat("context ", i + 1, " ", where(i)));
  }
  for (size_t i = 0; i < pds_.size(); ++i) {
    if (pds_[i].alive) out.push_back(absl::StrCat("pd ", i + 1, " ", where(pds_[i].ctx)));
  }
  for (size_t i = 0; i < mrs_.size(); ++i) {
    if (mrs_[i].alive) {
      out.push_back(absl::StrCat("mr ", i + 1, " ", where(mrs_[i].ctx), " len=", mrs_[i].len));
    }
  }
  for (size_t i = 0; i < mws_.size(); ++i) {
    if (mws_[i].alive) {
      out.push_back(
          absl::StrCat("mw ", i + 1, " ", where(mws_[i].ctx), mws_[i].bound ? " bound" : " free"));
    }
  }
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (channels_[i].alive) {
      out.push_back(absl::StrCat("comp_channel ", i + 1, " ", where(channels_[i].ctx)));
    }
  }
  for (size_t i = 0; i < cqs_.size(); ++i) {
    if (cqs_[i].alive) {
      out.push_back(
          absl::StrCat("cq ", i + 1, " ", where(cqs_[i].ctx), " present=", cqs_[i].count));
    }
  }
  for (size_t i = 0; i < qps_.size(); ++i) {
    const Qp& q = *qps_[i];
    if (q.alive) {
      out.push_back(absl::StrCat("qp ", i + 1, " ", where(q.ctx), " qpn=", q.qpn,
                                 " state=", AV(hal::QpStateName(q.attr.qp_state)),
                                 " outstanding=", q.post_seq - q.done_seq, " cq=", q.send_cq + 1,
                                 " rd_atomic=", q.attr.max_rd_atomic, "/",
                                 q.attr.max_dest_rd_atomic));
    }
  }
  return out;
}

absl::StatusOr<hal::QpState> Fabric::TrueStateOf(hal::QpHandle qp) const {
  if (qp.id == 0 || qp.id > qps_.size() || !qps_[qp.id - 1]->alive) {
    return absl::NotFoundError("TrueStateOf: no live QP");
  }
  return qps_[qp.id - 1]->attr.qp_state;
}

absl::StatusOr<uint32_t> Fabric::UnackedEventsOf(hal::QpHandle qp) const {
  if (qp.id == 0 || qp.id > qps_.size() || !qps_[qp.id - 1]->alive) {
    return absl::NotFoundError("UnackedEventsOf: no live QP");
  }
  return qps_[qp.id - 1]->events_unacked;
}

absl::StatusOr<uint64_t> Fabric::OutstandingOf(hal::QpHandle qp) const {
  if (qp.id == 0 || qp.id > qps_.size() || !qps_[qp.id - 1]->alive) {
    return absl::NotFoundError("OutstandingOf: no live QP");
  }
  const Qp& q = *qps_[qp.id - 1];
  return q.post_seq - q.done_seq;
}

absl::StatusOr<uint64_t> Fabric::RetransmitsOf(hal::QpHandle qp) const {
  if (qp.id == 0 || qp.id > qps_.size()) return absl::NotFoundError("RetransmitsOf: no QP");
  return qps_[qp.id - 1]->retransmits;
}

}  // namespace ferry::sim
