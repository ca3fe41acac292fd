// hal/ibverbs/convert.cc: the translations of convert.h, and the
// static_asserts that pin Ferry's mirrored values to libibverbs'.
#include "hal/ibverbs/convert.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/check.h"

namespace ferry::hal::ibverbs {
namespace {

template <typename E>
constexpr int V(E e) {
  return static_cast<int>(e);
}

// WcStatus: same order and values as enum ibv_wc_status.
static_assert(V(WcStatus::kSuccess) == IBV_WC_SUCCESS);
static_assert(V(WcStatus::kLocLenErr) == IBV_WC_LOC_LEN_ERR);
static_assert(V(WcStatus::kLocQpOpErr) == IBV_WC_LOC_QP_OP_ERR);
static_assert(V(WcStatus::kLocEecOpErr) == IBV_WC_LOC_EEC_OP_ERR);
static_assert(V(WcStatus::kLocProtErr) == IBV_WC_LOC_PROT_ERR);
static_assert(V(WcStatus::kWrFlushErr) == IBV_WC_WR_FLUSH_ERR);
static_assert(V(WcStatus::kMwBindErr) == IBV_WC_MW_BIND_ERR);
static_assert(V(WcStatus::kBadRespErr) == IBV_WC_BAD_RESP_ERR);
static_assert(V(WcStatus::kLocAccessErr) == IBV_WC_LOC_ACCESS_ERR);
static_assert(V(WcStatus::kRemInvReqErr) == IBV_WC_REM_INV_REQ_ERR);
static_assert(V(WcStatus::kRemAccessErr) == IBV_WC_REM_ACCESS_ERR);
static_assert(V(WcStatus::kRemOpErr) == IBV_WC_REM_OP_ERR);
static_assert(V(WcStatus::kRetryExcErr) == IBV_WC_RETRY_EXC_ERR);
static_assert(V(WcStatus::kRnrRetryExcErr) == IBV_WC_RNR_RETRY_EXC_ERR);
static_assert(V(WcStatus::kLocRddViolErr) == IBV_WC_LOC_RDD_VIOL_ERR);
static_assert(V(WcStatus::kRemInvRdReqErr) == IBV_WC_REM_INV_RD_REQ_ERR);
static_assert(V(WcStatus::kRemAbortErr) == IBV_WC_REM_ABORT_ERR);
static_assert(V(WcStatus::kInvEecnErr) == IBV_WC_INV_EECN_ERR);
static_assert(V(WcStatus::kInvEecStateErr) == IBV_WC_INV_EEC_STATE_ERR);
static_assert(V(WcStatus::kFatalErr) == IBV_WC_FATAL_ERR);
static_assert(V(WcStatus::kRespTimeoutErr) == IBV_WC_RESP_TIMEOUT_ERR);
static_assert(V(WcStatus::kGeneralErr) == IBV_WC_GENERAL_ERR);

// QP states.
static_assert(V(QpState::kReset) == IBV_QPS_RESET);
static_assert(V(QpState::kInit) == IBV_QPS_INIT);
static_assert(V(QpState::kRtr) == IBV_QPS_RTR);
static_assert(V(QpState::kRts) == IBV_QPS_RTS);
static_assert(V(QpState::kSqd) == IBV_QPS_SQD);
static_assert(V(QpState::kSqe) == IBV_QPS_SQE);
static_assert(V(QpState::kErr) == IBV_QPS_ERR);

// MTU and port state.
static_assert(V(Mtu::k256) == IBV_MTU_256);
static_assert(V(Mtu::k512) == IBV_MTU_512);
static_assert(V(Mtu::k1024) == IBV_MTU_1024);
static_assert(V(Mtu::k2048) == IBV_MTU_2048);
static_assert(V(Mtu::k4096) == IBV_MTU_4096);
static_assert(V(PortState::kNop) == IBV_PORT_NOP);
static_assert(V(PortState::kDown) == IBV_PORT_DOWN);
static_assert(V(PortState::kInit) == IBV_PORT_INIT);
static_assert(V(PortState::kArmed) == IBV_PORT_ARMED);
static_assert(V(PortState::kActive) == IBV_PORT_ACTIVE);
static_assert(V(PortState::kActiveDefer) == IBV_PORT_ACTIVE_DEFER);

// Access flags, send flags, QP attribute mask bits.
static_assert(V(kAccessLocalWrite) == V(IBV_ACCESS_LOCAL_WRITE));
static_assert(V(kAccessRemoteWrite) == V(IBV_ACCESS_REMOTE_WRITE));
static_assert(V(kAccessRemoteRead) == V(IBV_ACCESS_REMOTE_READ));
static_assert(V(kAccessRemoteAtomic) == V(IBV_ACCESS_REMOTE_ATOMIC));
static_assert(V(kAccessMwBind) == V(IBV_ACCESS_MW_BIND));
static_assert(V(MwType::kType1) == IBV_MW_TYPE_1);
static_assert(V(MwType::kType2) == IBV_MW_TYPE_2);
static_assert(V(kSendFence) == V(IBV_SEND_FENCE));
static_assert(V(kSendSignaled) == V(IBV_SEND_SIGNALED));
static_assert(V(kSendSolicited) == V(IBV_SEND_SOLICITED));
static_assert(V(kSendInline) == V(IBV_SEND_INLINE));
static_assert(V(kQpState) == V(IBV_QP_STATE));
static_assert(V(kQpCurState) == V(IBV_QP_CUR_STATE));
static_assert(V(kQpEnSqdAsyncNotify) == V(IBV_QP_EN_SQD_ASYNC_NOTIFY));
static_assert(V(kQpAccessFlags) == V(IBV_QP_ACCESS_FLAGS));
static_assert(V(kQpPkeyIndex) == V(IBV_QP_PKEY_INDEX));
static_assert(V(kQpPort) == V(IBV_QP_PORT));
static_assert(V(kQpQkey) == V(IBV_QP_QKEY));
static_assert(V(kQpAv) == V(IBV_QP_AV));
static_assert(V(kQpPathMtu) == V(IBV_QP_PATH_MTU));
static_assert(V(kQpTimeout) == V(IBV_QP_TIMEOUT));
static_assert(V(kQpRetryCnt) == V(IBV_QP_RETRY_CNT));
static_assert(V(kQpRnrRetry) == V(IBV_QP_RNR_RETRY));
static_assert(V(kQpRqPsn) == V(IBV_QP_RQ_PSN));
static_assert(V(kQpMaxQpRdAtomic) == V(IBV_QP_MAX_QP_RD_ATOMIC));
static_assert(V(kQpAltPath) == V(IBV_QP_ALT_PATH));
static_assert(V(kQpMinRnrTimer) == V(IBV_QP_MIN_RNR_TIMER));
static_assert(V(kQpSqPsn) == V(IBV_QP_SQ_PSN));
static_assert(V(kQpMaxDestRdAtomic) == V(IBV_QP_MAX_DEST_RD_ATOMIC));
static_assert(V(kQpPathMigState) == V(IBV_QP_PATH_MIG_STATE));
static_assert(V(kQpCap) == V(IBV_QP_CAP));
static_assert(V(kQpDestQpn) == V(IBV_QP_DEST_QPN));
static_assert(kAllQpAttrMask == 0x1fffff);

static_assert(sizeof(Gid::raw) == sizeof(ibv_gid::raw));

uint32_t NonNeg(int v) { return v < 0 ? 0u : static_cast<uint32_t>(v); }

// The id and scatter/gather list of a send or receive WR (num_sge already
// checked against kMaxSgeInline); wr->next is left null.
template <typename IbvWr>
void FillSges(uint64_t wr_id, const std::array<Sge, kMaxSgeInline>& in, uint32_t num_sge, IbvWr* wr,
              ibv_sge* sges) {
  for (uint32_t i = 0; i < num_sge; ++i) {
    sges[i].addr = in[i].addr;
    sges[i].length = in[i].length;
    sges[i].lkey = in[i].lkey;
  }
  wr->wr_id = wr_id;
  wr->next = nullptr;
  wr->sg_list = num_sge > 0 ? sges : nullptr;
  wr->num_sge = static_cast<int>(num_sge);
}

}  // namespace

WcStatus ToWcStatus(int ibv_status) {
  if (ibv_status < 0 || ibv_status > IBV_WC_GENERAL_ERR) return WcStatus::kGeneralErr;
  return static_cast<WcStatus>(ibv_status);
}

Opcode ToOpcode(int ibv_wc_opcode) {
  switch (ibv_wc_opcode) {
    case IBV_WC_RDMA_WRITE:
      return Opcode::kRdmaWrite;
    case IBV_WC_RDMA_READ:
      return Opcode::kRdmaRead;
    case IBV_WC_RECV_RDMA_WITH_IMM:
      return Opcode::kRecvRdmaWithImm;
    case IBV_WC_RECV:
      return Opcode::kRecv;
    case IBV_WC_BIND_MW:
      return Opcode::kBindMw;
    case IBV_WC_LOCAL_INV:
      return Opcode::kLocalInv;
    case IBV_WC_SEND:
    default:
      // Ferry posts only READ, WRITE, WRITE_WITH_IMM, SEND, BIND_MW and
      // LOCAL_INV on RC send queues and plain receives; anything else is
      // reported as SEND.
      return Opcode::kSend;
  }
}

WorkCompletion ToWorkCompletion(const ibv_wc& wc) {
  WorkCompletion out;
  out.wr_id = wc.wr_id;
  out.status = ToWcStatus(wc.status);
  out.opcode = ToOpcode(wc.opcode);
  out.vendor_err = wc.vendor_err;
  out.byte_len = wc.byte_len;
  out.qp_num = wc.qp_num;
  out.src_qp = wc.src_qp;
  if ((wc.wc_flags & IBV_WC_WITH_IMM) != 0) {
    out.wc_flags |= kWcWithImm;
    out.imm_data = ntohl(wc.imm_data);  // the wire carries it big-endian
  }
  return out;
}

absl::StatusOr<QpState> ToQpState(int ibv_state) {
  if (ibv_state < IBV_QPS_RESET || ibv_state > IBV_QPS_ERR) {
    return absl::InternalError(absl::StrFormat("ibv_query_qp: unknown QP state %d", ibv_state));
  }
  return static_cast<QpState>(ibv_state);
}

ibv_qp_state ToIbvQpState(QpState s) { return static_cast<ibv_qp_state>(V(s)); }

Mtu ToMtu(int ibv_mtu_value) {
  return static_cast<Mtu>(std::clamp(ibv_mtu_value, V(Mtu::k256), V(Mtu::k4096)));
}

PortState ToPortState(int ibv_port_state) {
  if (ibv_port_state < IBV_PORT_NOP || ibv_port_state > IBV_PORT_ACTIVE_DEFER) {
    return PortState::kNop;
  }
  return static_cast<PortState>(ibv_port_state);
}

AsyncEventType ToAsyncEventType(int ibv_event) {
  switch (ibv_event) {
    case IBV_EVENT_QP_FATAL:
      return AsyncEventType::kQpFatal;
    case IBV_EVENT_QP_REQ_ERR:
      return AsyncEventType::kQpReqErr;
    case IBV_EVENT_QP_ACCESS_ERR:
      return AsyncEventType::kQpAccessErr;
    case IBV_EVENT_COMM_EST:
      return AsyncEventType::kCommEst;
    case IBV_EVENT_SQ_DRAINED:
      return AsyncEventType::kSqDrained;
    case IBV_EVENT_CQ_ERR:
      return AsyncEventType::kCqErr;
    case IBV_EVENT_PORT_ERR:
      return AsyncEventType::kPortErr;
    case IBV_EVENT_PORT_ACTIVE:
      return AsyncEventType::kPortActive;
    case IBV_EVENT_GID_CHANGE:
      return AsyncEventType::kGidChange;
    case IBV_EVENT_DEVICE_FATAL:
      return AsyncEventType::kDeviceFatal;
    default:
      return AsyncEventType::kOther;
  }
}

EventElement ElementOf(int ibv_event) {
  switch (ibv_event) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return EventElement::kQp;
    case IBV_EVENT_CQ_ERR:
      return EventElement::kCq;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      return EventElement::kSrq;
    case IBV_EVENT_WQ_FATAL:
      return EventElement::kWq;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
      return EventElement::kPort;
    default:  // IBV_EVENT_DEVICE_FATAL and unknown events
      return EventElement::kNone;
  }
}

