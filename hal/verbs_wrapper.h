// hal/verbs_wrapper.h: VerbsWrapper, a hal::Verbs that forwards every call
// to another one (LevelDB's EnvWrapper for the verbs port). A decorator
// derives from it and overrides only the calls it changes: the fault and
// observation decorators of the tests (tests/engine/sim/fault_verbs.h,
// tests/softroce/probe/hold_verbs.h) do.
//
// Thread safety: exactly that of the target (nothing is added).
// What must stay true: every method of hal::Verbs is forwarded unchanged,
// arguments and results alike; the target outlives the wrapper.
#ifndef FERRY_HAL_VERBS_WRAPPER_H_
#define FERRY_HAL_VERBS_WRAPPER_H_

#include <string_view>
#include <vector>

#include "hal/verbs.h"

namespace ferry::hal {

class VerbsWrapper : public Verbs {
 public:
  explicit VerbsWrapper(Verbs* target) : target_(target) {}
  Verbs* target() const { return target_; }

  absl::StatusOr<std::vector<DeviceInfo>> ListDevices() override { return target_->ListDevices(); }
  absl::StatusOr<ContextHandle> OpenDevice(std::string_view name) override {
    return target_->OpenDevice(name);
  }
  absl::Status CloseDevice(ContextHandle ctx) override { return target_->CloseDevice(ctx); }
  absl::StatusOr<DeviceAttr> QueryDevice(ContextHandle ctx) override {
    return target_->QueryDevice(ctx);
  }
  absl::StatusOr<PortAttr> QueryPort(ContextHandle ctx, uint8_t port) override {
    return target_->QueryPort(ctx, port);
  }
  absl::StatusOr<Gid> QueryGid(ContextHandle ctx, uint8_t port, int index) override {
    return target_->QueryGid(ctx, port, index);
  }
  absl::StatusOr<GidEntry> QueryGidEntry(ContextHandle ctx, uint8_t port, int index) override {
    return target_->QueryGidEntry(ctx, port, index);
  }
  absl::StatusOr<PdHandle> AllocPd(ContextHandle ctx) override { return target_->AllocPd(ctx); }
  absl::Status DeallocPd(PdHandle pd) override { return target_->DeallocPd(pd); }
  absl::StatusOr<MrInfo> RegMr(PdHandle pd, void* addr, size_t length, uint32_t access) override {
    return target_->RegMr(pd, addr, length, access);
  }
  absl::Status DeregMr(MrHandle mr) override { return target_->DeregMr(mr); }
  absl::StatusOr<MwInfo> AllocMw(PdHandle pd, MwType type) override {
    return target_->AllocMw(pd, type);
  }
  absl::Status DeallocMw(MwHandle mw) override { return target_->DeallocMw(mw); }
  absl::StatusOr<CompChannelHandle> CreateCompChannel(ContextHandle ctx) override {
    return target_->CreateCompChannel(ctx);
  }
  absl::Status DestroyCompChannel(CompChannelHandle ch) override {
    return target_->DestroyCompChannel(ch);
  }
  absl::StatusOr<CqHandle> GetCqEvent(CompChannelHandle ch) override {
    return target_->GetCqEvent(ch);
  }
  void AckCqEvents(CqHandle cq, uint32_t n) override { target_->AckCqEvents(cq, n); }
  absl::StatusOr<CqInfo> CreateCq(ContextHandle ctx, uint32_t cqe, CompChannelHandle ch) override {
    return target_->CreateCq(ctx, cqe, ch);
  }
  absl::Status DestroyCq(CqHandle cq) override { return target_->DestroyCq(cq); }
  absl::StatusOr<uint32_t> PollCq(CqHandle cq, absl::Span<WorkCompletion> out) override {
    return target_->PollCq(cq, out);
  }
  absl::Status ReqNotifyCq(CqHandle cq, bool solicited_only) override {
    return target_->ReqNotifyCq(cq, solicited_only);
  }
  absl::StatusOr<QpInfo> CreateQp(PdHandle pd, const QpInitAttr& init) override {
    return target_->CreateQp(pd, init);
  }
  absl::Status ModifyQp(QpHandle qp, const QpAttr& attr, uint32_t mask) override {
    return target_->ModifyQp(qp, attr, mask);
  }
  absl::StatusOr<QpAttr> QueryQp(QpHandle qp) override { return target_->QueryQp(qp); }
  absl::Status DestroyQp(QpHandle qp) override { return target_->DestroyQp(qp); }
  PostResult PostSend(QpHandle qp, absl::Span<const SendWr> chain) override {
    return target_->PostSend(qp, chain);
  }
  PostResult PostRecv(QpHandle qp, absl::Span<const RecvWr> chain) override {
    return target_->PostRecv(qp, chain);
  }
  absl::StatusOr<AsyncEvent> GetAsyncEvent(ContextHandle ctx) override {
    return target_->GetAsyncEvent(ctx);
  }
  void AckAsyncEvent(const AsyncEvent& e) override { target_->AckAsyncEvent(e); }
  absl::StatusOr<int> CompChannelFd(CompChannelHandle ch) override {
    return target_->CompChannelFd(ch);
  }
  absl::StatusOr<int> AsyncEventFd(ContextHandle ctx) override {
    return target_->AsyncEventFd(ctx);
  }

 private:
  Verbs* const target_;
};

}  // namespace ferry::hal

#endif  // FERRY_HAL_VERBS_WRAPPER_H_
