// hal/ibverbs/ibverbs.cc: IbverbsVerbs, the Verbs port over libibverbs.
//
// Owns: the tables mapping Ferry handles (64-bit ids) to ibv_* objects, and
// every libibverbs call the project makes.
// What must stay true:
// - Ids come from one counter (next_id_), start at 1 and are never reused, so
//   a stale handle is always detected (kInvalidArgument), never aliased.
// - A table entry is erased only after its destroy call returned 0: a failed
//   destroy leaves the handle valid and the object usable.
// - CQ and QP ids travel through libibverbs as cq_context / qp_context, so a
//   CQ event or an async event maps back to its handle without a search.
// - The mutex guards the tables only; it is never held across a libibverbs
//   call (ibv_destroy_* may wait for event acknowledgements).
// - Completion channel fds and async fds are O_NONBLOCK, so GetCqEvent and
//   GetAsyncEvent return kUnavailable (EAGAIN) instead of blocking.
#include "hal/ibverbs/ibverbs.h"

#include <endian.h>
#include <fcntl.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "hal/errno_status.h"
#include "hal/ibverbs/convert.h"

namespace ferry::hal {
namespace {

using ibverbs::EventElement;

// Work requests converted and posted per ibv_post_send call (stack arrays).
constexpr size_t kPostBatch = 32;
// Completions polled per ibv_poll_cq call (stack array).
constexpr size_t kPollBatch = 32;
// Devices scanned in one device list.
constexpr int kMaxDevices = 1024;

// libibverbs calls return 0, an errno value, a negative errno, or -1 with
// errno set, depending on the call and the provider. Normalise to an errno.
int RetErrno(int ret) {
  if (ret == -1) return errno;
  return ret < 0 ? -ret : ret;
}

void* IdToContext(uint64_t id) { return reinterpret_cast<void*>(static_cast<uintptr_t>(id)); }
uint64_t ContextToId(void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

absl::Status SetNonBlocking(int fd, const char* what) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return ErrnoToStatus(absl::StrFormat("fcntl(F_GETFL) on %s", what), errno);
  if (fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoToStatus(absl::StrFormat("fcntl(F_SETFL) on %s", what), errno);
  }
  return absl::OkStatus();
}

absl::Status UnknownHandle(const char* kind, uint64_t id) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown %s handle %d (destroyed, never created, or of another Verbs)", kind, id));
}

struct CtxEntry {
  ibv_context* ctx = nullptr;
};
struct PdEntry {
  ibv_pd* pd = nullptr;
  uint64_t ctx = 0;
};
struct MrEntry {
  ibv_mr* mr = nullptr;
  uint64_t ctx = 0;
};
struct MwEntry {
  ibv_mw* mw = nullptr;
  uint64_t ctx = 0;
};
struct ChannelEntry {
  ibv_comp_channel* channel = nullptr;
  uint64_t ctx = 0;
};
struct CqEntry {
  ibv_cq* cq = nullptr;
  uint64_t ctx = 0;
};
struct QpEntry {
  ibv_qp* qp = nullptr;
  uint64_t ctx = 0;
};

class IbverbsVerbs final : public Verbs {
 public:
  IbverbsVerbs() = default;
  ~IbverbsVerbs() override;

  absl::StatusOr<std::vector<DeviceInfo>> ListDevices() override;
  absl::StatusOr<ContextHandle> OpenDevice(std::string_view name) override;
  absl::Status CloseDevice(ContextHandle ctx) override;
  absl::StatusOr<DeviceAttr> QueryDevice(ContextHandle ctx) override;
  absl::StatusOr<PortAttr> QueryPort(ContextHandle ctx, uint8_t port_num) override;
  absl::StatusOr<Gid> QueryGid(ContextHandle ctx, uint8_t port_num, int index) override;
  absl::StatusOr<GidEntry> QueryGidEntry(ContextHandle ctx, uint8_t port_num, int index) override;

  absl::StatusOr<PdHandle> AllocPd(ContextHandle ctx) override;
  absl::Status DeallocPd(PdHandle pd) override;
  absl::StatusOr<MrInfo> RegMr(PdHandle pd, void* addr, size_t length, uint32_t access) override;
  absl::Status DeregMr(MrHandle mr) override;
  absl::StatusOr<MwInfo> AllocMw(PdHandle pd, MwType type) override;
  absl::Status DeallocMw(MwHandle mw) override;

  absl::StatusOr<CompChannelHandle> CreateCompChannel(ContextHandle ctx) override;
  absl::Status DestroyCompChannel(CompChannelHandle channel) override;
  absl::StatusOr<CqHandle> GetCqEvent(CompChannelHandle channel) override;
  void AckCqEvents(CqHandle cq, uint32_t count) override;

