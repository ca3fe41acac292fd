// Tests of sim::Scheduler: uniform choice statistics within bounds, swarm
// weights skew the choice as planned (starved actors run only when alone),
// PCT change points change who runs exactly as planned, time jumps to the
// next timer or wake time when all actors are idle, a deadlock is reported
// naming the actors with work, limits stop the run, plans print and are a
// function of the seed, and every step is traced.
#include "sim/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sim/prng.h"
#include "sim/trace.h"
#include "sim/virtual_clock.h"

namespace ferry::sim {
namespace {

// Runnable while it has steps left (unbounded by default); records who ran.
class ToyActor final : public Actor {
 public:
  ToyActor(std::string name, std::vector<int>* log, int id, uint64_t cost_ns = 10,
           uint64_t steps_left = UINT64_MAX)
      : name_(std::move(name)), log_(log), id_(id), cost_ns_(cost_ns), steps_left_(steps_left) {}
  std::string_view name() const override { return name_; }
  bool Runnable() override { return steps_left_ > 0 && !blocked; }
  uint64_t Step() override {
    --steps_left_;
    ++steps;
    if (log_ != nullptr) log_->push_back(id_);
    return cost_ns_;
  }
  bool HasWork() override { return steps_left_ > 0; }

  bool blocked = false;
  uint64_t steps = 0;