absl::Status CheckAccessFlags(uint32_t access) {
  if ((access & ~kAllAccessFlags) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown access flag bits 0x%x", access & ~kAllAccessFlags));
  }
  return absl::OkStatus();
}

absl::Status CheckQpAttrMask(uint32_t mask) {
  if ((mask & ~kAllQpAttrMask) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown QP attribute mask bits 0x%x", mask & ~kAllQpAttrMask));
  }
  return absl::OkStatus();
}

DeviceAttr ToDeviceAttr(const ibv_device_attr& a) {
  DeviceAttr out;
  out.max_qp = NonNeg(a.max_qp);
  out.max_qp_wr = NonNeg(a.max_qp_wr);
  out.max_sge = NonNeg(a.max_sge);
  out.max_cq = NonNeg(a.max_cq);
  out.max_cqe = NonNeg(a.max_cqe);
  out.max_mr = NonNeg(a.max_mr);
  out.max_pd = NonNeg(a.max_pd);
  out.max_mr_size = a.max_mr_size;
  out.max_qp_rd_atom = NonNeg(a.max_qp_rd_atom);
  out.max_qp_init_rd_atom = NonNeg(a.max_qp_init_rd_atom);
  out.phys_port_cnt = a.phys_port_cnt;
  out.max_mw = NonNeg(a.max_mw);
  out.mw_type2 =
      (a.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
  return out;
}

PortAttr ToPortAttr(const ibv_port_attr& a) {
  PortAttr out;
  out.state = ToPortState(a.state);
  out.max_mtu = ToMtu(a.max_mtu);
  out.active_mtu = ToMtu(a.active_mtu);
  out.lid = a.lid;
  out.link_layer_ethernet = a.link_layer == IBV_LINK_LAYER_ETHERNET ? 1 : 0;
  out.gid_tbl_len = NonNeg(a.gid_tbl_len);
  return out;
}

Gid ToGid(const ibv_gid& g) {
  Gid out;
  std::memcpy(out.raw.data(), g.raw, sizeof(g.raw));
  return out;
}

absl::StatusOr<GidType> ToGidType(uint32_t ibv_gid_type) {
  switch (ibv_gid_type) {
    case IBV_GID_TYPE_IB:
      return GidType::kIb;
    case IBV_GID_TYPE_ROCE_V1:
      return GidType::kRoceV1;
    case IBV_GID_TYPE_ROCE_V2:
      return GidType::kRoceV2;
    default:
      return absl::InvalidArgumentError(absl::StrFormat("unknown ibv_gid_type %u", ibv_gid_type));
  }
}

ibv_gid ToIbvGid(const Gid& g) {
  ibv_gid out;
  std::memcpy(out.raw, g.raw.data(), sizeof(out.raw));
  return out;
}

QpCap ToQpCap(const ibv_qp_cap& c) {
  QpCap out;
  out.max_send_wr = c.max_send_wr;
  out.max_recv_wr = c.max_recv_wr;
  out.max_send_sge = c.max_send_sge;
  out.max_recv_sge = c.max_recv_sge;
  out.max_inline_data = c.max_inline_data;
  return out;
}

ibv_qp_cap ToIbvQpCap(const QpCap& c) {
  ibv_qp_cap out{};
  out.max_send_wr = c.max_send_wr;
  out.max_recv_wr = c.max_recv_wr;
  out.max_send_sge = c.max_send_sge;
  out.max_recv_sge = c.max_recv_sge;
  out.max_inline_data = c.max_inline_data;
  return out;
}

ibv_mw_type ToIbvMwType(MwType t) { return static_cast<ibv_mw_type>(V(t)); }

ibv_qp_attr ToIbvQpAttr(const QpAttr& a) {
  ibv_qp_attr out{};
  out.qp_state = ToIbvQpState(a.qp_state);
  out.cur_qp_state = ToIbvQpState(a.cur_qp_state);
  out.path_mtu = static_cast<ibv_mtu>(V(a.path_mtu));
  out.qkey = a.qkey;
  out.rq_psn = a.rq_psn;
  out.sq_psn = a.sq_psn;
  out.dest_qp_num = a.dest_qp_num;
  out.qp_access_flags = static_cast<unsigned int>(a.qp_access_flags);
  out.cap = ToIbvQpCap(a.cap);
  out.ah_attr.grh.dgid = ToIbvGid(a.ah_attr.dgid);
  out.ah_attr.grh.sgid_index = a.ah_attr.sgid_index;
  out.ah_attr.grh.hop_limit = a.ah_attr.hop_limit;
  out.ah_attr.dlid = a.ah_attr.dlid;
  out.ah_attr.is_global = a.ah_attr.is_global ? 1 : 0;
  out.ah_attr.port_num = a.ah_attr.port_num;
  out.pkey_index = a.pkey_index;
  out.max_rd_atomic = a.max_rd_atomic;
  out.max_dest_rd_atomic = a.max_dest_rd_atomic;
  out.min_rnr_timer = a.min_rnr_timer;
  out.port_num = a.port_num;
  out.timeout = a.timeout;
  out.retry_cnt = a.retry_cnt;
  out.rnr_retry = a.rnr_retry;
  return out;
}

absl::StatusOr<QpAttr> ToQpAttr(const ibv_qp_attr& a) {
  QpAttr out;
  absl::StatusOr<QpState> state = ToQpState(a.qp_state);
  if (!state.ok()) return state.status();
  out.qp_state = *state;
  // cur_qp_state is an input-only field; report the state itself.
  out.cur_qp_state = *state;
  out.path_mtu = ToMtu(a.path_mtu);
  out.qkey = a.qkey;
  out.rq_psn = a.rq_psn;
  out.sq_psn = a.sq_psn;
  out.dest_qp_num = a.dest_qp_num;
  out.qp_access_flags = a.qp_access_flags;
  out.cap = ToQpCap(a.cap);
  out.ah_attr.dgid = ToGid(a.ah_attr.grh.dgid);
  out.ah_attr.sgid_index = a.ah_attr.grh.sgid_index;
  out.ah_attr.hop_limit = a.ah_attr.grh.hop_limit;
  out.ah_attr.dlid = a.ah_attr.dlid;
  out.ah_attr.is_global = a.ah_attr.is_global != 0;
  out.ah_attr.port_num = a.ah_attr.port_num;
  out.pkey_index = a.pkey_index;
  out.max_rd_atomic = a.max_rd_atomic;
  out.max_dest_rd_atomic = a.max_dest_rd_atomic;
  out.min_rnr_timer = a.min_rnr_timer;
  out.port_num = a.port_num;
  out.timeout = a.timeout;
  out.retry_cnt = a.retry_cnt;
  out.rnr_retry = a.rnr_retry;
  return out;
}

namespace {

bool IsLocalOp(Opcode op) { return op == Opcode::kBindMw || op == Opcode::kLocalInv; }

// The fields of a bind WR (ibv_send_wr.bind_mw), once mw and mr are resolved.
absl::Status FillBind(const SendWr& in, ibv_mw* mw, ibv_mr* mr, ibv_send_wr* wr) {
  if (mw == nullptr || mr == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("send WR %d: bind without its memory window and region", in.wr_id));
  }
  if (absl::Status s = CheckAccessFlags(in.bind.access); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("send WR %d: %s", in.wr_id, s.message()));
  }
  wr->opcode = IBV_WR_BIND_MW;
  wr->bind_mw.mw = mw;
  wr->bind_mw.rkey = in.bind.rkey;
  wr->bind_mw.bind_info.mr = mr;
  wr->bind_mw.bind_info.addr = in.bind.addr;
  wr->bind_mw.bind_info.length = in.bind.length;
  wr->bind_mw.bind_info.mw_access_flags = in.bind.access;
  return absl::OkStatus();
}

}  // namespace