  absl::StatusOr<CqInfo> CreateCq(ContextHandle ctx, uint32_t cqe,
                                  CompChannelHandle channel) override;
  absl::Status DestroyCq(CqHandle cq) override;
  absl::StatusOr<uint32_t> PollCq(CqHandle cq, absl::Span<WorkCompletion> out) override;
  absl::Status ReqNotifyCq(CqHandle cq, bool solicited_only) override;

  absl::StatusOr<QpInfo> CreateQp(PdHandle pd, const QpInitAttr& init) override;
  absl::Status ModifyQp(QpHandle qp, const QpAttr& attr, uint32_t mask) override;
  absl::StatusOr<QpAttr> QueryQp(QpHandle qp) override;
  absl::Status DestroyQp(QpHandle qp) override;
  PostResult PostSend(QpHandle qp, absl::Span<const SendWr> chain) override;
  PostResult PostRecv(QpHandle qp, absl::Span<const RecvWr> chain) override;

  absl::StatusOr<AsyncEvent> GetAsyncEvent(ContextHandle ctx) override;
  void AckAsyncEvent(const AsyncEvent& event) override;

  absl::StatusOr<int> CompChannelFd(CompChannelHandle channel) override;
  absl::StatusOr<int> AsyncEventFd(ContextHandle ctx) override;

 private:
  template <typename Entry>
  using Table = absl::btree_map<uint64_t, Entry>;

  // A copy of the entry for `id` in `table`, or kInvalidArgument. Tables are
  // named by member pointer so that every access happens under mu_.
  template <typename Entry>
  absl::StatusOr<Entry> Lookup(Table<Entry> IbverbsVerbs::*table, const char* kind,
                               uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::ReaderMutexLock lock(&mu_);
    const Table<Entry>& t = this->*table;
    auto it = t.find(id);
    if (it == t.end()) return UnknownHandle(kind, id);
    return it->second;
  }
  // ibverbs::ToIbvSendWr with a bind's window and region resolved from
  // their handles (kInvalidArgument for an unknown one).
  absl::Status ConvertSendWr(const SendWr& in, ibv_send_wr* wr, ibv_sge* sges) const
      ABSL_LOCKS_EXCLUDED(mu_) {
    if (in.opcode != Opcode::kBindMw) return ibverbs::ToIbvSendWr(in, wr, sges);
    FERRY_ASSIGN_OR_RETURN(const MwEntry mw, Lookup(&IbverbsVerbs::mws_, "MW", in.bind.mw.id));
    FERRY_ASSIGN_OR_RETURN(const MrEntry mr, Lookup(&IbverbsVerbs::mrs_, "MR", in.bind.mr.id));
    return ibverbs::ToIbvSendWr(in, wr, sges, mw.mw, mr.mr);
  }
  uint64_t NewId() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const uint64_t id = next_id_++;
    FERRY_CHECK_NE(id, 0u);
    return id;
  }
  template <typename Entry>
  void Insert(Table<Entry> IbverbsVerbs::*table, uint64_t id, Entry e) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const bool inserted = (this->*table).emplace(id, e).second;
    FERRY_CHECK(inserted);
  }
  template <typename Entry>
  void Erase(Table<Entry> IbverbsVerbs::*table, uint64_t id) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const size_t erased = (this->*table).erase(id);
    FERRY_CHECK_EQ(erased, 1u);
  }
  // The entries of `table` that belong to context `ctx`, by ascending id.
  template <typename Entry>
  std::vector<std::pair<uint64_t, Entry>> ChildrenOf(Table<Entry> IbverbsVerbs::*table,
                                                     uint64_t ctx) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::ReaderMutexLock lock(&mu_);
    std::vector<std::pair<uint64_t, Entry>> out;
    for (const auto& [id, e] : this->*table) {
      if (e.ctx == ctx) out.emplace_back(id, e);
    }
    return out;
  }

  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // The tables are only read or changed with mu_ held; the ibv objects they
  // point to are used without it (callers own ordering per object).
  absl::btree_map<uint64_t, CtxEntry> contexts_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<uint64_t, PdEntry> pds_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<uint64_t, MrEntry> mrs_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<uint64_t, MwEntry> mws_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<uint64_t, ChannelEntry> channels_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<uint64_t, CqEntry> cqs_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<uint64_t, QpEntry> qps_ ABSL_GUARDED_BY(mu_);
};

