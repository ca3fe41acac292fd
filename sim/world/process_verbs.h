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
// Pause: a paused process makes no verbs call (SIGSTOP): a call that starts
// while paused waits until Resume() (or Kill()); a call already in flight
// finishes. SimCluster pauses a host from the pump thread, with the world
// mutex held, so Pause() and Resume() never wait for anything.
//
// Thread safety: a gate (mu_) counts the calls in flight; a call checks
// the flags and counts itself in under mu_, forwards with mu_ released,
// and counts itself out. Kill() sets the flag and waits for the count to
// reach zero, so it returns only once every call in flight has returned (a
// call that passed the check before Kill() must not reach `inner` after the
// RNIC closed the process's objects: the race the ASan CI run of 0edacd9
// hit, "ibv_get_async_event: context 2 was closed"). No forwarded call
// blocks unboundedly (the longest, LockedVerbs::DestroyQp, waits at most its
// bounded rounds), so Kill() is bounded too. mu_ is a leaf lock: nothing
// is acquired while it is held. Forwarding is as thread-safe as `inner`.
// What must stay true: after Kill() returned no call reaches `inner`; while
// paused no call starts; otherwise every call reaches it unchanged.
#ifndef FERRY_SIM_WORLD_PROCESS_VERBS_H_
#define FERRY_SIM_WORLD_PROCESS_VERBS_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "hal/verbs.h"

namespace ferry::simworld {

class ProcessVerbs final : public hal::Verbs {
 public:
  explicit ProcessVerbs(hal::Verbs* inner) : in_(inner) {}
  void Kill() {
    base::MutexLock l(&mu_);
    dead_ = true;
    resumed_.SignalAll();
    while (in_flight_ > 0) drained_.Wait(&mu_);
  }
  bool dead() {
    base::MutexLock l(&mu_);
    return dead_;
  }
  // Pause number `id` (increasing per process) starts; it ends at
  // Resume(id) unless a later pause superseded it (then Resume(id) is a
  // no-op returning false, and the later pause's Resume ends it).
  void Pause(uint64_t id) {
    base::MutexLock l(&mu_);
    paused_ = true;
    pause_id_ = id;
  }
  bool Resume(uint64_t id) {
    base::MutexLock l(&mu_);
    if (!paused_ || id != pause_id_) return false;
    paused_ = false;
    resumed_.SignalAll();
    return true;
  }
  // Ends whichever pause is in force.
  void EndPause() {
    base::MutexLock l(&mu_);
    paused_ = false;
    resumed_.SignalAll();
  }

