// hal/verbs.h: the Verbs port, the one interface through which Ferry touches
// an RNIC (real: hal/ibverbs; simulated: sim/rnic).
//
// Thread safety: a Verbs implementation is safe to call from several threads
// at once for different objects, as libibverbs is. Callers own ordering on one
// object (the engine guarantees one owner per QP and CQ, docs/design.md C5).
//
// What must stay true:
// - Every call returns absl::Status / StatusOr; errno values map to status
//   codes through the one table in hal/errno_status.h, and the message names
//   the verbs call and the errno.
// - Nothing blocks except where a comment says so: GetCqEvent and
//   GetAsyncEvent are non-blocking and return kUnavailable when nothing is
//   ready; the production runtime waits on WaitFd() instead.
// - A handle returned by a create call is owned by the caller until the
//   matching destroy call returns OK. A failed destroy leaves the object alive
//   and usable (docs/design.md section 3).
// - PostSend reports how many WRs of the chain were posted: WRs before the
//   first bad one are posted, the rest are not.
#ifndef FERRY_HAL_VERBS_H_
#define FERRY_HAL_VERBS_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "hal/types.h"

namespace ferry::hal {

// Type of a GID table entry (ibv_gid_type): which protocol a QP whose
// sgid_index names this entry speaks. RoCE v2 is routable (UDP/IP).
enum class GidType : uint8_t { kIb, kRoceV1, kRoceV2 };
inline std::string_view GidTypeName(GidType t) {
  switch (t) {
    case GidType::kIb:
      return "IB";
    case GidType::kRoceV1:
      return "RoCE v1";
    case GidType::kRoceV2:
      return "RoCE v2";
  }
  return "?";
}

// One GID table entry (ibv_gid_entry without the netdev index).
struct GidEntry {
  Gid gid;
  GidType type = GidType::kIb;
};

// Result of PostSend: `status` is OK when the whole chain was posted; else it
// is the error of WR number `first_bad` (0-based), and WRs [0, first_bad)
// were posted.
struct PostResult {
  absl::Status status;
  uint32_t first_bad = 0;
  uint32_t posted() const { return first_bad; }
};

class Verbs {
 public:
  virtual ~Verbs() = default;

  // Devices.
  virtual absl::StatusOr<std::vector<DeviceInfo>> ListDevices() = 0;
  virtual absl::StatusOr<ContextHandle> OpenDevice(std::string_view name) = 0;
  // Closes the context; every object it still holds is destroyed (as process
  // exit does) and no DMA of that context happens afterwards.
  virtual absl::Status CloseDevice(ContextHandle ctx) = 0;
  virtual absl::StatusOr<DeviceAttr> QueryDevice(ContextHandle ctx) = 0;
  virtual absl::StatusOr<PortAttr> QueryPort(ContextHandle ctx, uint8_t port_num) = 0;
  virtual absl::StatusOr<Gid> QueryGid(ContextHandle ctx, uint8_t port_num, int index) = 0;
  // The GID and its type at `index` (ibv_query_gid_ex). kNotFound when the
  // slot is within the table but empty (ENODATA); kInvalidArgument for an
  // index outside the table. Engine GID selection (gid_index = -1) scans
  // the first entries with this call (engine/gid_select.h).
  virtual absl::StatusOr<GidEntry> QueryGidEntry(ContextHandle ctx, uint8_t port_num,
                                                 int index) = 0;

  // Protection domains and memory regions.
  virtual absl::StatusOr<PdHandle> AllocPd(ContextHandle ctx) = 0;
  virtual absl::Status DeallocPd(PdHandle pd) = 0;
  virtual absl::StatusOr<MrInfo> RegMr(PdHandle pd, void* addr, size_t length, uint32_t access) = 0;
  virtual absl::Status DeregMr(MrHandle mr) = 0;