IbverbsVerbs::~IbverbsVerbs() {
  // Contexts the caller left open are closed as process exit would.
  std::vector<uint64_t> open;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [id, e] : contexts_) open.push_back(id);
  }
  for (uint64_t id : open) (void)CloseDevice(ContextHandle{id});
}

// ------------------------------------------------------------------ devices

absl::StatusOr<std::vector<DeviceInfo>> IbverbsVerbs::ListDevices() {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    // ENOSYS: the kernel has no RDMA support (no uverbs): no devices.
    if (errno == ENOSYS) return std::vector<DeviceInfo>{};
    return ErrnoToStatus("ibv_get_device_list", errno);
  }
  std::vector<DeviceInfo> out;
  for (int i = 0; i < n && i < kMaxDevices && list[i] != nullptr; ++i) {
    DeviceInfo info;
    const char* name = ibv_get_device_name(list[i]);
    info.name = name != nullptr ? name : "";
    info.guid = be64toh(ibv_get_device_guid(list[i]));
    out.push_back(std::move(info));
  }
  ibv_free_device_list(list);
  return out;
}

absl::StatusOr<ContextHandle> IbverbsVerbs::OpenDevice(std::string_view name) {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    if (errno == ENOSYS) {
      return absl::NotFoundError(absl::StrFormat(
          "ibv_open_device %s: no RDMA devices (kernel has no RDMA support)", name));
    }
    return ErrnoToStatus("ibv_get_device_list", errno);
  }
  ibv_device* dev = nullptr;
  for (int i = 0; i < n && i < kMaxDevices && list[i] != nullptr; ++i) {
    const char* dev_name = ibv_get_device_name(list[i]);
    if (dev_name != nullptr && name == dev_name) {
      dev = list[i];
      break;
    }
  }
  if (dev == nullptr) {
    ibv_free_device_list(list);
    return absl::NotFoundError(absl::StrFormat("ibv_open_device: no device named \"%s\"", name));
  }
  ibv_context* ctx = ibv_open_device(dev);
  const int open_errno = errno;
  ibv_free_device_list(list);  // an opened device stays valid
  if (ctx == nullptr) return ErrnoToStatus("ibv_open_device", open_errno);
  if (absl::Status s = SetNonBlocking(ctx->async_fd, "the async event fd"); !s.ok()) {
    ibv_close_device(ctx);
    return s;
  }
  const uint64_t id = NewId();
  Insert(&IbverbsVerbs::contexts_, id, CtxEntry{ctx});
  return ContextHandle{id};
}

absl::Status IbverbsVerbs::CloseDevice(ContextHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const CtxEntry c, Lookup(&IbverbsVerbs::contexts_, "context", handle.id));
  // Dependents first: memory windows hold their MR and (type 2, bound) their
  // QP, QPs hold CQs and PDs, MRs hold PDs, CQs hold channels. A destroy that
  // fails here is left to ibv_close_device, which makes the kernel destroy
  // whatever the context still holds (as process exit does).
  for (const auto& [id, e] : ChildrenOf(&IbverbsVerbs::mws_, handle.id)) {
    if (ibv_dealloc_mw(e.mw) == 0) Erase(&IbverbsVerbs::mws_, id);
  }
  for (const auto& [id, e] : ChildrenOf(&IbverbsVerbs::qps_, handle.id)) {
    if (ibv_destroy_qp(e.qp) == 0) Erase(&IbverbsVerbs::qps_, id);
  }
  for (const auto& [id, e] : ChildrenOf(&IbverbsVerbs::cqs_, handle.id)) {
    if (ibv_destroy_cq(e.cq) == 0) Erase(&IbverbsVerbs::cqs_, id);
  }
  for (const auto& [id, e] : ChildrenOf(&IbverbsVerbs::mrs_, handle.id)) {
    if (ibv_dereg_mr(e.mr) == 0) Erase(&IbverbsVerbs::mrs_, id);
  }
  for (const auto& [id, e] : ChildrenOf(&IbverbsVerbs::pds_, handle.id)) {
    if (ibv_dealloc_pd(e.pd) == 0) Erase(&IbverbsVerbs::pds_, id);
  }
  for (const auto& [id, e] : ChildrenOf(&IbverbsVerbs::channels_, handle.id)) {
    if (ibv_destroy_comp_channel(e.channel) == 0) Erase(&IbverbsVerbs::channels_, id);
  }
  if (const int ret = ibv_close_device(c.ctx); ret != 0) {
    return ErrnoToStatus("ibv_close_device", RetErrno(ret));
  }
  absl::MutexLock lock(&mu_);
  const auto drop = [&](auto& table) {
    for (auto it = table.begin(); it != table.end();) {
      it = it->second.ctx == handle.id ? table.erase(it) : std::next(it);
    }
  };
  drop(mws_);
  drop(qps_);
  drop(cqs_);
  drop(mrs_);
  drop(pds_);
  drop(channels_);
  contexts_.erase(handle.id);
  return absl::OkStatus();
}