 private:
  std::string name_;
  std::vector<int>* log_;
  int id_;
  uint64_t cost_ns_;
  uint64_t steps_left_;
};

struct World {
  explicit World(uint64_t seed, size_t n, size_t record_max = 0)
      : trace(record_max), sched(Prng(seed), &clock, &trace) {
    for (size_t i = 0; i < n; ++i) {
      actors.push_back(
          std::make_unique<ToyActor>(absl::StrCat("toy-", i), &log, static_cast<int>(i)));
      sched.AddActor(actors.back().get());
    }
  }
  VirtualClock clock;
  Trace trace;
  Scheduler sched;
  std::vector<int> log;
  std::vector<std::unique_ptr<ToyActor>> actors;
};

auto Never() {
  return [] { return false; };
}

TEST(Scheduler, UniformChoiceStatisticsWithinBounds) {
  for (uint64_t seed : {1ULL, 2ULL, 3ULL}) {
    World w(seed, 4);
    w.sched.MakePlan(PickMode::kUniform);
    const uint64_t n = 40000;
    const RunResult r = w.sched.Run(Never(), n, UINT64_MAX);
    EXPECT_EQ(r.outcome, RunOutcome::kStepLimit);
    EXPECT_EQ(r.steps, n);
    // Chi-square, 3 degrees of freedom, p = 0.001: 16.27; integer form
    // sum((c - e)^2) <= 17 * e with e = 10000.
    uint64_t sum = 0;
    for (auto& a : w.actors) {
      const uint64_t d = a->steps > 10000 ? a->steps - 10000 : 10000 - a->steps;
      sum += d * d;
    }
    EXPECT_LE(sum, 17U * 10000U) << "seed " << seed;
  }
}

TEST(Scheduler, SwarmWeightsSkewChoiceAsPlanned) {
  // Find (deterministically) a seed whose plan starves one actor and has
  // two different positive weights.
  std::optional<uint64_t> found;
  for (uint64_t seed = 1; seed < 200 && !found; ++seed) {
    World probe(seed, 4);
    const SchedulerPlan& plan = probe.sched.MakePlan(PickMode::kSwarm);
    const auto& ws = plan.swarm_weights;
    ASSERT_EQ(ws.size(), 4U);
    const bool has_zero = std::count(ws.begin(), ws.end(), 0U) == 1;
    const uint32_t max_w = *std::max_element(ws.begin(), ws.end());
    uint32_t min_pos = Scheduler::kSwarmWeightMax;
    for (uint32_t x : ws) {
      if (x > 0) min_pos = std::min(min_pos, x);
    }
    if (has_zero && max_w >= 3 * min_pos) found = seed;
  }
  ASSERT_TRUE(found.has_value());
  World w(*found, 4);
  const SchedulerPlan plan = w.sched.MakePlan(PickMode::kSwarm);
  const uint64_t n = 40000;
  w.sched.Run(Never(), n, UINT64_MAX);
  uint64_t total_w = 0;
  for (uint32_t x : plan.swarm_weights) total_w += x;
  for (size_t i = 0; i < 4; ++i) {
    const uint64_t c = w.actors[i]->steps;
    const uint64_t want_times_w = n * plan.swarm_weights[i];  // expected * total_w
    if (plan.swarm_weights[i] == 0) {
      EXPECT_EQ(c, 0U) << plan.ToString();
      continue;
    }
    // |c - n*w/W| <= 4 sigma <= 400 (sigma <= sqrt(n)/2 = 100).
    const uint64_t got_times_w = c * total_w;
    const uint64_t diff =
        got_times_w > want_times_w ? got_times_w - want_times_w : want_times_w - got_times_w;
    EXPECT_LE(diff, 400 * total_w) << "actor " << i << " " << plan.ToString();
  }
}

TEST(Scheduler, StarvedActorRunsWhenAlone) {
  World w(1, 2);
  w.sched.MakePlan(PickMode::kSwarm);
  // Make sure actor 0 is the only runnable one, whatever its weight.
  w.actors[1]->blocked = true;
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(w.sched.StepOnce());
  EXPECT_EQ(w.actors[0]->steps, 10U);
}

TEST(Scheduler, PctChangePointsChangeWhoRuns) {
  World w(77, 3);
  const SchedulerPlan& plan = w.sched.MakePlan(PickMode::kPct, /*pct_depth=*/3,
                                               /*pct_horizon_steps=*/100);
  ASSERT_EQ(plan.pct_change_steps.size(), 2U);
  ASSERT_EQ(plan.pct_priorities.size(), 3U);
  const uint64_t k1 = plan.pct_change_steps[0], k2 = plan.pct_change_steps[1];
  ASSERT_LT(k1, k2);
  ASSERT_LE(k2, 100U);
  // Rank the actors by initial priority (distinct values 3..5).
  std::vector<int> by_prio = {0, 1, 2};
  std::sort(by_prio.begin(), by_prio.end(),
            [&](int a, int b) { return plan.pct_priorities[a] > plan.pct_priorities[b]; });
  w.sched.Run(Never(), 150, UINT64_MAX);
  ASSERT_EQ(w.log.size(), 150U);
  for (uint64_t step = 1; step <= 150; ++step) {
    // Steps 1..k1: the top actor; after k1 it drops to priority 2 (below
    // all initial ones): the second runs until k2, when it drops to 1 (below
    // the first one's 2): then the third runs.
    const int want = step <= k1 ? by_prio[0] : step <= k2 ? by_prio[1] : by_prio[2];
    ASSERT_EQ(w.log[step - 1], want) << "step " << step << " " << plan.ToString();
  }
}

TEST(Scheduler, PctWithoutChangePointsRunsTheTopActorOnly) {
  World w(5, 3);
  const SchedulerPlan& plan = w.sched.MakePlan(PickMode::kPct, /*pct_depth=*/1, 100);
  EXPECT_TRUE(plan.pct_change_steps.empty());
  w.sched.Run(Never(), 50, UINT64_MAX);
  EXPECT_EQ(std::count(w.log.begin(), w.log.end(), w.log.front()), 50);
}

// Runnable only from its wake time on; one step, then done.
class SleeperActor final : public Actor {
 public:
  SleeperActor(VirtualClock* clock, uint64_t wake_ns) : clock_(clock), wake_ns_(wake_ns) {}
  std::string_view name() const override { return "sleeper"; }
  bool Runnable() override { return !done && clock_->NowNs() >= wake_ns_; }
  uint64_t Step() override {
    done = true;
    ran_at_ns = clock_->NowNs();
    return 7;
  }
  std::optional<uint64_t> NextWakeNs() override {
    if (done) return std::nullopt;
    return wake_ns_;
  }
  bool HasWork() override { return !done; }
  bool done = false;
  uint64_t ran_at_ns = 0;

