// hal/types.h: Ferry's own mirror of the verbs enums and structs.
//
// Owns: handles, WC status, QP state, opcodes, access flags, attribute masks,
// async event types, work requests and completions, device/port attributes,
// memory windows (type 2: bound by a kBindMw WR, invalidated by kLocalInv).
// What must stay true: nothing here depends on <infiniband/verbs.h>; the
// ibverbs backend translates (hal/ibverbs/convert.cc, with static_asserts on
// the values that must match), the simulated RNIC uses these directly.
// Handles are plain 64-bit ids (never pointers): 0 is "no handle"; a backend
// never reuses an id within one Verbs instance, so a stale handle is always
// detectable.
#ifndef FERRY_HAL_TYPES_H_
#define FERRY_HAL_TYPES_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::hal {

// ---------------------------------------------------------------- handles
template <typename Tag>
struct Handle {
  uint64_t id = 0;
  constexpr bool valid() const { return id != 0; }
  friend constexpr bool operator==(Handle, Handle) = default;
  friend constexpr auto operator<=>(Handle, Handle) = default;
  template <typename H>
  friend H AbslHashValue(H h, Handle x) {
    return H::combine(std::move(h), x.id);
  }
};
using ContextHandle = Handle<struct ContextTag>;
using PdHandle = Handle<struct PdTag>;
using MrHandle = Handle<struct MrTag>;
using CqHandle = Handle<struct CqTag>;
using QpHandle = Handle<struct QpTag>;
using CompChannelHandle = Handle<struct CompChannelTag>;
using MwHandle = Handle<struct MwTag>;

// ---------------------------------------------------------------- enums
enum class QpState : uint8_t { kReset, kInit, kRtr, kRts, kSqd, kSqe, kErr };
std::string_view QpStateName(QpState s);

// Work request opcodes, and the opcode of a successful completion. kBindMw
// and kLocalInv are local operations (no packet): a type 2 memory window's
// bind (SendWr::bind) and the invalidation of an rkey (SendWr::
// invalidate_rkey); their CQEs carry the same opcode (IBV_WC_BIND_MW,
// IBV_WC_LOCAL_INV). kRecv and kRecvRdmaWithImm are completion opcodes
// only (IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM): a receive WR consumed by an
// incoming SEND or RDMA WRITE with immediate. A successful WRITE_WITH_IMM
// completes at the requester with kRdmaWrite (IBV_WC_RDMA_WRITE), as in
// libibverbs. Append only.
enum class Opcode : uint8_t {
  kRdmaWrite,
  kRdmaRead,
  kSend,
  kRdmaWriteWithImm,
  kBindMw,
  kLocalInv,
  kRecv,
  kRecvRdmaWithImm,
};
std::string_view OpcodeName(Opcode op);

// Completion statuses, same order and values as enum ibv_wc_status.
enum class WcStatus : uint8_t {
  kSuccess = 0,
  kLocLenErr,
  kLocQpOpErr,
  kLocEecOpErr,
  kLocProtErr,
  kWrFlushErr,
  kMwBindErr,
  kBadRespErr,
  kLocAccessErr,
  kRemInvReqErr,
  kRemAccessErr,
  kRemOpErr,
  kRetryExcErr,
  kRnrRetryExcErr,
  kLocRddViolErr,
  kRemInvRdReqErr,
  kRemAbortErr,
  kInvEecnErr,
  kInvEecStateErr,
  kFatalErr,
  kRespTimeoutErr,
  kGeneralErr,
};
std::string_view WcStatusName(WcStatus s);

// Access flags (bit values of enum ibv_access_flags).
enum AccessFlags : uint32_t {
  kAccessLocalWrite = 1u << 0,
  kAccessRemoteWrite = 1u << 1,
  kAccessRemoteRead = 1u << 2,
  kAccessRemoteAtomic = 1u << 3,
  kAccessMwBind = 1u << 4,  // MR only: memory windows may be bound to it
};

// Memory window types (ibv_mw_type). The HAL binds type 2 windows only (a
// kBindMw WR on the QP the window is then bound to); type 1 is listed for
// what ibv_alloc_mw accepts.
enum class MwType : uint8_t { kType1 = 1, kType2 = 2 };