absl::StatusOr<DeviceAttr> IbverbsVerbs::QueryDevice(ContextHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const CtxEntry c, Lookup(&IbverbsVerbs::contexts_, "context", handle.id));
  ibv_device_attr attr{};
  if (const int ret = ibv_query_device(c.ctx, &attr); ret != 0) {
    return ErrnoToStatus("ibv_query_device", RetErrno(ret));
  }
  return ibverbs::ToDeviceAttr(attr);
}

absl::StatusOr<PortAttr> IbverbsVerbs::QueryPort(ContextHandle handle, uint8_t port_num) {
  FERRY_ASSIGN_OR_RETURN(const CtxEntry c, Lookup(&IbverbsVerbs::contexts_, "context", handle.id));
  ibv_port_attr attr{};
  if (const int ret = ibv_query_port(c.ctx, port_num, &attr); ret != 0) {
    return ErrnoToStatus("ibv_query_port", RetErrno(ret));
  }
  return ibverbs::ToPortAttr(attr);
}

absl::StatusOr<Gid> IbverbsVerbs::QueryGid(ContextHandle handle, uint8_t port_num, int index) {
  FERRY_ASSIGN_OR_RETURN(const CtxEntry c, Lookup(&IbverbsVerbs::contexts_, "context", handle.id));
  ibv_gid gid{};
  if (const int ret = ibv_query_gid(c.ctx, port_num, index, &gid); ret != 0) {
    return ErrnoToStatus("ibv_query_gid", RetErrno(ret));
  }
  return ibverbs::ToGid(gid);
}

absl::StatusOr<GidEntry> IbverbsVerbs::QueryGidEntry(ContextHandle handle, uint8_t port_num,
                                                     int index) {
  FERRY_ASSIGN_OR_RETURN(const CtxEntry c, Lookup(&IbverbsVerbs::contexts_, "context", handle.id));
  if (index < 0) return absl::InvalidArgumentError("ibv_query_gid_ex: negative GID index");
  ibv_gid_entry entry{};
  const int ret = ibv_query_gid_ex(c.ctx, port_num, static_cast<uint32_t>(index), &entry, 0);
  if (ret != 0) {
    const int err = RetErrno(ret);
    // An empty slot inside the table: not an error of the device.
    if (err == ENODATA) {
      return absl::NotFoundError(absl::StrFormat("ibv_query_gid_ex: GID %d is empty", index));
    }
    return ErrnoToStatus("ibv_query_gid_ex", err);
  }
  GidEntry out;
  out.gid = ibverbs::ToGid(entry.gid);
  FERRY_ASSIGN_OR_RETURN(out.type, ibverbs::ToGidType(entry.gid_type));
  return out;
}

// ------------------------------------------------------------------ PD, MR

absl::StatusOr<PdHandle> IbverbsVerbs::AllocPd(ContextHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const CtxEntry c, Lookup(&IbverbsVerbs::contexts_, "context", handle.id));
  ibv_pd* pd = ibv_alloc_pd(c.ctx);
  if (pd == nullptr) return ErrnoToStatus("ibv_alloc_pd", errno);
  const uint64_t id = NewId();
  Insert(&IbverbsVerbs::pds_, id, PdEntry{pd, handle.id});
  return PdHandle{id};
}

absl::Status IbverbsVerbs::DeallocPd(PdHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const PdEntry p, Lookup(&IbverbsVerbs::pds_, "PD", handle.id));
  if (const int ret = ibv_dealloc_pd(p.pd); ret != 0) {
    return ErrnoToStatus("ibv_dealloc_pd", RetErrno(ret));
  }
  Erase(&IbverbsVerbs::pds_, handle.id);
  return absl::OkStatus();
}

absl::StatusOr<MrInfo> IbverbsVerbs::RegMr(PdHandle handle, void* addr, size_t length,
                                           uint32_t access) {
  FERRY_RETURN_IF_ERROR(ibverbs::CheckAccessFlags(access));
  if (length == 0) return absl::InvalidArgumentError("ibv_reg_mr: length 0");
  FERRY_ASSIGN_OR_RETURN(const PdEntry p, Lookup(&IbverbsVerbs::pds_, "PD", handle.id));
  ibv_mr* mr = ibv_reg_mr(p.pd, addr, length, static_cast<int>(access));
  if (mr == nullptr) return ErrnoToStatus("ibv_reg_mr", errno);
  const uint64_t id = NewId();
  Insert(&IbverbsVerbs::mrs_, id, MrEntry{mr, p.ctx});
  return MrInfo{MrHandle{id}, mr->lkey, mr->rkey};
}