absl::Status ToIbvSendWr(const SendWr& in, ibv_send_wr* wr, ibv_sge* sges, ibv_mw* mw, ibv_mr* mr) {
  FERRY_CHECK(wr != nullptr && sges != nullptr);
  if (in.num_sge > kMaxSgeInline) {
    return absl::InvalidArgumentError(
        absl::StrFormat("send WR %d: num_sge %d > %d", in.wr_id, in.num_sge, kMaxSgeInline));
  }
  if (IsLocalOp(in.opcode) && in.num_sge != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("send WR %d: a %s WR carries no SGE (num_sge %d)", in.wr_id,
                        OpcodeName(in.opcode), in.num_sge));
  }
  if ((in.send_flags & ~kAllSendFlags) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("send WR %d: unknown send flag bits 0x%x",
                                                      in.wr_id, in.send_flags & ~kAllSendFlags));
  }
  *wr = ibv_send_wr{};
  FillSges(in.wr_id, in.sg_list, in.num_sge, wr, sges);
  wr->send_flags = in.send_flags;
  switch (in.opcode) {
    case Opcode::kRdmaWrite:
      wr->opcode = IBV_WR_RDMA_WRITE;
      break;
    case Opcode::kRdmaRead:
      wr->opcode = IBV_WR_RDMA_READ;
      break;
    case Opcode::kSend:
      wr->opcode = IBV_WR_SEND;
      break;
    case Opcode::kRdmaWriteWithImm:
      wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      break;
    case Opcode::kBindMw:
      return FillBind(in, mw, mr, wr);
    case Opcode::kLocalInv:
      wr->opcode = IBV_WR_LOCAL_INV;
      wr->invalidate_rkey = in.invalidate_rkey;
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("send WR %d: unknown opcode %d", in.wr_id, V(in.opcode)));
  }
  if (in.opcode != Opcode::kSend) {
    wr->wr.rdma.remote_addr = in.remote_addr;
    wr->wr.rdma.rkey = in.rkey;
  }
  if (in.opcode == Opcode::kRdmaWriteWithImm) wr->imm_data = htonl(in.imm_data);
  return absl::OkStatus();
}

absl::Status ToIbvRecvWr(const RecvWr& in, ibv_recv_wr* wr, ibv_sge* sges) {
  FERRY_CHECK(wr != nullptr && sges != nullptr);
  if (in.num_sge > kMaxSgeInline) {
    return absl::InvalidArgumentError(
        absl::StrFormat("recv WR %d: num_sge %d > %d", in.wr_id, in.num_sge, kMaxSgeInline));
  }
  *wr = ibv_recv_wr{};
  FillSges(in.wr_id, in.sg_list, in.num_sge, wr, sges);
  return absl::OkStatus();
}

}  // namespace ferry::hal::ibverbs
