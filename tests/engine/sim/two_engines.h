// tests/engine/sim/two_engines.h: a simulated world with two engine
// processes (hosts h0 and h1, one NIC "sim0" each) on one Fabric and one
// SimNetwork, stepped by one Scheduler; helpers for segments, transfers,
// restarts, shutdown and the C9 leak check.
//
// Thread safety: none (single-threaded simulation).
// What must stay true: every engine actor is registered once, through a
// fixed per-host slot that forwards to the host's current runtime, so a
// restarted process gets new actors without re-planning the scheduler.
//
// The oracle (DESIGN.md section 6) runs after every scheduler step of
// RunUntil: a task submitted through Submit() has its local buffer Claim()ed
// in the fabric's shadow memory and Release()d in the step it publishes (so a
// DMA after publish is a `local_after_release` violation naming the task);
// its published status never changes and no slice word leaves a final state
// (each slice resolves once, each task publishes once); and for every CQ of
// every live engine, CQEs present + producible <= engine quota <= CQ size.
// The first failure is kept in oracle_failure() (with the virtual time).
#ifndef FERRY_TESTS_ENGINE_SIM_TWO_ENGINES_H_
#define FERRY_TESTS_ENGINE_SIM_TWO_ENGINES_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/mutation.h"
#include "engine/engine_impl.h"
#include "engine/owner.h"
#include "engine/runtime_sim.h"
#include "sim/net/sim_network.h"
#include "sim/prng.h"
#include "sim/rnic/fabric.h"
#include "sim/scheduler.h"
#include "sim/trace.h"
#include "sim/virtual_clock.h"

namespace ferry::engine::testing {

// The engine config every sim scenario starts from: small queues and short
// timeouts so faults and retires happen within little virtual time.
inline EngineConfig ScenarioConfig() {
  EngineConfig c;
  c.workers = 2;
  c.qps_per_endpoint = 2;
  c.wr_depth = 16;
  c.cqe_limit = 1024;
  c.slice_size_bytes = 16 * 1024;
  c.handshake_timeout_ns = 1'000'000;
  c.handshake_retries = 8;
  c.slice_timeout_ns = 2'000'000'000;
  c.drain_timeout_ns = 1'000'000;
  c.destroy_backoff_min_ns = 10'000;
  c.destroy_backoff_max_ns = 1'000'000;
  return c;
}

inline constexpr size_t kBufBytes = 1 << 20;

struct HostState {
  std::string addr;
  std::unique_ptr<hal::Verbs> verbs;
  std::unique_ptr<sim::SimControlNet> net;
  std::unique_ptr<SimEntropy> entropy;
  std::unique_ptr<SimObserver> obs;
  std::unique_ptr<EngineImpl> engine;
  std::unique_ptr<SimRuntime> rt;
  std::vector<uint8_t> buf;
};

// Forwards to actor `i` of a host's current runtime (or sleeps when none).
class SlotActor final : public sim::Actor {
 public:
  SlotActor(HostState* h, size_t i, std::string name) : h_(h), i_(i), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  bool Runnable() override { return A() != nullptr && A()->Runnable(); }
  uint64_t Step() override { return A()->Step(); }
  std::optional<uint64_t> NextWakeNs() override {
    return A() == nullptr ? std::nullopt : A()->NextWakeNs();
  }
  bool HasWork() override { return A() != nullptr && A()->HasWork(); }

