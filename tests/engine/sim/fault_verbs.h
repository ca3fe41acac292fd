// tests/engine/sim/fault_verbs.h: a hal::Verbs decorator for lifecycle tests
// (a hal::VerbsWrapper): forwards every call to an inner Verbs (the
// simulated RNIC) and fails, on request, the N-th resource-creating call or
// the next destroy calls.
//
// Thread safety: none (sim tests are single-threaded).
// What must stay true: a failed call never reaches the inner Verbs, so the
// simulated RNIC's live-object counts stay the ground truth of what exists.
#ifndef FERRY_TESTS_ENGINE_SIM_FAULT_VERBS_H_
#define FERRY_TESTS_ENGINE_SIM_FAULT_VERBS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "hal/verbs.h"
#include "hal/verbs_wrapper.h"

namespace ferry::engine::testing {

class FaultVerbs final : public hal::VerbsWrapper {
 public:
  explicit FaultVerbs(hal::Verbs* inner) : hal::VerbsWrapper(inner), in_(inner) {}

  // The create call with this 0-based index (counting OpenDevice, AllocPd,
  // RegMr, CreateCompChannel, CreateCq, CreateQp, and the queries and
  // ReqNotifyCq of bring-up) fails with kResourceExhausted. -1 = never.
  int64_t fail_at = -1;
  int64_t calls = 0;                // fallible calls seen so far
  uint32_t fail_destroys = 0;       // the next N destroy calls fail (EBUSY)
  std::vector<std::string> failed;  // names of the calls failed on purpose

  absl::StatusOr<hal::ContextHandle> OpenDevice(std::string_view name) override {
    if (Fail("open_device")) return Err("open_device");
    return in_->OpenDevice(name);
  }
  absl::Status CloseDevice(hal::ContextHandle ctx) override {
    if (FailDestroy("close_device")) return Busy("close_device");
    return in_->CloseDevice(ctx);
  }
  absl::StatusOr<hal::DeviceAttr> QueryDevice(hal::ContextHandle ctx) override {
    if (Fail("query_device")) return Err("query_device");
    return in_->QueryDevice(ctx);
  }
  absl::StatusOr<hal::PortAttr> QueryPort(hal::ContextHandle ctx, uint8_t port) override {
    if (Fail("query_port")) return Err("query_port");
    return in_->QueryPort(ctx, port);
  }
  absl::StatusOr<hal::Gid> QueryGid(hal::ContextHandle ctx, uint8_t port, int index) override {
    if (Fail("query_gid")) return Err("query_gid");
    return in_->QueryGid(ctx, port, index);
  }
  absl::StatusOr<hal::GidEntry> QueryGidEntry(hal::ContextHandle ctx, uint8_t port,
                                              int index) override {
    if (Fail("query_gid")) return Err("query_gid");
    return in_->QueryGidEntry(ctx, port, index);
  }
  absl::StatusOr<hal::PdHandle> AllocPd(hal::ContextHandle ctx) override {
    if (Fail("alloc_pd")) return Err("alloc_pd");
    return in_->AllocPd(ctx);
  }
  absl::Status DeallocPd(hal::PdHandle pd) override {
    if (FailDestroy("dealloc_pd")) return Busy("dealloc_pd");
    return in_->DeallocPd(pd);
  }
  absl::StatusOr<hal::MrInfo> RegMr(hal::PdHandle pd, void* addr, size_t length,
                                    uint32_t access) override {
    if (Fail("reg_mr")) return Err("reg_mr");
    return in_->RegMr(pd, addr, length, access);
  }
  absl::Status DeregMr(hal::MrHandle mr) override {
    if (FailDestroy("dereg_mr")) return Busy("dereg_mr");
    return in_->DeregMr(mr);
  }
  absl::StatusOr<hal::CompChannelHandle> CreateCompChannel(hal::ContextHandle ctx) override {
    if (Fail("create_comp_channel")) return Err("create_comp_channel");
    return in_->CreateCompChannel(ctx);
  }
  absl::Status DestroyCompChannel(hal::CompChannelHandle ch) override {
    if (FailDestroy("destroy_comp_channel")) return Busy("destroy_comp_channel");
    return in_->DestroyCompChannel(ch);
  }
  absl::StatusOr<hal::CqInfo> CreateCq(hal::ContextHandle ctx, uint32_t cqe,
                                       hal::CompChannelHandle ch) override {
    if (Fail("create_cq")) return Err("create_cq");
    return in_->CreateCq(ctx, cqe, ch);
  }
  absl::Status DestroyCq(hal::CqHandle cq) override {
    if (FailDestroy("destroy_cq")) return Busy("destroy_cq");
    return in_->DestroyCq(cq);
  }
  absl::Status ReqNotifyCq(hal::CqHandle cq, bool solicited_only) override {
    if (Fail("req_notify_cq")) return Err("req_notify_cq");
    return in_->ReqNotifyCq(cq, solicited_only);
  }
  absl::StatusOr<hal::QpInfo> CreateQp(hal::PdHandle pd, const hal::QpInitAttr& init) override {
    if (Fail("create_qp")) return Err("create_qp");
    return in_->CreateQp(pd, init);
  }
  absl::Status DestroyQp(hal::QpHandle qp) override {
    if (FailDestroy("destroy_qp")) return Busy("destroy_qp");
    return in_->DestroyQp(qp);
  }

 private:
  bool Fail(const char* what) {
    const bool f = calls++ == fail_at;
    if (f) failed.emplace_back(what);
    return f;
  }
  bool FailDestroy(const char* what) {
    if (fail_destroys == 0) return false;
    --fail_destroys;
    failed.emplace_back(what);
    return true;
  }
  static absl::Status Err(const char* what) {
    return absl::ResourceExhaustedError(std::string("injected failure of ") + what);
  }
  static absl::Status Busy(const char* what) {
    return absl::UnavailableError(std::string("injected EBUSY from ") + what);
  }
  hal::Verbs* in_;
};

}  // namespace ferry::engine::testing

#endif  // FERRY_TESTS_ENGINE_SIM_FAULT_VERBS_H_
