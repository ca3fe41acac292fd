// hal/ibverbs/convert.h: Ferry verbs types <-> libibverbs types.
//
// Owns: every translation between hal/types.h and <infiniband/verbs.h>, and
// the static_asserts (in convert.cc) that pin the values Ferry mirrors
// one-to-one (WC status, QP state, MTU, port state, access flags, send flags,
// QP attribute mask bits, memory window types).
// What must stay true: only hal/ibverbs includes this header (it pulls in
// <infiniband/verbs.h>). Conversions from Ferry values reject anything
// libibverbs would misread (unknown flag or mask bits, too many SGEs) with
// kInvalidArgument; conversions from ibverbs values never fail on a value
// Ferry has no name for: they fall back to the nearest catch-all
// (kGeneralErr, kOther) or report kInternal (unknown QP state).
// Thread safety: pure functions.
#ifndef FERRY_HAL_IBVERBS_CONVERT_H_
#define FERRY_HAL_IBVERBS_CONVERT_H_

#include <infiniband/verbs.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hal/types.h"
#include "hal/verbs.h"

namespace ferry::hal::ibverbs {

// All bits Ferry defines, per bit set.
inline constexpr uint32_t kAllAccessFlags = kAccessLocalWrite | kAccessRemoteWrite |
                                            kAccessRemoteRead | kAccessRemoteAtomic | kAccessMwBind;
inline constexpr uint32_t kAllSendFlags = kSendFence | kSendSignaled | kSendSolicited | kSendInline;
inline constexpr uint32_t kAllQpAttrMask = (kQpDestQpn << 1) - 1;

// Completions.
WcStatus ToWcStatus(int ibv_status);
// Meaningful only for successful completions (error CQEs carry no opcode).
Opcode ToOpcode(int ibv_wc_opcode);
WorkCompletion ToWorkCompletion(const ibv_wc& wc);

// QP state, MTU, port state.
absl::StatusOr<QpState> ToQpState(int ibv_state);
ibv_qp_state ToIbvQpState(QpState s);
Mtu ToMtu(int ibv_mtu_value);  // out-of-range values clamp into 256..4096
PortState ToPortState(int ibv_port_state);

// Async events: Ferry's type, and which element of the event is valid.
AsyncEventType ToAsyncEventType(int ibv_event);
enum class EventElement : uint8_t { kNone, kQp, kCq, kSrq, kWq, kPort };
EventElement ElementOf(int ibv_event);

// Flags and masks (values equal; checked for unknown bits).
absl::Status CheckAccessFlags(uint32_t access);
absl::Status CheckQpAttrMask(uint32_t mask);

// Attributes.
DeviceAttr ToDeviceAttr(const ibv_device_attr& a);
PortAttr ToPortAttr(const ibv_port_attr& a);
Gid ToGid(const ibv_gid& g);
ibv_gid ToIbvGid(const Gid& g);
// ibv_gid_type value -> GidType; kInvalidArgument for an unknown value.
absl::StatusOr<GidType> ToGidType(uint32_t ibv_gid_type);
QpCap ToQpCap(const ibv_qp_cap& c);
ibv_qp_cap ToIbvQpCap(const QpCap& c);
ibv_mw_type ToIbvMwType(MwType t);
ibv_qp_attr ToIbvQpAttr(const QpAttr& a);
absl::StatusOr<QpAttr> ToQpAttr(const ibv_qp_attr& a);

// Work requests: fills `wr` (wr->next left null) and `sges` (room for
// kMaxSgeInline entries). kInvalidArgument on too many SGEs, unknown
// send-flag or access bits, an SGE on a bind or local-invalidate WR, or a
// bind without its window `mw` and region `mr` (the caller resolves
// in.bind's handles to them; both are ignored for other opcodes).
absl::Status ToIbvSendWr(const SendWr& in, ibv_send_wr* wr, ibv_sge* sges, ibv_mw* mw = nullptr,
                         ibv_mr* mr = nullptr);

// A receive WR: fills `wr` (wr->next left null) and `sges`; kInvalidArgument
// on more than kMaxSgeInline SGEs.
absl::Status ToIbvRecvWr(const RecvWr& in, ibv_recv_wr* wr, ibv_sge* sges);

}  // namespace ferry::hal::ibverbs

#endif  // FERRY_HAL_IBVERBS_CONVERT_H_
