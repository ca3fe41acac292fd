// sim/world/engine_runtime.cc: engine actors for the deterministic scheduler
// (see engine_runtime.h).
#include "sim/world/engine_runtime.h"

#include <span>

#include "base/check.h"
#include "base/fnv1a.h"

namespace ferry::simworld {

using engine::kDefaultPhases;
using engine::Phase;
using engine::PhaseOrder;
using engine::WaitSet;

namespace {
constexpr uint64_t kWorkerStepNs = 500;
constexpr uint64_t kListenerStepNs = 200;
constexpr uint64_t kAsyncPeriodNs = 1'000'000;
}  // namespace

void SimObserver::OnEvent(uint32_t worker, std::string_view kind, std::string_view key, uint64_t a,
                          uint64_t b) {
  if (detached_) return;
  records_.push_back(
      LifecycleRecord{fabric_->NowNs(), worker, std::string(kind), std::string(key), a, b});
  if (trace_ != nullptr) trace_->Event(kind, base::Fnv1a64(key), a, b);
  // Only a record right after QP creations, and a destroy, touch the map.
  if (worker < fresh_qps_.size() && !fresh_qps_[worker].empty()) {
    if (kind == "ep_create") endpoint_qps_[{worker, std::string(key), a}] = fresh_qps_[worker];
    fresh_qps_[worker].clear();
  }
  if (kind == "ep_destroyed") endpoint_qps_.erase({worker, std::string(key), a});
  if (hook_) hook_(records_.back(), nullptr);
}

std::span<const hal::QpHandle> SimObserver::QpsOf(uint32_t worker, const std::string& key,
                                                  uint64_t gen) const {
  auto it = endpoint_qps_.find({worker, key, gen});
  if (it == endpoint_qps_.end()) return {};
  return it->second;
}

void SimObserver::OnTaskTimeout(uint32_t worker, const engine::Task& task) {
  if (detached_) return;
  if (hook_) hook_(LifecycleRecord{fabric_->NowNs(), worker, "timeout_task", "", 0, 0}, &task);
}

void SimObserver::OnQpCreated(uint32_t worker, hal::QpHandle qp) {
  if (detached_) return;
  FERRY_CHECK(fabric_->BindOwner(qp, WorkerActor(worker)).ok());
  if (worker >= fresh_qps_.size()) fresh_qps_.resize(worker + 1);
  fresh_qps_[worker].push_back(qp);
}

void SimObserver::OnCqCreated(uint32_t worker, hal::CqHandle cq) {
  FERRY_CHECK(fabric_->BindOwner(cq, WorkerActor(worker)).ok());
}

class SimRuntime::WorkerActor final : public sim::Actor {
 public:
  WorkerActor(SimRuntime* rt, uint32_t w) : rt_(rt), w_(w), name_("worker" + std::to_string(w)) {}
  std::string_view name() const override { return name_; }
  bool Runnable() override {
    if (rt_->dead_) return false;
    if (ws_.work_now || ws_.poll_empty || first_) return true;
    if (ws_.poll_now && rt_->wake_ == WakeModel::kSpin) return true;
    if (ws_.deadline_ns && *ws_.deadline_ns <= rt_->fabric_->NowNs()) return true;
    if (rt_->engine_->InboxSize(w_) > 0) return true;
    // kCqe: WRs outstanding make a poll due once a CQE is there; posted
    // receive WRs do under both models (a peer's SEND completes them).
    return (ws_.poll_now || ws_.recv_posted) && rt_->fabric_->OwnerCqReady(rt_->first_actor_ + w_);
  }
  uint64_t Step() override {
    first_ = false;
    PhaseOrder order = kDefaultPhases;
    rt_->prng_.Shuffle(std::span<Phase>(order.data(), order.size()));
    rt_->fabric_->set_current_actor(rt_->first_actor_ + w_);
    ws_ = rt_->engine_->StepWorker(w_, order);
    rt_->fabric_->set_current_actor(0);
    return kWorkerStepNs;
  }
  std::optional<uint64_t> NextWakeNs() override {
    if (rt_->dead_) return std::nullopt;
    return ws_.deadline_ns;
  }
  bool HasWork() override {
    return !rt_->dead_ && (ws_.poll_now || rt_->engine_->InboxSize(w_) > 0);
  }

