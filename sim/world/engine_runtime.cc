// sim/world/engine_runtime.cc: engine actors for the deterministic scheduler
// (see engine_runtime.h).
#include "sim/world/engine_runtime.h"

#include <algorithm>
#include <span>

#include "absl/strings/str_cat.h"
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
// A probe step's work is a lost wake-up only when the wait set's own timer
// was further away than this (see WorkerActor::Judge).
constexpr uint64_t kProbeSlackNs = 100'000;
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
    return Due() || (probe_at_ns_ && *probe_at_ns_ <= rt_->fabric_->NowNs());
  }
  uint64_t Step() override {
    // With probe wakes on: stepped for the probe alone (its wait set asked
    // for nothing now)? Then what the step will be judged against.
    std::optional<Asleep> asleep;
    if (rt_->probes_ != nullptr && !Due())
      asleep = Asleep{rt_->engine_->StatsOf(w_).posted,
                      rt_->observer_ ? rt_->observer_->records().size() : 0, ws_.deadline_ns,
                      ws_.poll_now};
    probe_at_ns_.reset();
    first_ = false;
    PhaseOrder order = kDefaultPhases;
    rt_->prng_.Shuffle(std::span<Phase>(order.data(), order.size()));
    rt_->fabric_->set_current_actor(rt_->first_actor_ + w_);
    ws_ = rt_->engine_->StepWorker(w_, order);
    rt_->fabric_->set_current_actor(0);
    if (rt_->probes_ != nullptr) {
      if (asleep) Judge(*asleep);
      if (!Due()) Sleep();
    }
    return kWorkerStepNs;
  }
  std::optional<uint64_t> NextWakeNs() override {
    if (rt_->dead_) return std::nullopt;
    if (!probe_at_ns_) return ws_.deadline_ns;
    return ws_.deadline_ns ? std::min(*ws_.deadline_ns, *probe_at_ns_) : *probe_at_ns_;
  }
  bool HasWork() override {
    return !rt_->dead_ && (ws_.poll_now || rt_->engine_->InboxSize(w_) > 0);
  }

 private:
  // The wait set (and the first step) make a step due now.
  bool Due() {
    if (ws_.work_now || ws_.poll_empty || first_) return true;
    if (ws_.poll_now && rt_->wake_ == WakeModel::kSpin) return true;
    if (ws_.deadline_ns && *ws_.deadline_ns <= rt_->fabric_->NowNs()) return true;
    if (rt_->engine_->InboxSize(w_) > 0) return true;
    // kCqe: WRs outstanding make a poll due once a CQE is there; posted
    // receive WRs do under both models (a peer's SEND completes them).
    return (ws_.poll_now || ws_.recv_posted) && rt_->fabric_->OwnerCqReady(rt_->first_actor_ + w_);
  }
  // The step ended asleep: a probe wake at a drawn later time, with
  // probability 1/2, from 1 us to about 0.26 s (log-uniform, so the short
  // timers of a rail's cooldown and the long ones of a task's deadline are
  // both crossed).
  void Sleep() {
    sim::Prng& p = rt_->probe_prng_;
    slept_at_ns_ = rt_->fabric_->NowNs();
    if (!p.Chance(sim::Ratio{1, 2})) return;
    const uint64_t scale_ns = uint64_t{1000} << p.Below(18);
    probe_at_ns_ = slept_at_ns_ + scale_ns + p.Below(scale_ns);
  }
  // What a probe step is judged against: the worker's counts and wait set
  // before it.
  struct Asleep {
    uint64_t posted = 0;  // WorkerStats::posted
    size_t records = 0;   // the observer's records
    std::optional<uint64_t> timer_ns;
    bool poll_now = false;
  };
  void Judge(const Asleep& before) {
    WakeProbes& w = *rt_->probes_;
    ++w.probes;
    const uint64_t posted = rt_->engine_->StatsOf(w_).posted - before.posted;
    const SimObserver* o = rt_->observer_;
    const size_t records = o != nullptr ? o->records().size() : 0;
    if (posted == 0 && records == before.records) return;
    // Work the owner's own timer would have found within the slack is a
    // short poll by design (a parked context's re-enable by another owner
    // is looked for every 100 us: kParkedRecheckNs), not a lost wake-up.
    const uint64_t now = rt_->fabric_->NowNs();
    if (before.timer_ns && *before.timer_ns <= now + kProbeSlackNs) return;
    if (++w.lost > 1) return;
    // The step's event kinds in order, a run of one kind as "kind xN".
    std::string events;
    for (size_t i = before.records; i < records;) {
      size_t j = i + 1;
      while (j < records && o->records()[j].kind == o->records()[i].kind) ++j;
      absl::StrAppend(&events, events.empty() ? "" : " ", o->records()[i].kind);
      if (j - i > 1) absl::StrAppend(&events, " x", j - i);
      i = j;
    }
    w.first = absl::StrCat(
        "lost wake-up: ", o != nullptr ? o->tag() : "engine", " worker ", w_, " asleep since ",
        slept_at_ns_, " ns, stepped by a probe wake at ", now, " ns, posted ", posted,
        " WR(s) and recorded [", events, "]; its wait set: timer ",
        before.timer_ns ? absl::StrCat(*before.timer_ns, " ns") : std::string("none"),
        ", WRs outstanding ", before.poll_now ? "yes" : "no");
  }

  SimRuntime* rt_;
  uint32_t w_;
  std::string name_;
  WaitSet ws_;
  bool first_ = true;
  std::optional<uint64_t> probe_at_ns_;  // probe wakes only
  uint64_t slept_at_ns_ = 0;
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
                       WakeModel wake, WakeProbes* probes)
    : engine_(engine),
      fabric_(fabric),
      net_(net),
      first_actor_(first_actor_id),
      prng_(std::move(prng)),
      wake_(wake),
      probes_(probes),
      probe_prng_(0),
      observer_(observer) {
  if (probes_ != nullptr) probe_prng_ = prng_.Fork();
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