// The next rkey of a memory window: same index (bits 8-31), tag byte + 1
// (ibv_inc_rkey). A bind gives the window this key; every bind must change
// it so an rkey from before the bind is never honoured again.
constexpr uint32_t IncRkey(uint32_t rkey) {
  return (rkey & ~uint32_t{0xff}) | ((rkey + 1) & uint32_t{0xff});
}

// QP attribute mask bits (values of enum ibv_qp_attr_mask).
enum QpAttrMask : uint32_t {
  kQpState = 1u << 0,
  kQpCurState = 1u << 1,
  kQpEnSqdAsyncNotify = 1u << 2,
  kQpAccessFlags = 1u << 3,
  kQpPkeyIndex = 1u << 4,
  kQpPort = 1u << 5,
  kQpQkey = 1u << 6,
  kQpAv = 1u << 7,
  kQpPathMtu = 1u << 8,
  kQpTimeout = 1u << 9,
  kQpRetryCnt = 1u << 10,
  kQpRnrRetry = 1u << 11,
  kQpRqPsn = 1u << 12,
  kQpMaxQpRdAtomic = 1u << 13,
  kQpAltPath = 1u << 14,
  kQpMinRnrTimer = 1u << 15,
  kQpSqPsn = 1u << 16,
  kQpMaxDestRdAtomic = 1u << 17,
  kQpPathMigState = 1u << 18,
  kQpCap = 1u << 19,
  kQpDestQpn = 1u << 20,
};

enum SendFlags : uint32_t {
  kSendFence = 1u << 0,
  kSendSignaled = 1u << 1,
  kSendSolicited = 1u << 2,
  kSendInline = 1u << 3,
};

// Async event types (the subset Ferry reacts to, plus kOther).
enum class AsyncEventType : uint8_t {
  kQpFatal,
  kQpReqErr,
  kQpAccessErr,
  kCommEst,
  kSqDrained,
  kCqErr,
  kPortErr,
  kPortActive,
  kGidChange,
  kDeviceFatal,
  kOther,
};
std::string_view AsyncEventTypeName(AsyncEventType t);

// MTU enum as in ibv_mtu: 1=256 ... 5=4096.
enum class Mtu : uint8_t { k256 = 1, k512 = 2, k1024 = 3, k2048 = 4, k4096 = 5 };
constexpr uint32_t MtuBytes(Mtu m) { return 128u << static_cast<uint8_t>(m); }

// ---------------------------------------------------------------- structs
struct Gid {
  std::array<uint8_t, 16> raw{};
  friend bool operator==(const Gid&, const Gid&) = default;
};

struct DeviceInfo {
  std::string name;   // e.g. "mlx5_0", "rxe0", "sim0"
  uint64_t guid = 0;  // node GUID (host order)
};

struct DeviceAttr {
  uint32_t max_qp = 0;
  uint32_t max_qp_wr = 0;
  uint32_t max_sge = 0;
  uint32_t max_cq = 0;
  uint32_t max_cqe = 0;
  uint32_t max_mr = 0;
  uint32_t max_pd = 0;
  uint64_t max_mr_size = 0;
  // READs (and atomics) a QP may have in flight: as responder
  // (max_dest_rd_atomic <= max_qp_rd_atom) and as requester
  // (max_rd_atomic <= max_qp_init_rd_atom); ibv_modify_qp refuses more.
  uint32_t max_qp_rd_atom = 0;
  uint32_t max_qp_init_rd_atom = 0;
  uint8_t phys_port_cnt = 0;
  uint32_t max_mw = 0;
  // device_cap_flags has IBV_DEVICE_MEM_WINDOW_TYPE_2A or _2B: type 2 memory
  // windows can be allocated and bound by a work request.
  bool mw_type2 = false;
};

enum class PortState : uint8_t { kNop, kDown, kInit, kArmed, kActive, kActiveDefer };
std::string_view PortStateName(PortState s);  // "DOWN", "ACTIVE", ...

struct PortAttr {
  PortState state = PortState::kDown;
  Mtu max_mtu = Mtu::k4096;
  Mtu active_mtu = Mtu::k1024;
  uint16_t lid = 0;
  uint8_t link_layer_ethernet = 1;  // 1 = RoCE (GID addressing), 0 = IB
  uint32_t gid_tbl_len = 0;
};