 private:
  SimRuntime* rt_;
  uint32_t w_;
  std::string name_;
  WaitSet ws_;
  bool first_ = true;
};

class SimRuntime::ListenerActor final : public sim::Actor {
 public:
  explicit ListenerActor(SimRuntime* rt) : rt_(rt) {}
  std::string_view name() const override { return "listener"; }
  bool Runnable() override {
    if (rt_->dead_) return false;
    if (rt_->net_->pollable() > 0) return true;
    const std::optional<uint64_t> t = rt_->engine_->ListenerNextTickNs();
    return t.has_value() && *t <= rt_->fabric_->NowNs();
  }
  uint64_t Step() override {
    rt_->fabric_->set_current_actor(rt_->first_actor_ + rt_->engine_->worker_count());
    rt_->engine_->StepListener(16);
    rt_->fabric_->set_current_actor(0);
    return kListenerStepNs;
  }
  // The listener's tick (segment refetch resends) is due.
  std::optional<uint64_t> NextWakeNs() override {
    if (rt_->dead_) return std::nullopt;
    return rt_->engine_->ListenerNextTickNs();
  }

 private:
  SimRuntime* rt_;
};

class SimRuntime::AsyncActor final : public sim::Actor {
 public:
  explicit AsyncActor(SimRuntime* rt) : rt_(rt) {}
  std::string_view name() const override { return "async"; }
  bool Runnable() override { return !rt_->dead_ && rt_->fabric_->NowNs() >= next_ns_; }
  uint64_t Step() override {
    rt_->fabric_->set_current_actor(rt_->first_actor_ + 1 + rt_->engine_->worker_count());
    rt_->engine_->StepAsync(16);
    rt_->fabric_->set_current_actor(0);
    next_ns_ = rt_->fabric_->NowNs() + kAsyncPeriodNs;
    return kListenerStepNs;
  }
  std::optional<uint64_t> NextWakeNs() override {
    if (rt_->dead_) return std::nullopt;
    return next_ns_;
  }

 private:
  SimRuntime* rt_;
  uint64_t next_ns_ = 0;
};

std::string_view WakeModelName(WakeModel w) { return w == WakeModel::kSpin ? "spin" : "cqe"; }

SimRuntime::SimRuntime(SteppedEngine* engine, sim::Fabric* fabric, sim::SimControlNet* net,
                       SimObserver* observer, uint32_t first_actor_id, sim::Prng prng,
                       WakeModel wake)
    : engine_(engine),
      fabric_(fabric),
      net_(net),
      first_actor_(first_actor_id),
      prng_(std::move(prng)),
      wake_(wake) {
  (void)observer;
  const uint32_t workers = engine_->worker_count();
  for (uint32_t w = 0; w < workers; ++w)
    for (hal::CqHandle cq : engine_->WorkerCqs(w))
      FERRY_CHECK(fabric_->BindOwner(cq, first_actor_ + w).ok());
  for (uint32_t w = 0; w < workers; ++w) actors_.push_back(std::make_unique<WorkerActor>(this, w));
  actors_.push_back(std::make_unique<ListenerActor>(this));
  actors_.push_back(std::make_unique<AsyncActor>(this));
}

SimRuntime::~SimRuntime() = default;

void SimRuntime::Stop() {
  dead_ = true;
  const uint32_t workers = engine_->worker_count();
  for (uint32_t w = 0; w < workers; ++w)
    for (hal::CqHandle cq : engine_->WorkerCqs(w))
      if (cq.valid()) FERRY_CHECK(fabric_->BindOwner(cq, 0).ok());
}

void SimRuntime::AddTo(sim::Scheduler* scheduler) {
  for (auto& a : actors_) scheduler->AddActor(a.get());
}

}  // namespace ferry::simworld
