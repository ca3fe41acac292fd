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

struct SchedulerPlan {
  PickMode mode = PickMode::kUniform;
  std::vector<uint32_t> swarm_weights;     // per actor, kSwarm only (0 = starved unless alone)
  std::vector<uint64_t> pct_change_steps;  // sorted, kPct only
  std::string ToString() const;
};

enum class RunOutcome : uint8_t { kDone, kDeadlock, kStepLimit, kTimeLimit };

struct RunResult {
  RunOutcome outcome = RunOutcome::kDone;
  uint64_t steps = 0;
  uint64_t end_time_ns = 0;
  std::string detail;  // for a deadlock: which actors still have work
};

class Scheduler {
 public:
  // The scheduler draws its plan and every choice from `prng`.
  Scheduler(Prng prng, VirtualClock* clock, Trace* trace);

  // Registers an actor (not owned). Call before MakePlan/Run.
  void AddActor(Actor* actor);
  // Draws the plan for the registered actors from the seed; `force` pins a
  // mode (for tests), else the mode itself is drawn.
  const SchedulerPlan& MakePlan(std::optional<PickMode> force = std::nullopt,
                                uint32_t pct_depth = 3, uint64_t pct_horizon_steps = 10000);
  const SchedulerPlan& plan() const { return plan_; }

  // Runs until `done()` is true (kDone), a deadlock, `step_max` steps, or
  // virtual time passes `time_max_ns`.
  RunResult Run(const std::function<bool()>& done, uint64_t step_max, uint64_t time_max_ns);

  // Runs exactly one step (or one time jump); false when deadlocked/idle
  // with no timers.
  bool StepOnce();

 private:
  Actor* Pick(const std::vector<size_t>& runnable);
  Prng prng_;
  VirtualClock* clock_;
  Trace* trace_;
  std::vector<Actor*> actors_;
  std::vector<uint64_t> priority_;  // kPct
  SchedulerPlan plan_;
  size_t next_change_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace ferry::sim

#endif  // FERRY_SIM_SCHEDULER_H_