 private:
  sim::Actor* A() const {
    if (h_->rt == nullptr || h_->rt->dead() || i_ >= h_->rt->actor_count()) return nullptr;
    return h_->rt->actor(i_);
  }
  HostState* h_;
  size_t i_;
  std::string name_;
};

class TwoEngines {
 public:
  TwoEngines(uint64_t seed, sim::NetPlan plan, const base::Mutations& mutations,
             EngineConfig config, sim::FabricConfig fabric_config = MakeFabricConfig())
      : trace_(0),
        root_(seed),
        fabric_(fabric_config, root_.Fork(), &clock_, &trace_),
        net_(root_.Fork(), &clock_, &trace_, plan),
        sched_(root_.Fork(), &clock_, &trace_),
        mutations_(mutations),
        config_(config) {
    config_.devices = {"sim0"};
    for (uint32_t h = 0; h < 2; ++h) {
      hosts_[h].addr = absl::StrCat("h", h, ":1000");
      hosts_[h].buf.assign(kBufBytes, 0);
    }
    sched_.AddActor(&fabric_);
    sched_.AddActor(&net_);
    for (uint32_t h = 0; h < 2; ++h) {
      for (size_t i = 0; i < config_.workers + 2; ++i)
        slots_.push_back(std::make_unique<SlotActor>(&hosts_[h], i, absl::StrCat("h", h, "/", i)));
    }
    for (auto& s : slots_) sched_.AddActor(s.get());
    sched_.MakePlan(sim::PickMode::kUniform);
    for (uint32_t h = 0; h < 2; ++h) FERRY_CHECK(Start(h).ok());
  }

  static sim::FabricConfig MakeFabricConfig() {
    sim::FabricConfig fc;
    fc.hosts = 2;
    return fc;
  }

  absl::Status Start(uint32_t h) {
    HostState& hs = hosts_[h];
    auto bound = net_.Bind(hs.addr);
    if (!bound.ok()) return bound.status();
    hs.net = std::move(*bound);
    hs.verbs = fabric_.NewVerbs(h);
    hs.entropy = std::make_unique<SimEntropy>(root_.Fork());
    const uint32_t base = 1 + 100 * h + 1000 * restarts_;
    hs.obs = std::make_unique<SimObserver>(&fabric_, &trace_, base, hs.addr);
    EngineEnv env{hs.verbs.get(), hs.net.get(), &clock_, hs.entropy.get()};
    auto e = EngineImpl::Create(config_, env, &mutations_, hs.obs.get());
    if (!e.ok()) return e.status();
    hs.engine = std::move(*e);
    hs.rt = std::make_unique<SimRuntime>(hs.engine.get(), &fabric_, hs.net.get(), hs.obs.get(),
                                         base, root_.Fork());
    return hs.engine->RegisterMemory(hs.buf.data(), hs.buf.size());
  }

  // The process on host h dies (as exit: the RNIC closes its contexts, its
  // control endpoint goes away) and a new incarnation starts.
  absl::Status Restart(uint32_t h) {
    HostState& hs = hosts_[h];
    hs.rt->Kill();
    fabric_.RestartHost(h);
    FERRY_CHECK(net_.Restart(hs.addr).ok());
    // The dead process's objects are gone with it: nothing may call verbs
    // on their handles, so the engine object is abandoned, not destroyed.
    dead_.push_back(std::move(hs.rt));
    (void)hs.engine.release();
    (void)hs.net.release();
    dead_obs_.push_back(std::move(hs.obs));
    ++restarts_;
    return Start(h);
  }

  bool RunUntil(const std::function<bool()>& done, uint64_t time_max_ns) {
    sim::RunResult r = sched_.Run(
        [&] {
          OracleStep();
          return done();
        },
        5'000'000, clock_.NowNs() + time_max_ns);
    last_run_ = r;
    return r.outcome == sim::RunOutcome::kDone;
  }

  // ---------------------------------------------------------------- oracle
  struct Tracked {
    uint32_t host = 0;
    TaskId id;
    uint64_t label = 0;  // shadow owner id
    const uint8_t* addr = nullptr;
    uint64_t len = 0;
    std::shared_ptr<const Task> task;
    TaskStatus published = TaskStatus::kPending;
    uint64_t publish_ns = 0;
    std::vector<bool> slice_final;
  };