absl::Status IbverbsVerbs::DeregMr(MrHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const MrEntry m, Lookup(&IbverbsVerbs::mrs_, "MR", handle.id));
  if (const int ret = ibv_dereg_mr(m.mr); ret != 0) {
    return ErrnoToStatus("ibv_dereg_mr", RetErrno(ret));
  }
  Erase(&IbverbsVerbs::mrs_, handle.id);
  return absl::OkStatus();
}

absl::StatusOr<MwInfo> IbverbsVerbs::AllocMw(PdHandle handle, MwType type) {
  FERRY_ASSIGN_OR_RETURN(const PdEntry p, Lookup(&IbverbsVerbs::pds_, "PD", handle.id));
  errno = 0;
  ibv_mw* mw = ibv_alloc_mw(p.pd, ibverbs::ToIbvMwType(type));
  // EOPNOTSUPP (no alloc_mw in the provider) reads kUnimplemented.
  if (mw == nullptr) return ErrnoToStatus("ibv_alloc_mw", errno);
  const uint64_t id = NewId();
  Insert(&IbverbsVerbs::mws_, id, MwEntry{mw, p.ctx});
  return MwInfo{MwHandle{id}, mw->rkey};
}

absl::Status IbverbsVerbs::DeallocMw(MwHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const MwEntry m, Lookup(&IbverbsVerbs::mws_, "MW", handle.id));
  if (const int ret = ibv_dealloc_mw(m.mw); ret != 0) {
    return ErrnoToStatus("ibv_dealloc_mw", RetErrno(ret));
  }
  Erase(&IbverbsVerbs::mws_, handle.id);
  return absl::OkStatus();
}

// ------------------------------------------------------------------ channels

absl::StatusOr<CompChannelHandle> IbverbsVerbs::CreateCompChannel(ContextHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const CtxEntry c, Lookup(&IbverbsVerbs::contexts_, "context", handle.id));
  ibv_comp_channel* ch = ibv_create_comp_channel(c.ctx);
  if (ch == nullptr) return ErrnoToStatus("ibv_create_comp_channel", errno);
  if (absl::Status s = SetNonBlocking(ch->fd, "a completion channel fd"); !s.ok()) {
    (void)ibv_destroy_comp_channel(ch);
    return s;
  }
  const uint64_t id = NewId();
  Insert(&IbverbsVerbs::channels_, id, ChannelEntry{ch, handle.id});
  return CompChannelHandle{id};
}

absl::Status IbverbsVerbs::DestroyCompChannel(CompChannelHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const ChannelEntry ch,
                         Lookup(&IbverbsVerbs::channels_, "completion channel", handle.id));
  if (const int ret = ibv_destroy_comp_channel(ch.channel); ret != 0) {
    return ErrnoToStatus("ibv_destroy_comp_channel", RetErrno(ret));
  }
  Erase(&IbverbsVerbs::channels_, handle.id);
  return absl::OkStatus();
}

absl::StatusOr<CqHandle> IbverbsVerbs::GetCqEvent(CompChannelHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const ChannelEntry ch,
                         Lookup(&IbverbsVerbs::channels_, "completion channel", handle.id));
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  if (ibv_get_cq_event(ch.channel, &cq, &cq_context) != 0) {
    return ErrnoToStatus("ibv_get_cq_event", errno);  // EAGAIN: kUnavailable
  }
  const uint64_t id = ContextToId(cq_context);
  absl::ReaderMutexLock lock(&mu_);
  auto it = cqs_.find(id);
  // Every CQ with a channel was created here with its id as cq_context.
  FERRY_CHECK(it != cqs_.end() && it->second.cq == cq);
  return CqHandle{id};
}

void IbverbsVerbs::AckCqEvents(CqHandle handle, uint32_t count) {
  absl::StatusOr<CqEntry> c = Lookup(&IbverbsVerbs::cqs_, "CQ", handle.id);
  FERRY_CHECK(c.ok());  // acking events of an unknown CQ is a caller bug
  FERRY_CHECK_LE(count, static_cast<uint32_t>(UINT_MAX));
  ibv_ack_cq_events(c->cq, count);
}

// ------------------------------------------------------------------ CQs

