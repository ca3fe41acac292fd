// sim/world/engine_runtime.h: the simulation runtime: each worker, the
// listener and the async reader of an engine become sim::Actors stepped by
// the scheduler (docs/design.md section 4, "Steps and runtimes"; C5). It
// lives in sim/world, which may see both the engine and the simulator; the
// engine knows nothing of it (scripts/check-layers).
//
// Owns: the actors, the seeded phase permutation of worker steps, and the
// observer that binds every CQ and QP to its owner's actor in the simulated
// RNIC (so a verbs call on it from any other actor fails the run) and
// records lifecycle events for scenario assertions.
//
// Thread safety: none (the simulated world is single-threaded).
// What must stay true: before each step the fabric is told which actor runs
// (set_current_actor), and reset to 0 after; worker phases are permuted per
// step from the seed, so correctness cannot depend on their order; every
// wait of a worker is its wait set (Runnable/NextWakeNs derive from it).
#ifndef FERRY_SIM_WORLD_ENGINE_RUNTIME_H_
#define FERRY_SIM_WORLD_ENGINE_RUNTIME_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "engine/inspect.h"
#include "sim/net/sim_network.h"
#include "sim/prng.h"
#include "sim/rnic/fabric.h"
#include "sim/scheduler.h"
#include "sim/trace.h"

namespace ferry::simworld {

using engine::LifecycleObserver;
using engine::SteppedEngine;

struct LifecycleRecord {
  uint64_t time_ns = 0;
  uint32_t worker = 0;
  std::string kind;
  std::string key;
  uint64_t a = 0;
  uint64_t b = 0;
};

// Binds owners in the fabric and records events. Create before the engine
// (pass it as the observer), then call Attach(engine).
class SimObserver final : public LifecycleObserver {
 public:
  SimObserver(sim::Fabric* fabric, sim::Trace* trace, uint32_t first_actor_id, std::string tag)
      : fabric_(fabric), trace_(trace), first_actor_(first_actor_id), tag_(std::move(tag)) {}
  void OnEvent(uint32_t worker, std::string_view kind, std::string_view key, uint64_t a,
               uint64_t b) override;
  void OnQpCreated(uint32_t worker, hal::QpHandle qp) override;
  void OnCqCreated(uint32_t worker, hal::CqHandle cq) override;
  void OnTaskTimeout(uint32_t worker, const engine::Task& task) override;
  // The oracle's view at the moment of an event, on the engine's own step
  // (before anything else moves): called with every record as it is made,
  // and with kind "timeout_task" (not recorded, not traced) and the task
  // right before its "timeout" event.
  using Hook = std::function<void(const LifecycleRecord&, const engine::Task*)>;
  void set_hook(Hook hook) { hook_ = std::move(hook); }
  // The process exited: from now on nothing is recorded, traced or hooked
  // (its engine's teardown runs against a dead RNIC view).
  void Detach() {
    detached_ = true;
    hook_ = nullptr;
  }
  // An event the oracle saw (kind "publish": key "task <label>", a: the
  // status, b: the label), recorded in order with the engine's events but
  // never traced (the trace hash is the engine's and the RNIC's alone).
  void RecordOracle(std::string_view kind, std::string key, uint64_t a, uint64_t b) {
    records_.push_back(
        LifecycleRecord{fabric_->NowNs(), kOracleWorker, std::string(kind), std::move(key), a, b});
  }
  static constexpr uint32_t kOracleWorker = ~uint32_t{0};
  uint32_t WorkerActor(uint32_t w) const { return first_actor_ + w; }
  const std::vector<LifecycleRecord>& records() const { return records_; }
  const std::string& tag() const { return tag_; }
  // The QPs of the endpoint an "ep_create" record named (worker, key,
  // generation): those its worker created since its previous record (the
  // engine reports an endpoint's QPs right before its "ep_create"). Empty
  // when unknown or destroyed ("ep_destroyed" forgets them).
  std::span<const hal::QpHandle> QpsOf(uint32_t worker, const std::string& key, uint64_t gen) const;