  // Submits through host h's engine and tracks each accepted task.
  SubmitResult Submit(uint32_t h, BatchId batch, const std::vector<Request>& reqs) {
    EngineImpl& e = *hosts_[h].engine;
    SubmitResult sr = e.Submit(batch, absl::MakeConstSpan(reqs));
    if (!sr.status.ok()) return sr;
    for (size_t i = 0; i < sr.tasks.size(); ++i) {
      Tracked t;
      t.host = h;
      t.id = sr.tasks[i];
      t.label = tracked_.size() + 1;
      t.addr = reinterpret_cast<const uint8_t*>(reqs[i].local_addr);
      t.len = reqs[i].length_bytes;
      t.task = e.TaskOf(t.id);
      FERRY_CHECK(t.task != nullptr);
      t.slice_final.assign(t.task->slice_count(), false);
      fabric_.shadow().Claim(t.addr, t.len, t.label, absl::StrCat("h", h, " task ", t.label));
      tracked_.push_back(std::move(t));
    }
    return sr;
  }

  void OracleStep() {
    if (!oracle_failure_.empty()) return;
    for (Tracked& t : tracked_) {
      if (hosts_[t.host].rt == nullptr || hosts_[t.host].rt->dead()) continue;
      const TaskStatus st = t.task->status();
      for (uint32_t i = 0; i < t.task->slice_count(); ++i) {
        const bool fin = t.task->slice(i).Load().final();
        if (t.slice_final[i] && !fin)
          Fail(absl::StrCat("task ", t.label, " slice ", i, " left its final state"));
        t.slice_final[i] = fin;
      }
      if (t.published == TaskStatus::kPending) {
        if (IsTerminal(st)) {
          t.published = st;
          t.publish_ns = clock_.NowNs();
          fabric_.shadow().Release(t.addr, t.len);
        }
      } else if (st != t.published) {
        Fail(absl::StrCat("task ", t.label,
                          " published twice: ", std::string(TaskStatusName(t.published)), " then ",
                          std::string(TaskStatusName(st))));
      }
    }
    for (uint32_t h = 0; h < 2; ++h) {
      HostState& hs = hosts_[h];
      if (hs.rt == nullptr || hs.rt->dead() || hs.engine == nullptr) continue;
      for (auto& wk : hs.engine->workers()) {
        for (hal::CqHandle cq : wk->OwnedCqs()) {
          const CqQuota* q = wk->QuotaOf(cq);
          auto truth = fabric_.TruthOf(cq);
          if (q == nullptr || !truth.ok() || truth->errored) continue;
          const uint64_t reserved = static_cast<uint64_t>(q->reserved());
          max_quota_ = std::max(max_quota_, reserved);
          if (truth->present + truth->producible > reserved || reserved > truth->capacity)
            Fail(absl::StrCat("quota: h", h, " w", wk->id(), " cq ", cq.id,
                              " present=", truth->present, " producible=", truth->producible,
                              " reserved=", reserved, " capacity=", truth->capacity));
        }
      }
    }
  }
  void Fail(std::string why) {
    if (oracle_failure_.empty())
      oracle_failure_ = absl::StrCat("oracle at ", clock_.NowNs(), " ns: ", why);
  }
  const std::string& oracle_failure() const { return oracle_failure_; }
  const std::vector<Tracked>& tracked() const { return tracked_; }
  const Tracked* TrackedOf(uint32_t h, TaskId id) const {
    for (const Tracked& t : tracked_)
      if (t.host == h && t.id.batch.id == id.batch.id && t.id.index == id.index) return &t;
    return nullptr;
  }
  uint64_t max_quota() const { return max_quota_; }
  // Rolling hash of every traced event and PRNG draw (DESIGN.md section 7).
  uint64_t trace_hash() const { return trace_.hash(); }
  // Completed tasks' bytes: the caller's check; "" when all are right.
  // Everything the oracle and fabric saw: "" when clean.
  std::string OracleAndViolations() const {
    std::string out = oracle_failure_;
    if (std::string v = Violations(); !v.empty()) out += " violations: " + v;
    return out;
  }