absl::StatusOr<CqInfo> IbverbsVerbs::CreateCq(ContextHandle handle, uint32_t cqe,
                                              CompChannelHandle channel) {
  if (cqe == 0 || cqe > static_cast<uint32_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrFormat("ibv_create_cq: cqe %d out of range", cqe));
  }
  FERRY_ASSIGN_OR_RETURN(const CtxEntry c, Lookup(&IbverbsVerbs::contexts_, "context", handle.id));
  ibv_comp_channel* ch = nullptr;
  if (channel.valid()) {
    FERRY_ASSIGN_OR_RETURN(const ChannelEntry e,
                           Lookup(&IbverbsVerbs::channels_, "completion channel", channel.id));
    if (e.ctx != handle.id) {
      return absl::InvalidArgumentError("ibv_create_cq: channel belongs to another context");
    }
    ch = e.channel;
  }
  const uint64_t id = NewId();
  ibv_cq* cq = ibv_create_cq(c.ctx, static_cast<int>(cqe), IdToContext(id), ch, 0);
  if (cq == nullptr) return ErrnoToStatus("ibv_create_cq", errno);
  Insert(&IbverbsVerbs::cqs_, id, CqEntry{cq, handle.id});
  return CqInfo{CqHandle{id}, static_cast<uint32_t>(std::max(cq->cqe, 0))};
}

absl::Status IbverbsVerbs::DestroyCq(CqHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const CqEntry c, Lookup(&IbverbsVerbs::cqs_, "CQ", handle.id));
  if (const int ret = ibv_destroy_cq(c.cq); ret != 0) {
    return ErrnoToStatus("ibv_destroy_cq", RetErrno(ret));
  }
  Erase(&IbverbsVerbs::cqs_, handle.id);
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> IbverbsVerbs::PollCq(CqHandle handle, absl::Span<WorkCompletion> out) {
  FERRY_ASSIGN_OR_RETURN(const CqEntry c, Lookup(&IbverbsVerbs::cqs_, "CQ", handle.id));
  const size_t want = std::min<size_t>(out.size(), UINT32_MAX);
  ibv_wc wcs[kPollBatch];
  size_t total = 0;
  // Bounded by want / kPollBatch + 1 rounds.
  while (total < want) {
    const int n = static_cast<int>(std::min(kPollBatch, want - total));
    errno = 0;
    const int got = ibv_poll_cq(c.cq, n, wcs);
    if (got < 0) {
      // Never lose completions already taken off the CQ: report them now;
      // the error shows again on the next poll.
      if (total > 0) break;
      return ErrnoToStatus("ibv_poll_cq", errno != 0 ? errno : EIO);
    }
    FERRY_CHECK_LE(got, n);
    for (int i = 0; i < got; ++i)
      out[total + static_cast<size_t>(i)] = ibverbs::ToWorkCompletion(wcs[i]);
    total += static_cast<size_t>(got);
    if (got < n) break;
  }
  return static_cast<uint32_t>(total);
}