  absl::StatusOr<std::vector<hal::DeviceInfo>> ListDevices() override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->ListDevices();
  }
  absl::StatusOr<hal::ContextHandle> OpenDevice(std::string_view name) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->OpenDevice(name);
  }
  absl::Status CloseDevice(hal::ContextHandle ctx) override {
    Pass p(this);
    return p.live ? in_->CloseDevice(ctx) : absl::OkStatus();
  }
  absl::StatusOr<hal::DeviceAttr> QueryDevice(hal::ContextHandle ctx) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->QueryDevice(ctx);
  }
  absl::StatusOr<hal::PortAttr> QueryPort(hal::ContextHandle ctx, uint8_t port) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->QueryPort(ctx, port);
  }
  absl::StatusOr<hal::Gid> QueryGid(hal::ContextHandle ctx, uint8_t port, int index) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->QueryGid(ctx, port, index);
  }
  absl::StatusOr<hal::GidEntry> QueryGidEntry(hal::ContextHandle ctx, uint8_t port,
                                              int index) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->QueryGidEntry(ctx, port, index);
  }
  absl::StatusOr<hal::PdHandle> AllocPd(hal::ContextHandle ctx) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->AllocPd(ctx);
  }
  absl::Status DeallocPd(hal::PdHandle pd) override {
    Pass p(this);
    return p.live ? in_->DeallocPd(pd) : absl::OkStatus();
  }
  absl::StatusOr<hal::MrInfo> RegMr(hal::PdHandle pd, void* addr, size_t length,
                                    uint32_t access) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->RegMr(pd, addr, length, access);
  }
  absl::Status DeregMr(hal::MrHandle mr) override {
    Pass p(this);
    return p.live ? in_->DeregMr(mr) : absl::OkStatus();
  }
  absl::StatusOr<hal::MwInfo> AllocMw(hal::PdHandle pd, hal::MwType type) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->AllocMw(pd, type);
  }
  absl::Status DeallocMw(hal::MwHandle mw) override {
    Pass p(this);
    return p.live ? in_->DeallocMw(mw) : absl::OkStatus();
  }
  absl::StatusOr<hal::CompChannelHandle> CreateCompChannel(hal::ContextHandle ctx) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->CreateCompChannel(ctx);
  }
  absl::Status DestroyCompChannel(hal::CompChannelHandle ch) override {
    Pass p(this);
    return p.live ? in_->DestroyCompChannel(ch) : absl::OkStatus();
  }
  absl::StatusOr<hal::CqHandle> GetCqEvent(hal::CompChannelHandle ch) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->GetCqEvent(ch);
  }
  void AckCqEvents(hal::CqHandle cq, uint32_t n) override {
    Pass p(this);
    if (p.live) in_->AckCqEvents(cq, n);
  }
  absl::StatusOr<hal::CqInfo> CreateCq(hal::ContextHandle ctx, uint32_t cqe,
                                       hal::CompChannelHandle ch) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->CreateCq(ctx, cqe, ch);
  }
  absl::Status DestroyCq(hal::CqHandle cq) override {
    Pass p(this);
    return p.live ? in_->DestroyCq(cq) : absl::OkStatus();
  }
  absl::StatusOr<uint32_t> PollCq(hal::CqHandle cq, absl::Span<hal::WorkCompletion> out) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->PollCq(cq, out);
  }
  absl::Status ReqNotifyCq(hal::CqHandle cq, bool solicited_only) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->ReqNotifyCq(cq, solicited_only);
  }
  absl::StatusOr<hal::QpInfo> CreateQp(hal::PdHandle pd, const hal::QpInitAttr& init) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->CreateQp(pd, init);
  }
  absl::Status ModifyQp(hal::QpHandle qp, const hal::QpAttr& attr, uint32_t mask) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->ModifyQp(qp, attr, mask);
  }
  absl::StatusOr<hal::QpAttr> QueryQp(hal::QpHandle qp) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->QueryQp(qp);
  }
  absl::Status DestroyQp(hal::QpHandle qp) override {
    Pass p(this);
    return p.live ? in_->DestroyQp(qp) : absl::OkStatus();
  }
  hal::PostResult PostSend(hal::QpHandle qp, absl::Span<const hal::SendWr> chain) override {
    Pass p(this);
    if (!p.live) return hal::PostResult{Dead(), 0};
    return in_->PostSend(qp, chain);
  }
  hal::PostResult PostRecv(hal::QpHandle qp, absl::Span<const hal::RecvWr> chain) override {
    Pass p(this);
    if (!p.live) return hal::PostResult{Dead(), 0};
    return in_->PostRecv(qp, chain);
  }
  absl::StatusOr<hal::AsyncEvent> GetAsyncEvent(hal::ContextHandle ctx) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->GetAsyncEvent(ctx);
  }
  void AckAsyncEvent(const hal::AsyncEvent& e) override {
    Pass p(this);
    if (p.live) in_->AckAsyncEvent(e);
  }
  absl::StatusOr<int> CompChannelFd(hal::CompChannelHandle ch) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->CompChannelFd(ch);
  }
  absl::StatusOr<int> AsyncEventFd(hal::ContextHandle ctx) override {
    Pass p(this);
    if (!p.live) return Dead();
    return in_->AsyncEventFd(ctx);
  }

 private:
  // One forwarded call: waits out a pause, then counts itself in flight
  // unless the process is dead (live == false: do not touch `inner`).
  class Pass {
   public:
    explicit Pass(ProcessVerbs* pv) : pv_(pv) {
      base::MutexLock l(&pv_->mu_);
      while (pv_->paused_ && !pv_->dead_) pv_->resumed_.Wait(&pv_->mu_);
      live = !pv_->dead_;
      if (live) ++pv_->in_flight_;
    }
    ~Pass() {
      if (!live) return;
      base::MutexLock l(&pv_->mu_);
      if (--pv_->in_flight_ == 0) pv_->drained_.SignalAll();
    }
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    bool live = false;

   private:
    ProcessVerbs* const pv_;
  };

  static absl::Status Dead() { return absl::UnavailableError("the process exited"); }
  hal::Verbs* const in_;
  base::Mutex mu_;
  base::CondVar resumed_;  // paused_ cleared or dead_ set
  base::CondVar drained_;  // in_flight_ reached 0
  bool dead_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t pause_id_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ferry::simworld

#endif  // FERRY_SIM_WORLD_PROCESS_VERBS_H_