  // Opens host `to`'s segment from host `from` (running the world).
  absl::StatusOr<SegmentHandle> Open(uint32_t from, uint32_t to) {
    EngineImpl& e = *hosts_[from].engine;
    auto t = e.OpenSegmentAsync(hosts_[to].addr);
    if (!t.ok()) return t.status();
    std::optional<SegmentHandle> h;
    absl::Status err;
    RunUntil(
        [&] {
          auto p = e.PollOpenSegment(*t);
          if (!p.ok()) {
            err = p.status();
            return true;
          }
          h = *p;
          return h.has_value();
        },
        10'000'000'000);
    if (!err.ok()) return err;
    if (!h) return absl::DeadlineExceededError("open did not finish");
    return *h;
  }

  // Shuts both engines down and returns "" when nothing leaked (C9), else
  // what leaked.
  std::string ShutdownAndCheckLeaks() {
    for (auto& h : hosts_) h.engine->BeginShutdown();
    const bool drained = RunUntil(
        [&] { return hosts_[0].engine->WorkersDrained() && hosts_[1].engine->WorkersDrained(); },
        30'000'000'000);
    std::string out;
    if (!drained) {
      out += absl::StrCat("workers did not drain (",
                          std::string(sim::RunOutcomeName(last_run_.outcome)), " ",
                          last_run_.detail, "): ");
      for (auto& h : hosts_)
        for (auto& wk : h.engine->workers()) {
          out += absl::StrCat(h.addr, " w", wk->id(), " down=", wk->ShutDown(),
                              " live=", wk->LiveEndpoints(), " retiring=", wk->RetiringEndpoints(),
                              " inbox=", wk->InboxSize(), "; ");
          for (const std::string& r : wk->PendingReasons()) out += h.addr + " " + r + "; ";
        }
    }
    for (auto& h : hosts_) {
      h.rt->Stop();
      absl::Status s = h.engine->FinishShutdown();
      if (!s.ok()) out += absl::StrCat(h.addr, " FinishShutdown: ", s.ToString(), "; ");
      if (h.engine->ledger().LiveTotal() != 0)
        out += absl::StrCat(h.addr, " ledger: ", h.engine->ledger().ToString(), "; ");
    }
    for (auto k : {sim::ObjectKind::kContext, sim::ObjectKind::kPd, sim::ObjectKind::kMr,
                   sim::ObjectKind::kCompChannel, sim::ObjectKind::kCq, sim::ObjectKind::kQp}) {
      if (fabric_.LiveCount(k) != 0)
        out += absl::StrCat("sim live ", std::string(sim::ObjectKindName(k)), "=",
                            fabric_.LiveCount(k), "; ");
    }
    return out;
  }

  std::string Violations() const {
    std::string out;
    for (const auto& v : fabric_.violations())
      out += absl::StrCat(std::string(sim::ViolationKindName(v.kind)), ": ", v.message, "; ");
    return out;
  }

  HostState& host(uint32_t h) { return hosts_[h]; }
  sim::Fabric& fabric() { return fabric_; }
  sim::SimNetwork& net() { return net_; }
  sim::VirtualClock& clock() { return clock_; }
  const sim::RunResult& last_run() const { return last_run_; }

 private:
  sim::VirtualClock clock_;
  sim::Trace trace_;
  sim::Prng root_;
  sim::Fabric fabric_;
  sim::SimNetwork net_;
  sim::Scheduler sched_;
  base::Mutations mutations_;
  EngineConfig config_;
  HostState hosts_[2];
  std::vector<std::unique_ptr<SlotActor>> slots_;
  std::vector<std::unique_ptr<SimRuntime>> dead_;
  std::vector<std::unique_ptr<SimObserver>> dead_obs_;
  uint32_t restarts_ = 0;
  sim::RunResult last_run_;
  std::vector<Tracked> tracked_;
  std::string oracle_failure_;
  uint64_t max_quota_ = 0;
};

}  // namespace ferry::engine::testing

#endif  // FERRY_TESTS_ENGINE_SIM_TWO_ENGINES_H_