absl::Status IbverbsVerbs::ReqNotifyCq(CqHandle handle, bool solicited_only) {
  FERRY_ASSIGN_OR_RETURN(const CqEntry c, Lookup(&IbverbsVerbs::cqs_, "CQ", handle.id));
  if (const int ret = ibv_req_notify_cq(c.cq, solicited_only ? 1 : 0); ret != 0) {
    return ErrnoToStatus("ibv_req_notify_cq", RetErrno(ret));
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ QPs

absl::StatusOr<QpInfo> IbverbsVerbs::CreateQp(PdHandle pd_handle, const QpInitAttr& init) {
  FERRY_ASSIGN_OR_RETURN(const PdEntry p, Lookup(&IbverbsVerbs::pds_, "PD", pd_handle.id));
  FERRY_ASSIGN_OR_RETURN(const CqEntry send_cq, Lookup(&IbverbsVerbs::cqs_, "CQ", init.send_cq.id));
  FERRY_ASSIGN_OR_RETURN(const CqEntry recv_cq, Lookup(&IbverbsVerbs::cqs_, "CQ", init.recv_cq.id));
  if (send_cq.ctx != p.ctx || recv_cq.ctx != p.ctx) {
    return absl::InvalidArgumentError("ibv_create_qp: PD and CQs belong to different contexts");
  }
  const uint64_t id = NewId();
  ibv_qp_init_attr attr{};
  attr.qp_context = IdToContext(id);
  attr.send_cq = send_cq.cq;
  attr.recv_cq = recv_cq.cq;
  attr.cap = ibverbs::ToIbvQpCap(init.cap);
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = init.sq_sig_all ? 1 : 0;
  ibv_qp* qp = ibv_create_qp(p.pd, &attr);
  if (qp == nullptr) return ErrnoToStatus("ibv_create_qp", errno);
  Insert(&IbverbsVerbs::qps_, id, QpEntry{qp, p.ctx});
  // ibv_create_qp writes the actual capacities back into attr.cap.
  return QpInfo{QpHandle{id}, qp->qp_num, ibverbs::ToQpCap(attr.cap)};
}

absl::Status IbverbsVerbs::ModifyQp(QpHandle handle, const QpAttr& attr, uint32_t mask) {
  FERRY_RETURN_IF_ERROR(ibverbs::CheckQpAttrMask(mask));
  if ((mask & kQpAccessFlags) != 0) {
    FERRY_RETURN_IF_ERROR(ibverbs::CheckAccessFlags(attr.qp_access_flags));
  }
  FERRY_ASSIGN_OR_RETURN(const QpEntry q, Lookup(&IbverbsVerbs::qps_, "QP", handle.id));
  ibv_qp_attr a = ibverbs::ToIbvQpAttr(attr);
  if (const int ret = ibv_modify_qp(q.qp, &a, static_cast<int>(mask)); ret != 0) {
    return ErrnoToStatus("ibv_modify_qp", RetErrno(ret));
  }
  return absl::OkStatus();
}

absl::StatusOr<QpAttr> IbverbsVerbs::QueryQp(QpHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const QpEntry q, Lookup(&IbverbsVerbs::qps_, "QP", handle.id));
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  const int mask = static_cast<int>(ibverbs::kAllQpAttrMask);
  if (const int ret = ibv_query_qp(q.qp, &attr, mask, &init); ret != 0) {
    return ErrnoToStatus("ibv_query_qp", RetErrno(ret));
  }
  return ibverbs::ToQpAttr(attr);
}

absl::Status IbverbsVerbs::DestroyQp(QpHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const QpEntry q, Lookup(&IbverbsVerbs::qps_, "QP", handle.id));
  if (const int ret = ibv_destroy_qp(q.qp); ret != 0) {
    return ErrnoToStatus("ibv_destroy_qp", RetErrno(ret));
  }
  Erase(&IbverbsVerbs::qps_, handle.id);
  return absl::OkStatus();
}

namespace {

// Posts `chain` to the provider in batches of kPostBatch WRs of type IbvWr
// (ibv_send_wr or ibv_recv_wr), converting each with `convert(in, wr,
// sges)` and posting a linked batch with `post(first, &bad_wr)`. A batch is
// posted only when every earlier one was, so "WRs before the first bad one
// are posted, the rest are not" holds across batches. `call` names the
// verbs call in errors.
template <typename IbvWr, typename In, typename Convert, typename Post>
PostResult PostInBatches(absl::Span<const In> chain, const char* call, Convert convert, Post post) {
  if (chain.size() > UINT32_MAX) {
    return PostResult{absl::InvalidArgumentError(absl::StrFormat("%s: chain too long", call)), 0};
  }
  IbvWr wrs[kPostBatch];
  ibv_sge sges[kPostBatch][kMaxSgeInline];
  for (size_t base = 0; base < chain.size(); base += kPostBatch) {
    const size_t n = std::min(kPostBatch, chain.size() - base);
    size_t valid = n;
    absl::Status invalid;
    for (size_t i = 0; i < n; ++i) {
      invalid = convert(chain[base + i], &wrs[i], sges[i]);
      if (!invalid.ok()) {
        valid = i;
        break;
      }
      if (i > 0) wrs[i - 1].next = &wrs[i];
    }
    if (valid > 0) {
      wrs[valid - 1].next = nullptr;
      IbvWr* bad_wr = nullptr;
      if (const int ret = post(wrs, &bad_wr); ret != 0) {
        // bad_wr points into the posted batch, or is null where the
        // provider refused the call before it looked at a WR (rxe's
        // post_recv in RESET, measured in the Soft-RoCE VM): then nothing
        // of this batch was posted.
        FERRY_CHECK(bad_wr == nullptr || (bad_wr >= wrs && bad_wr < wrs + valid));
        const auto idx = static_cast<uint32_t>(
            base + (bad_wr == nullptr ? 0 : static_cast<size_t>(bad_wr - wrs)));
        return PostResult{ErrnoToStatus(call, RetErrno(ret)), idx};
      }
    }
    if (!invalid.ok()) {
      return PostResult{absl::InvalidArgumentError(absl::StrFormat(
                            "%s: WR %d of the chain: %s", call, base + valid, invalid.message())),
                        static_cast<uint32_t>(base + valid)};
    }
  }
  return PostResult{absl::OkStatus(), static_cast<uint32_t>(chain.size())};
}

}  // namespace

