// sim/world/process_verbs.h: ProcessVerbs, the hal::Verbs one engine
// process of the simulated world holds: it forwards to the host's RNIC
// (the fabric's verbs for that host) while the process lives; after Kill()
// (the process exited) it never touches the RNIC again.
//
// Why: a process that exits loses every verbs object with it (the RNIC
// closed its contexts, sim::Fabric::RestartHost), but its engine object
// still has to be freed (a sanitizer run must see no leak). Its teardown
// then runs against a dead ProcessVerbs: every destroy, close, dereg and
// ack succeeds with no effect (the objects are already gone), every other
// call fails kUnavailable. So the dead engine's memory has an owner that
// frees it and no verbs call reaches the RNIC on the dead handles.
//
// Thread safety: the dead flag is atomic, so Kill() may race calls from an
// engine's threads (SimCluster); forwarding is as thread-safe as `inner`.
// What must stay true: a call that starts after Kill() returned never
// reaches `inner`; before it every call reaches it unchanged.
#ifndef FERRY_SIM_WORLD_PROCESS_VERBS_H_
#define FERRY_SIM_WORLD_PROCESS_VERBS_H_

#include <atomic>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hal/verbs.h"

namespace ferry::simworld {

class ProcessVerbs final : public hal::Verbs {
 public:
  explicit ProcessVerbs(hal::Verbs* inner) : in_(inner) {}
  void Kill() { dead_.store(true); }
  bool dead() const { return dead_.load(); }

  absl::StatusOr<std::vector<hal::DeviceInfo>> ListDevices() override {
    if (dead_) return Dead();
    return in_->ListDevices();
  }
  absl::StatusOr<hal::ContextHandle> OpenDevice(std::string_view name) override {
    if (dead_) return Dead();
    return in_->OpenDevice(name);
  }
  absl::Status CloseDevice(hal::ContextHandle ctx) override {
    return dead_ ? absl::OkStatus() : in_->CloseDevice(ctx);
  }
  absl::StatusOr<hal::DeviceAttr> QueryDevice(hal::ContextHandle ctx) override {
    if (dead_) return Dead();
    return in_->QueryDevice(ctx);
  }
  absl::StatusOr<hal::PortAttr> QueryPort(hal::ContextHandle ctx, uint8_t port) override {
    if (dead_) return Dead();
    return in_->QueryPort(ctx, port);
  }
  absl::StatusOr<hal::Gid> QueryGid(hal::ContextHandle ctx, uint8_t port, int index) override {
    if (dead_) return Dead();
    return in_->QueryGid(ctx, port, index);
  }
  absl::StatusOr<hal::GidEntry> QueryGidEntry(hal::ContextHandle ctx, uint8_t port,
                                              int index) override {
    if (dead_) return Dead();
    return in_->QueryGidEntry(ctx, port, index);
  }
  absl::StatusOr<hal::PdHandle> AllocPd(hal::ContextHandle ctx) override {
    if (dead_) return Dead();
    return in_->AllocPd(ctx);
  }
  absl::Status DeallocPd(hal::PdHandle pd) override {
    return dead_ ? absl::OkStatus() : in_->DeallocPd(pd);
  }
  absl::StatusOr<hal::MrInfo> RegMr(hal::PdHandle pd, void* addr, size_t length,
                                    uint32_t access) override {
    if (dead_) return Dead();
    return in_->RegMr(pd, addr, length, access);
  }
  absl::Status DeregMr(hal::MrHandle mr) override {
    return dead_ ? absl::OkStatus() : in_->DeregMr(mr);
  }
  absl::StatusOr<hal::CompChannelHandle> CreateCompChannel(hal::ContextHandle ctx) override {
    if (dead_) return Dead();
    return in_->CreateCompChannel(ctx);
  }
  absl::Status DestroyCompChannel(hal::CompChannelHandle ch) override {
    return dead_ ? absl::OkStatus() : in_->DestroyCompChannel(ch);
  }
  absl::StatusOr<hal::CqHandle> GetCqEvent(hal::CompChannelHandle ch) override {
    if (dead_) return Dead();
    return in_->GetCqEvent(ch);
  }
  void AckCqEvents(hal::CqHandle cq, uint32_t n) override {
    if (!dead_) in_->AckCqEvents(cq, n);
  }
  absl::StatusOr<hal::CqInfo> CreateCq(hal::ContextHandle ctx, uint32_t cqe,
                                       hal::CompChannelHandle ch) override {
    if (dead_) return Dead();
    return in_->CreateCq(ctx, cqe, ch);
  }
  absl::Status DestroyCq(hal::CqHandle cq) override {
    return dead_ ? absl::OkStatus() : in_->DestroyCq(cq);
  }
  absl::StatusOr<uint32_t> PollCq(hal::CqHandle cq, absl::Span<hal::WorkCompletion> out) override {
    if (dead_) return Dead();
    return in_->PollCq(cq, out);
  }
  absl::Status ReqNotifyCq(hal::CqHandle cq, bool solicited_only) override {
    if (dead_) return Dead();
    return in_->ReqNotifyCq(cq, solicited_only);
  }
  absl::StatusOr<hal::QpInfo> CreateQp(hal::PdHandle pd, const hal::QpInitAttr& init) override {
    if (dead_) return Dead();
    return in_->CreateQp(pd, init);
  }
  absl::Status ModifyQp(hal::QpHandle qp, const hal::QpAttr& attr, uint32_t mask) override {
    if (dead_) return Dead();
    return in_->ModifyQp(qp, attr, mask);
  }
  absl::StatusOr<hal::QpAttr> QueryQp(hal::QpHandle qp) override {
    if (dead_) return Dead();
    return in_->QueryQp(qp);
  }
  absl::Status DestroyQp(hal::QpHandle qp) override {
    return dead_ ? absl::OkStatus() : in_->DestroyQp(qp);
  }
  hal::PostResult PostSend(hal::QpHandle qp, absl::Span<const hal::SendWr> chain) override {
    if (dead_) return hal::PostResult{Dead(), 0};
    return in_->PostSend(qp, chain);
  }
  absl::StatusOr<hal::AsyncEvent> GetAsyncEvent(hal::ContextHandle ctx) override {
    if (dead_) return Dead();
    return in_->GetAsyncEvent(ctx);
  }
  void AckAsyncEvent(const hal::AsyncEvent& e) override {
    if (!dead_) in_->AckAsyncEvent(e);
  }
  absl::StatusOr<int> CompChannelFd(hal::CompChannelHandle ch) override {
    if (dead_) return Dead();
    return in_->CompChannelFd(ch);
  }
  absl::StatusOr<int> AsyncEventFd(hal::ContextHandle ctx) override {
    if (dead_) return Dead();
    return in_->AsyncEventFd(ctx);
  }

 private:
  static absl::Status Dead() { return absl::UnavailableError("the process exited"); }
  hal::Verbs* in_;
  std::atomic<bool> dead_{false};
};

}  // namespace ferry::simworld

#endif  // FERRY_SIM_WORLD_PROCESS_VERBS_H_
