// sim/scheduler.h: the deterministic scheduler of the simulated world.
//
// Actors (engine workers, the simulated RNIC, the simulated control network,
// workload drivers) are stepped one at a time. At each step the scheduler
// picks among runnable actors:
//   - uniformly, or with per-seed swarm weights (some actors favoured, some
//     starved), and
//   - PCT-style: actors carry priorities; the highest-priority runnable actor
//     runs, and at `pct_change_points` seeded step numbers the running
//     actor's priority drops below all others.
// The plan (mode, weights, change points) is drawn from the seed and printed
// by Plan::ToString().
// When no actor is runnable, virtual time jumps to the earliest of the
// clock's timers and the actors' NextWakeNs(); if there is none and some
// actor still HasWork(), the run is a deadlock ("no events, work remains").
//
// The plan, drawn from the scheduler's Prng by MakePlan():
//   - mode: drawn uniformly from {uniform, swarm, pct} unless forced;
//   - kSwarm: each actor's weight is 0 with probability 1/4, else uniform in
//     [1, kSwarmWeightMax]; a step picks runnable actor i with probability
//     w_i / sum(w) (uniformly if every runnable weight is 0);
//   - kPct (Burckhardt et al., depth d = pct_depth): initial priorities are a
//     seeded permutation of d .. d+n-1; c = min(d-1, horizon) distinct
//     change steps are drawn in [1, pct_horizon_steps]; when step k_i (the
//     i-th change step, 0-based) has run, the actor that ran it drops to
//     priority c-i (= d-1-i unless the horizon is shorter), below every
//     initial priority and every earlier change.
// Steps are counted from construction (1-based for change steps: step 1 is
// the first actor step). An actor whose NextWakeNs() is not after now must
// report Runnable(); such wake times are ignored when looking for a jump.
//
// Trace (stream kTraceStream for the scheduler's draws), events:
//   "plan" mode actors change_points | "timers" fired now_ns |
//   "step" actor cost_ns runnable | "pct_change" actor priority step |
//   "jump" from_ns to_ns | "stall" actors_with_work
//
// Thread safety: none. What must stay true: the choice at every step depends
// only on the seed and the actors' observable state; every choice is traced.
#ifndef FERRY_SIM_SCHEDULER_H_
#define FERRY_SIM_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "sim/prng.h"
#include "sim/trace.h"
#include "sim/virtual_clock.h"

namespace ferry::sim {

class Actor {
 public:
  virtual ~Actor() = default;
  virtual std::string_view name() const = 0;
  // Can Step() make progress now?
  virtual bool Runnable() = 0;
  // Does one bounded unit of work. Returns the virtual time it costs (ns).
  virtual uint64_t Step() = 0;
  // Earliest virtual time at which this actor becomes runnable by itself
  // (a deadline it waits on), if any.
  virtual std::optional<uint64_t> NextWakeNs() { return std::nullopt; }
  // Work not yet done (used for deadlock detection).
  virtual bool HasWork() { return false; }
};

enum class PickMode : uint8_t { kUniform, kSwarm, kPct };
std::string_view PickModeName(PickMode mode);

struct SchedulerPlan {
  PickMode mode = PickMode::kUniform;
  std::vector<uint32_t> swarm_weights;     // per actor, kSwarm only (0 = starved unless alone)
  std::vector<uint64_t> pct_change_steps;  // sorted, kPct only
  std::vector<uint64_t> pct_priorities;    // initial, per actor, kPct only
  // E.g. "mode=swarm weights=[3,0,12]" or
  // "mode=pct priorities=[4,3,5] change_steps=[17,402]".
  std::string ToString() const;
};

enum class RunOutcome : uint8_t { kDone, kDeadlock, kStepLimit, kTimeLimit };
std::string_view RunOutcomeName(RunOutcome outcome);

struct RunResult {
  RunOutcome outcome = RunOutcome::kDone;
  uint64_t steps = 0;
  uint64_t end_time_ns = 0;
  std::string detail;  // for a deadlock: which actors still have work
};

class Scheduler {
 public:
  static constexpr uint32_t kTraceStream = 0;
  static constexpr uint32_t kSwarmWeightMax = 64;
  static constexpr size_t kActorsMax = 4096;

  // The scheduler draws its plan and every choice from `prng`. `clock` must
  // outlive the scheduler; `trace` may be null (untraced), else it must
  // outlive the scheduler and `prng` is attached to it as kTraceStream.
  Scheduler(Prng prng, VirtualClock* clock, Trace* trace);

  // Restarts the choice stream from `seed` (the plan drawn stays).
  void Reseed(uint64_t seed) { prng_.Reseed(seed); }
  // Registers an actor (not owned). Call before MakePlan/Run.
  void AddActor(Actor* actor);
  // Draws the plan for the registered actors from the seed; `force` pins a
  // mode (for tests), else the mode itself is drawn.
  const SchedulerPlan& MakePlan(std::optional<PickMode> force = std::nullopt,
                                uint32_t pct_depth = 3, uint64_t pct_horizon_steps = 10000);
  const SchedulerPlan& plan() const { return plan_; }

  // Runs until `done()` is true (kDone), a deadlock, `step_max` steps (or
  // `step_max` time jumps), or virtual time would pass `time_max_ns` (a jump
  // beyond it is not taken). Makes the plan first if MakePlan was not called.
  // RunResult::steps counts the steps of this call.
  RunResult Run(const std::function<bool()>& done, uint64_t step_max, uint64_t time_max_ns);

  // Runs exactly one step (or one time jump); false when deadlocked/idle
  // with no timers.
  bool StepOnce();

  uint64_t steps() const { return steps_; }
  // Index (in AddActor order) of the actor that ran the last step; nullopt
  // before the first step and after a time jump (no actor ran).
  std::optional<size_t> last_actor() const { return last_actor_; }
  // Virtual time at which the last step began (before its cost was
  // charged): the time the actor itself saw during that step.
  uint64_t last_step_start_ns() const { return last_step_start_ns_; }

 private:
  enum class StepKind : uint8_t { kStepped, kJumped, kIdle, kPastTimeLimit };
  StepKind StepImpl(uint64_t time_max_ns);
  // Index (into actors_) of the actor to run among runnable_ (not empty).
  size_t Pick();
  void TraceEvent(std::string_view kind, uint64_t a, uint64_t b, uint64_t c);
  std::string ActorsWithWork();
  Prng prng_;
  VirtualClock* clock_;
  Trace* trace_;
  std::vector<Actor*> actors_;
  std::vector<uint64_t> priority_;  // kPct
  SchedulerPlan plan_;
  std::vector<size_t> runnable_;  // scratch, reused every step
  bool planned_ = false;
  size_t next_change_ = 0;
  uint64_t steps_ = 0;
  uint64_t jumps_ = 0;
  std::optional<size_t> last_actor_;
  uint64_t last_step_start_ns_ = 0;
};

}  // namespace ferry::sim

#endif  // FERRY_SIM_SCHEDULER_H_