struct MrInfo {
  MrHandle mr;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

struct MwInfo {
  MwHandle mw;
  uint32_t rkey = 0;  // the rkey as allocated (unbound: no access through it)
};

struct CqInfo {
  CqHandle cq;
  uint32_t cqe = 0;  // actual capacity (may exceed what was asked)
};

struct QpCap {
  uint32_t max_send_wr = 0;
  uint32_t max_recv_wr = 0;
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
  uint32_t max_inline_data = 0;
};

struct QpInitAttr {  // RC only in v1
  CqHandle send_cq;
  CqHandle recv_cq;
  QpCap cap;
  bool sq_sig_all = false;
};

struct QpInfo {
  QpHandle qp;
  uint32_t qp_num = 0;
  QpCap cap;  // actual capacities
};

struct AddressVector {
  Gid dgid;
  uint16_t dlid = 0;
  uint8_t sgid_index = 0;
  uint8_t hop_limit = 64;
  uint8_t port_num = 1;
  bool is_global = true;
};

struct QpAttr {
  QpState qp_state = QpState::kReset;
  QpState cur_qp_state = QpState::kReset;
  Mtu path_mtu = Mtu::k1024;
  uint32_t qkey = 0;
  uint32_t rq_psn = 0;  // 24 bit
  uint32_t sq_psn = 0;  // 24 bit
  uint32_t dest_qp_num = 0;
  uint32_t qp_access_flags = 0;
  QpCap cap;
  AddressVector ah_attr;
  uint16_t pkey_index = 0;
  uint8_t max_rd_atomic = 1;
  uint8_t max_dest_rd_atomic = 1;
  uint8_t min_rnr_timer = 12;
  uint8_t port_num = 1;
  uint8_t timeout = 14;  // 4.096 us * 2^timeout; 0 = wait forever
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
};

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

inline constexpr size_t kMaxSgeInline = 4;

// The bind of a type 2 memory window (opcode kBindMw; ibv_send_wr.bind_mw):
// the window, the MR and range [addr, addr + length) it exposes, the remote
// access it grants (kAccessRemoteRead / kAccessRemoteWrite /
// kAccessRemoteAtomic), and its new rkey (IncRkey of the current one; the
// device takes only the tag byte). The MR must have kAccessMwBind, the
// window must be unbound, and window, MR and QP must share one PD; else the
// WR completes MW_BIND_ERR and the QP moves to ERR. Once bound, the window
// is usable only by requests arriving on the QP that posted the bind.
struct MwBind {
  MwHandle mw;
  MrHandle mr;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t access = 0;
  uint32_t rkey = 0;
};

struct SendWr {
  uint64_t wr_id = 0;
  Opcode opcode = Opcode::kRdmaWrite;
  uint32_t send_flags = kSendSignaled;
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSgeInline> sg_list{};
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm_data = 0;
  MwBind bind;                   // kBindMw only (num_sge must be 0)
  uint32_t invalidate_rkey = 0;  // kLocalInv only (num_sge must be 0)
};

// A receive work request (ibv_recv_wr): where an incoming SEND's payload
// is placed. An incoming RDMA WRITE with immediate consumes one too (its
// data goes where the WRITE names; the receive WR only reports it), so a
// receive WR with no SGE is enough for it.
struct RecvWr {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSgeInline> sg_list{};
};

// wc_flags bits (ibv_wc_flags): kWcWithImm = imm_data is valid.
enum WcFlags : uint32_t {
  kWcWithImm = 1u << 1,
};

struct WorkCompletion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  Opcode opcode = Opcode::kRdmaWrite;  // garbage unless status == kSuccess
  uint32_t vendor_err = 0;
  // Receive completions: the bytes received (a SEND's payload; an RDMA
  // WRITE with immediate's data length). Garbage unless status == kSuccess.
  uint32_t byte_len = 0;
  uint32_t qp_num = 0;
  uint32_t wc_flags = 0;  // WcFlags
  uint32_t imm_data = 0;  // host order (the HAL converts); valid with kWcWithImm
  uint32_t src_qp = 0;    // receive completions: the sender's QP number
};

struct AsyncEvent {
  AsyncEventType type = AsyncEventType::kOther;
  ContextHandle context;
  QpHandle qp;           // set for QP events
  CqHandle cq;           // set for CQ events
  uint8_t port_num = 0;  // set for port events
  int raw_type = 0;      // the backend's own event number, for logs
};

}  // namespace ferry::hal

#endif  // FERRY_HAL_TYPES_H_