 private:
  sim::Fabric* fabric_;
  sim::Trace* trace_;
  uint32_t first_actor_;
  std::string tag_;
  std::vector<LifecycleRecord> records_;
  Hook hook_;
  bool detached_ = false;
  // QPs created by each worker (by index) since its last record; an
  // "ep_create" takes them for its endpoint.
  std::vector<std::vector<hal::QpHandle>> fresh_qps_;
  std::map<std::tuple<uint32_t, std::string, uint64_t>, std::vector<hal::QpHandle>> endpoint_qps_;
};

// How a worker actor with WRs outstanding (WaitSet::poll_now) waits:
// kSpin runs it at every step (a runtime without completion channels,
// polling), kCqe only once one of its CQs holds a CQE or overran (an owner
// asleep on its completion channels, as the threaded runtime on real
// verbs). kCqe is ferry-sim's default; kSpin replays the seeds found before
// it (part of the replay key).
enum class WakeModel : uint8_t { kSpin, kCqe };
std::string_view WakeModelName(WakeModel w);

// Probe wakes, the sweep's judge of lost wake-ups (docs/simulator.md, "Lost
// wake-ups"). A worker that ends a step asleep (not Runnable: its wait set
// asks for nothing now) is, with probability 1/2, stepped once more at a
// drawn later time although nothing woke it: a spurious wake, which a real
// owner's completion channel or eventfd may deliver at any time. Such a
// step must find nothing to post: work that became postable while the owner
// slept, with no event and no timer of its wait set to say so, waits for an
// unrelated wake or its task's deadline (session 35's cooldown bug); so
// must a timer's work (a destroy give-up) whose timer is missing. A probe
// step that posts a WR or records a lifecycle event (a retire, a give-up,
// a publish) is recorded here and fails the run.
struct WakeProbes {
  uint64_t probes = 0;  // probe steps taken
  uint64_t lost = 0;    // of them, steps that posted a WR or recorded an event
  std::string first;    // the first lost wake-up, described
};

class SimRuntime {
 public:
  // Actor ids first_actor_id .. +workers+1 (workers, listener, async).
  // `probes` non-null turns probe wakes on (they draw from a stream of
  // their own, seeded from `prng` then, so runs without them are as before).
  SimRuntime(SteppedEngine* engine, sim::Fabric* fabric, sim::SimControlNet* net,
             SimObserver* observer, uint32_t first_actor_id, sim::Prng prng,
             WakeModel wake = WakeModel::kSpin, WakeProbes* probes = nullptr);
  ~SimRuntime();
  void AddTo(sim::Scheduler* scheduler);
  // Restarts the phase-permutation stream from `seed`.
  void Reseed(uint64_t seed) { prng_.Reseed(seed); }
  // The engine process died: its actors stop (the scheduler keeps them).
  void Kill() { dead_ = true; }
  // Orderly stop (after the workers drained): the actors stop and the
  // workers' CQs return to the engine's own thread (actor 0), which
  // disables the contexts.
  void Stop();
  bool dead() const { return dead_; }
  SteppedEngine* engine() const { return engine_; }
  size_t actor_count() const { return actors_.size(); }
  sim::Actor* actor(size_t i) const { return actors_[i].get(); }

 private:
  class WorkerActor;
  class ListenerActor;
  class AsyncActor;
  friend class WorkerActor;
  friend class ListenerActor;
  friend class AsyncActor;

  SteppedEngine* engine_;
  sim::Fabric* fabric_;
  sim::SimControlNet* net_;
  uint32_t first_actor_;
  sim::Prng prng_;
  WakeModel wake_;
  // nullptr: no probe wakes (the default; every run found before them
  // replays). Else the world's record, and the probes' own draws.
  WakeProbes* probes_;
  sim::Prng probe_prng_;
  SimObserver* observer_;  // nullptr when the engine has none
  bool dead_ = false;
  std::vector<std::unique_ptr<sim::Actor>> actors_;
};

}  // namespace ferry::simworld

#endif  // FERRY_SIM_WORLD_ENGINE_RUNTIME_H_