PostResult IbverbsVerbs::PostSend(QpHandle handle, absl::Span<const SendWr> chain) {
  absl::StatusOr<QpEntry> q = Lookup(&IbverbsVerbs::qps_, "QP", handle.id);
  if (!q.ok()) return PostResult{q.status(), 0};
  return PostInBatches<ibv_send_wr>(
      chain, "ibv_post_send",
      [this](const SendWr& in, ibv_send_wr* wr, ibv_sge* sges) {
        return ConvertSendWr(in, wr, sges);
      },
      [qp = q->qp](ibv_send_wr* first, ibv_send_wr** bad) {
        return ibv_post_send(qp, first, bad);
      });
}

PostResult IbverbsVerbs::PostRecv(QpHandle handle, absl::Span<const RecvWr> chain) {
  absl::StatusOr<QpEntry> q = Lookup(&IbverbsVerbs::qps_, "QP", handle.id);
  if (!q.ok()) return PostResult{q.status(), 0};
  return PostInBatches<ibv_recv_wr>(chain, "ibv_post_recv", ibverbs::ToIbvRecvWr,
                                    [qp = q->qp](ibv_recv_wr* first, ibv_recv_wr** bad) {
                                      return ibv_post_recv(qp, first, bad);
                                    });
}

// ------------------------------------------------------------------ async events

absl::StatusOr<AsyncEvent> IbverbsVerbs::GetAsyncEvent(ContextHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const CtxEntry c, Lookup(&IbverbsVerbs::contexts_, "context", handle.id));
  ibv_async_event ev{};
  if (ibv_get_async_event(c.ctx, &ev) != 0) {
    return ErrnoToStatus("ibv_get_async_event", errno);  // EAGAIN: kUnavailable
  }
  AsyncEvent out;
  out.type = ibverbs::ToAsyncEventType(ev.event_type);
  out.context = handle;
  out.raw_type = static_cast<int>(ev.event_type);
  switch (ibverbs::ElementOf(ev.event_type)) {
    case EventElement::kQp:
      out.qp = QpHandle{ContextToId(ev.element.qp->qp_context)};
      break;
    case EventElement::kCq:
      out.cq = CqHandle{ContextToId(ev.element.cq->cq_context)};
      break;
    case EventElement::kPort:
      out.port_num = static_cast<uint8_t>(ev.element.port_num);
      break;
    case EventElement::kSrq:
    case EventElement::kWq:
      // Ferry creates no SRQs or WQs; acknowledged here, AckAsyncEvent
      // does nothing for them.
      ibv_ack_async_event(&ev);
      break;
    case EventElement::kNone:
      break;
  }
  return out;
}

void IbverbsVerbs::AckAsyncEvent(const AsyncEvent& event) {
  ibv_async_event ev{};
  ev.event_type = static_cast<ibv_event_type>(event.raw_type);
  // ibv_ack_async_event needs the event type and the affiliated object only.
  switch (ibverbs::ElementOf(event.raw_type)) {
    case EventElement::kQp: {
      absl::StatusOr<QpEntry> q = Lookup(&IbverbsVerbs::qps_, "QP", event.qp.id);
      FERRY_CHECK(q.ok());  // a QP with unacked events cannot have been destroyed
      ev.element.qp = q->qp;
      break;
    }
    case EventElement::kCq: {
      absl::StatusOr<CqEntry> c = Lookup(&IbverbsVerbs::cqs_, "CQ", event.cq.id);
      FERRY_CHECK(c.ok());
      ev.element.cq = c->cq;
      break;
    }
    case EventElement::kPort:
      ev.element.port_num = event.port_num;
      break;
    case EventElement::kSrq:
    case EventElement::kWq:
      return;  // acknowledged by GetAsyncEvent
    case EventElement::kNone:
      break;
  }
  ibv_ack_async_event(&ev);
}

absl::StatusOr<int> IbverbsVerbs::CompChannelFd(CompChannelHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const ChannelEntry ch,
                         Lookup(&IbverbsVerbs::channels_, "completion channel", handle.id));
  return ch.channel->fd;
}

absl::StatusOr<int> IbverbsVerbs::AsyncEventFd(ContextHandle handle) {
  FERRY_ASSIGN_OR_RETURN(const CtxEntry c, Lookup(&IbverbsVerbs::contexts_, "context", handle.id));
  return c.ctx->async_fd;
}

}  // namespace

std::unique_ptr<Verbs> NewIbverbsVerbs() { return std::make_unique<IbverbsVerbs>(); }

}  // namespace ferry::hal
