// sim/rnic/sim_verbs.cc: SimVerbs, the hal::Verbs of one simulated host: each
// call forwards to the Fabric with the host id.
//
// What must stay true: SimVerbs holds no state of its own besides the Fabric
// and the host id.
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

// The hal::Verbs of one host: forwards to the Fabric with the host id.
class SimVerbs final : public hal::Verbs {
 public:
  SimVerbs(Fabric* f, uint32_t host) : f_(f), host_(host) {}

  absl::StatusOr<std::vector<hal::DeviceInfo>> ListDevices() override {
    return f_->VerbListDevices(host_);
  }
  absl::StatusOr<hal::ContextHandle> OpenDevice(std::string_view name) override {
    return f_->VerbOpenDevice(host_, name);
  }
  absl::Status CloseDevice(hal::ContextHandle ctx) override {
    return f_->VerbCloseDevice(host_, ctx);
  }
  absl::StatusOr<hal::DeviceAttr> QueryDevice(hal::ContextHandle ctx) override {
    return f_->VerbQueryDevice(host_, ctx);
  }
  absl::StatusOr<hal::PortAttr> QueryPort(hal::ContextHandle ctx, uint8_t port) override {
    return f_->VerbQueryPort(host_, ctx, port);
  }
  absl::StatusOr<hal::Gid> QueryGid(hal::ContextHandle ctx, uint8_t port, int index) override {
    return f_->VerbQueryGid(host_, ctx, port, index);
  }
  absl::StatusOr<hal::GidEntry> QueryGidEntry(hal::ContextHandle ctx, uint8_t port,
                                              int index) override {
    return f_->VerbQueryGidEntry(host_, ctx, port, index);
  }
  absl::StatusOr<hal::PdHandle> AllocPd(hal::ContextHandle ctx) override {
    return f_->VerbAllocPd(host_, ctx);
  }
  absl::Status DeallocPd(hal::PdHandle pd) override { return f_->VerbDeallocPd(host_, pd); }
  absl::StatusOr<hal::MrInfo> RegMr(hal::PdHandle pd, void* addr, size_t length,
                                    uint32_t access) override {
    return f_->VerbRegMr(host_, pd, addr, length, access);
  }
  absl::Status DeregMr(hal::MrHandle mr) override { return f_->VerbDeregMr(host_, mr); }
  absl::StatusOr<hal::MwInfo> AllocMw(hal::PdHandle pd, hal::MwType type) override {
    return f_->VerbAllocMw(host_, pd, type);
  }
  absl::Status DeallocMw(hal::MwHandle mw) override { return f_->VerbDeallocMw(host_, mw); }
  absl::StatusOr<hal::CompChannelHandle> CreateCompChannel(hal::ContextHandle ctx) override {
    return f_->VerbCreateCompChannel(host_, ctx);
  }
  absl::Status DestroyCompChannel(hal::CompChannelHandle ch) override {
    return f_->VerbDestroyCompChannel(host_, ch);
  }
  absl::StatusOr<hal::CqHandle> GetCqEvent(hal::CompChannelHandle ch) override {
    return f_->VerbGetCqEvent(host_, ch);
  }
  void AckCqEvents(hal::CqHandle cq, uint32_t count) override {
    f_->VerbAckCqEvents(host_, cq, count);
  }
  absl::StatusOr<hal::CqInfo> CreateCq(hal::ContextHandle ctx, uint32_t cqe,
                                       hal::CompChannelHandle ch) override {
    return f_->VerbCreateCq(host_, ctx, cqe, ch);
  }
  absl::Status DestroyCq(hal::CqHandle cq) override { return f_->VerbDestroyCq(host_, cq); }
  absl::StatusOr<uint32_t> PollCq(hal::CqHandle cq, absl::Span<hal::WorkCompletion> out) override {
    return f_->VerbPollCq(host_, cq, out);
  }
  absl::Status ReqNotifyCq(hal::CqHandle cq, bool solicited_only) override {
    return f_->VerbReqNotifyCq(host_, cq, solicited_only);
  }
  absl::StatusOr<hal::QpInfo> CreateQp(hal::PdHandle pd, const hal::QpInitAttr& init) override {
    return f_->VerbCreateQp(host_, pd, init);
  }
  absl::Status ModifyQp(hal::QpHandle qp, const hal::QpAttr& attr, uint32_t mask) override {
    return f_->VerbModifyQp(host_, qp, attr, mask);
  }
  absl::StatusOr<hal::QpAttr> QueryQp(hal::QpHandle qp) override {
    return f_->VerbQueryQp(host_, qp);
  }
  absl::Status DestroyQp(hal::QpHandle qp) override { return f_->VerbDestroyQp(host_, qp); }
  hal::PostResult PostSend(hal::QpHandle qp, absl::Span<const hal::SendWr> chain) override {
    return f_->VerbPostSend(host_, qp, chain);
  }
  hal::PostResult PostRecv(hal::QpHandle qp, absl::Span<const hal::RecvWr> chain) override {
    return f_->VerbPostRecv(host_, qp, chain);
  }
  absl::StatusOr<hal::AsyncEvent> GetAsyncEvent(hal::ContextHandle ctx) override {
    return f_->VerbGetAsyncEvent(host_, ctx);
  }
  void AckAsyncEvent(const hal::AsyncEvent& event) override { f_->VerbAckAsyncEvent(host_, event); }
  absl::StatusOr<int> CompChannelFd(hal::CompChannelHandle) override {
    return absl::UnimplementedError("sim rnic: no file descriptors; the scheduler knows readiness");
  }
  absl::StatusOr<int> AsyncEventFd(hal::ContextHandle) override {
    return absl::UnimplementedError("sim rnic: no file descriptors; the scheduler knows readiness");
  }

 private:
  Fabric* f_;
  uint32_t host_;
};

std::unique_ptr<hal::Verbs> Fabric::NewVerbs(uint32_t host) {
  FERRY_CHECK_LT(host, hosts_.size());
  return std::make_unique<SimVerbs>(this, host);
}

}  // namespace ferry::sim