 private:
  VirtualClock* clock_;
  uint64_t wake_ns_;
};

TEST(Scheduler, TimeJumpsToNextTimerThenWakeTimeWhenIdle) {
  VirtualClock clock;
  Trace trace(100);
  Scheduler sched(Prng(3), &clock, &trace);
  SleeperActor sleeper(&clock, 1000);
  sched.AddActor(&sleeper);
  sched.MakePlan(PickMode::kUniform);
  bool timer_fired = false;
  clock.AddTimer(500, [&] { timer_fired = true; });
  const RunResult r = sched.Run([&] { return sleeper.done; }, 100, UINT64_MAX);
  EXPECT_EQ(r.outcome, RunOutcome::kDone);
  EXPECT_TRUE(timer_fired);
  EXPECT_EQ(sleeper.ran_at_ns, 1000U);
  EXPECT_EQ(r.end_time_ns, 1007U);  // the step's cost advanced time
  EXPECT_EQ(r.steps, 1U);
  std::vector<std::string> events;
  for (const TraceEntry& e : trace.record()) {
    if (e.text.rfind("event ", 0) == 0) events.push_back(e.text);
  }
  EXPECT_EQ(events, (std::vector<std::string>{"event plan 0 1 0", "event jump 0 500 0",
                                              "event timers 1 500 0", "event jump 500 1000 0",
                                              "event step 0 7 1"}));
}

TEST(Scheduler, StepCostsAdvanceVirtualTime) {
  VirtualClock clock;
  Scheduler sched(Prng(3), &clock, nullptr);
  ToyActor a("a", nullptr, 0, /*cost_ns=*/25, /*steps_left=*/4);
  sched.AddActor(&a);
  const RunResult r = sched.Run([&] { return !a.HasWork(); }, 100, UINT64_MAX);
  EXPECT_EQ(r.outcome, RunOutcome::kDone);
  EXPECT_EQ(r.steps, 4U);
  EXPECT_EQ(clock.NowNs(), 100U);
}

TEST(Scheduler, DeadlockReportNamesActorsWithWork) {
  VirtualClock clock;
  Trace trace(100);
  Scheduler sched(Prng(9), &clock, &trace);
  ToyActor finished("finished", nullptr, 0, 10, /*steps_left=*/2);
  ToyActor stuck_a("stuck-a", nullptr, 1, 10, 5);
  ToyActor stuck_b("stuck-b", nullptr, 2, 10, 5);
  stuck_a.blocked = true;
  stuck_b.blocked = true;
  sched.AddActor(&stuck_b);
  sched.AddActor(&finished);
  sched.AddActor(&stuck_a);
  const RunResult r = sched.Run(Never(), 100, UINT64_MAX);
  EXPECT_EQ(r.outcome, RunOutcome::kDeadlock);
  EXPECT_EQ(r.steps, 2U);
  EXPECT_EQ(r.detail, "no events, work remains: stuck-b, stuck-a");
  EXPECT_EQ(trace.record().back().text, "event stall 2 0 0");
  EXPECT_FALSE(sched.StepOnce());
}

TEST(Scheduler, IdleWithoutWorkButNotDoneIsAStall) {
  VirtualClock clock;
  Scheduler sched(Prng(9), &clock, nullptr);
  ToyActor idle("idle", nullptr, 0, 10, /*steps_left=*/0);
  sched.AddActor(&idle);
  const RunResult r = sched.Run(Never(), 100, UINT64_MAX);
  EXPECT_EQ(r.outcome, RunOutcome::kDeadlock);
  EXPECT_NE(r.detail.find("no actor reports work"), std::string::npos);
}

TEST(Scheduler, TimeLimitStopsBeforeAJumpPastIt) {
  VirtualClock clock;
  Scheduler sched(Prng(9), &clock, nullptr);
  SleeperActor sleeper(&clock, 5000);
  sched.AddActor(&sleeper);
  const RunResult r = sched.Run([&] { return sleeper.done; }, 100, /*time_max_ns=*/4000);
  EXPECT_EQ(r.outcome, RunOutcome::kTimeLimit);
  EXPECT_EQ(clock.NowNs(), 0U);
  EXPECT_FALSE(sleeper.done);
}

TEST(Scheduler, StepLimitCountsStepsOfThisRun) {
  World w(4, 2);
  EXPECT_EQ(w.sched.Run(Never(), 10, UINT64_MAX).steps, 10U);
  const RunResult r = w.sched.Run(Never(), 5, UINT64_MAX);
  EXPECT_EQ(r.outcome, RunOutcome::kStepLimit);
  EXPECT_EQ(r.steps, 5U);
  EXPECT_EQ(w.sched.steps(), 15U);
}

TEST(Scheduler, PlanIsAFunctionOfTheSeedAndPrints) {
  bool seen[3] = {false, false, false};
  for (uint64_t seed = 0; seed < 60; ++seed) {
    World a(seed, 5), b(seed, 5);
    const std::string pa = a.sched.MakePlan().ToString();
    EXPECT_EQ(pa, b.sched.MakePlan().ToString());
    seen[static_cast<int>(a.sched.plan().mode)] = true;
    switch (a.sched.plan().mode) {
      case PickMode::kUniform:
        EXPECT_EQ(pa, "mode=uniform");
        break;
      case PickMode::kSwarm:
        EXPECT_EQ(a.sched.plan().swarm_weights.size(), 5U);
        EXPECT_EQ(pa.rfind("mode=swarm weights=[", 0), 0U) << pa;
        break;
      case PickMode::kPct:
        EXPECT_TRUE(std::is_sorted(a.sched.plan().pct_change_steps.begin(),
                                   a.sched.plan().pct_change_steps.end()));
        EXPECT_EQ(pa.rfind("mode=pct priorities=[", 0), 0U) << pa;
        break;
    }
  }
  EXPECT_TRUE(seen[0] && seen[1] && seen[2]);
  SchedulerPlan plan;
  plan.mode = PickMode::kPct;
  plan.pct_priorities = {4, 3, 5};
  plan.pct_change_steps = {17, 402};
  EXPECT_EQ(plan.ToString(), "mode=pct priorities=[4,3,5] change_steps=[17,402]");
  plan.mode = PickMode::kSwarm;
  plan.swarm_weights = {3, 0, 12};
  EXPECT_EQ(plan.ToString(), "mode=swarm weights=[3,0,12]");
}

TEST(Scheduler, EveryChoiceIsTracedAndReplays) {
  World a(31, 4, /*record_max=*/100000), b(31, 4, 100000);
  a.sched.MakePlan(PickMode::kUniform);
  b.sched.MakePlan(PickMode::kUniform);
  a.sched.Run(Never(), 500, UINT64_MAX);
  b.sched.Run(Never(), 500, UINT64_MAX);
  EXPECT_EQ(a.log, b.log);
  EXPECT_EQ(a.trace.hash(), b.trace.hash());
  size_t step_events = 0, draws = 0;
  for (const TraceEntry& e : a.trace.record()) {
    step_events += e.text.rfind("event step ", 0) == 0 ? 1 : 0;
    draws += e.text.rfind("draw s=0 ", 0) == 0 ? 1 : 0;
  }
  EXPECT_EQ(step_events, 500U);
  EXPECT_GE(draws, 500U);  // one uniform draw per step at least
  World c(32, 4);
  c.sched.MakePlan(PickMode::kUniform);
  c.sched.Run(Never(), 500, UINT64_MAX);
  EXPECT_NE(a.log, c.log);
}

TEST(SchedulerDeathTest, AddingAnActorAfterThePlanAborts) {
  World w(1, 2);
  w.sched.MakePlan();
  ToyActor late("late", nullptr, 9);
  EXPECT_DEATH(w.sched.AddActor(&late), "FERRY_CHECK failed");
}

}  // namespace
}  // namespace ferry::sim