  // Memory windows (ibv_alloc_mw / ibv_dealloc_mw). AllocMw gives an unbound
  // window of `pd` and its rkey, which grants nothing until a kBindMw WR binds
  // it (type 2: to the QP that posts the bind, the only QP whose incoming
  // requests may then use it); kUnimplemented where the device has no memory
  // windows (EOPNOTSUPP). A kLocalInv WR naming its rkey, or DeallocMw,
  // invalidates it: no request that arrives afterwards is executed through
  // the old rkey. DeallocMw also frees the window. While a window is bound
  // to an MR, DeregMr of that MR fails (kInvalidArgument, EINVAL).
  virtual absl::StatusOr<MwInfo> AllocMw(PdHandle pd, MwType type) = 0;
  virtual absl::Status DeallocMw(MwHandle mw) = 0;

  // Completion channels and CQ events.
  virtual absl::StatusOr<CompChannelHandle> CreateCompChannel(ContextHandle ctx) = 0;
  virtual absl::Status DestroyCompChannel(CompChannelHandle channel) = 0;
  // Non-blocking: the CQ whose notification fired, or kUnavailable.
  virtual absl::StatusOr<CqHandle> GetCqEvent(CompChannelHandle channel) = 0;
  virtual void AckCqEvents(CqHandle cq, uint32_t count) = 0;

  // Completion queues. `channel` may be invalid (no notifications).
  virtual absl::StatusOr<CqInfo> CreateCq(ContextHandle ctx, uint32_t cqe,
                                          CompChannelHandle channel) = 0;
  virtual absl::Status DestroyCq(CqHandle cq) = 0;
  // Polls up to out.size() completions; returns how many were written.
  virtual absl::StatusOr<uint32_t> PollCq(CqHandle cq, absl::Span<WorkCompletion> out) = 0;
  // One-shot: the next CQE written after this call fires one event.
  virtual absl::Status ReqNotifyCq(CqHandle cq, bool solicited_only) = 0;

  // RC queue pairs.
  virtual absl::StatusOr<QpInfo> CreateQp(PdHandle pd, const QpInitAttr& init) = 0;
  // Applies the attributes selected by `mask` (QpAttrMask bits). Fails and
  // changes nothing on an illegal transition or mask.
  virtual absl::Status ModifyQp(QpHandle qp, const QpAttr& attr, uint32_t mask) = 0;
  virtual absl::StatusOr<QpAttr> QueryQp(QpHandle qp) = 0;
  virtual absl::Status DestroyQp(QpHandle qp) = 0;
  virtual PostResult PostSend(QpHandle qp, absl::Span<const SendWr> chain) = 0;
  // Posts receive WRs (ibv_post_recv), in order, on the QP's receive queue:
  // allowed from INIT on (kInvalidArgument in RESET); in ERR each completes
  // at once WR_FLUSH_ERR on the receive CQ. A full receive queue or more
  // SGEs than max_recv_sge fails that WR (ENOMEM / EINVAL) and leaves the
  // rest unposted, as PostSend does.
  virtual PostResult PostRecv(QpHandle qp, absl::Span<const RecvWr> chain) = 0;

  // Async events. Non-blocking: kUnavailable when none is pending. Every
  // event returned must be acknowledged with AckAsyncEvent.
  virtual absl::StatusOr<AsyncEvent> GetAsyncEvent(ContextHandle ctx) = 0;
  virtual void AckAsyncEvent(const AsyncEvent& event) = 0;

  // File descriptors a production runtime can poll() on for readiness of
  // GetCqEvent / GetAsyncEvent. The simulated RNIC returns kUnimplemented:
  // its scheduler knows readiness directly.
  virtual absl::StatusOr<int> CompChannelFd(CompChannelHandle channel) = 0;
  virtual absl::StatusOr<int> AsyncEventFd(ContextHandle ctx) = 0;
};

}  // namespace ferry::hal

#endif  // FERRY_HAL_VERBS_H_
