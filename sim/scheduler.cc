// sim/scheduler.cc: plan drawing, the per-step pick, time jumps and
// deadlock detection of the deterministic scheduler.
//
// Owns: the meaning of a seed for scheduling (which actor runs when). What
// must stay true: actors are always scanned in registration order; every
// random choice comes from prng_; every step, jump, timer batch and priority
// change is traced; time never moves backwards; loops are bounded by
// step_max, time_max_ns, or the number of actors.
#include "sim/scheduler.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"

namespace ferry::sim {
namespace {

constexpr uint64_t kTimeMaxNs = std::numeric_limits<uint64_t>::max();
// Drawing d-1 distinct change steps by rejection: each retry succeeds with
// probability >= 1/2 when horizon >= 2(d-1); capped so a tiny horizon cannot
// spin (the count is first capped to the horizon).
constexpr int kChangeStepDrawsMax = 1 << 16;

}  // namespace

std::string_view PickModeName(PickMode mode) {
  switch (mode) {
    case PickMode::kUniform:
      return "uniform";
    case PickMode::kSwarm:
      return "swarm";
    case PickMode::kPct:
      return "pct";
  }
  return "?";
}

std::string_view RunOutcomeName(RunOutcome outcome) {
  switch (outcome) {
    case RunOutcome::kDone:
      return "done";
    case RunOutcome::kDeadlock:
      return "deadlock";
    case RunOutcome::kStepLimit:
      return "step_limit";
    case RunOutcome::kTimeLimit:
      return "time_limit";
  }
  return "?";
}

std::string SchedulerPlan::ToString() const {
  std::string out = absl::StrCat("mode=", std::string(PickModeName(mode)));
  switch (mode) {
    case PickMode::kUniform:
      break;
    case PickMode::kSwarm:
      absl::StrAppend(&out, " weights=[", absl::StrJoin(swarm_weights, ","), "]");
      break;
    case PickMode::kPct:
      absl::StrAppend(&out, " priorities=[", absl::StrJoin(pct_priorities, ","), "] change_steps=[",
                      absl::StrJoin(pct_change_steps, ","), "]");
      break;
  }
  return out;
}

Scheduler::Scheduler(Prng prng, VirtualClock* clock, Trace* trace)
    : prng_(std::move(prng)), clock_(clock), trace_(trace) {
  FERRY_CHECK(clock_ != nullptr);
  if (trace_ != nullptr) prng_.AttachTrace(trace_, kTraceStream);
}

void Scheduler::AddActor(Actor* actor) {
  FERRY_CHECK(actor != nullptr);
  FERRY_CHECK(!planned_);  // the plan covers exactly the registered actors
  FERRY_CHECK_LT(actors_.size(), kActorsMax);
  actors_.push_back(actor);
}

const SchedulerPlan& Scheduler::MakePlan(std::optional<PickMode> force, uint32_t pct_depth,
                                         uint64_t pct_horizon_steps) {
  FERRY_CHECK(!planned_);
  FERRY_CHECK_GE(pct_depth, 1U);
  planned_ = true;
  plan_ = SchedulerPlan{};
  const size_t n = actors_.size();
  plan_.mode = force.has_value() ? *force : static_cast<PickMode>(prng_.Below(3));
  switch (plan_.mode) {
    case PickMode::kUniform:
      break;
    case PickMode::kSwarm:
      plan_.swarm_weights.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        const bool starved = prng_.Chance(Ratio{1, 4});
        plan_.swarm_weights.push_back(
            starved ? 0 : static_cast<uint32_t>(prng_.Range(1, kSwarmWeightMax)));
      }
      break;
    case PickMode::kPct: {
      std::vector<uint64_t> priorities(n);
      for (size_t i = 0; i < n; ++i) priorities[i] = pct_depth + i;
      prng_.Shuffle(std::span<uint64_t>(priorities));
      plan_.pct_priorities = priorities;
      priority_ = std::move(priorities);
      const uint64_t changes = std::min<uint64_t>(pct_depth - 1, pct_horizon_steps);
      for (int draw = 0; plan_.pct_change_steps.size() < changes; ++draw) {
        FERRY_CHECK_LT(draw, kChangeStepDrawsMax);
        const uint64_t step = prng_.Range(1, pct_horizon_steps);
        if (std::find(plan_.pct_change_steps.begin(), plan_.pct_change_steps.end(), step) ==
            plan_.pct_change_steps.end()) {
          plan_.pct_change_steps.push_back(step);
        }
      }
      std::sort(plan_.pct_change_steps.begin(), plan_.pct_change_steps.end());
      break;
    }
  }
  TraceEvent("plan", static_cast<uint64_t>(plan_.mode), n, plan_.pct_change_steps.size());
  return plan_;
}

void Scheduler::TraceEvent(std::string_view kind, uint64_t a, uint64_t b, uint64_t c) {
  if (trace_ == nullptr) return;
  trace_->SetTimeNs(clock_->NowNs());
  trace_->Event(kind, a, b, c);
}

size_t Scheduler::Pick() {
  FERRY_CHECK(!runnable_.empty());
  switch (plan_.mode) {
    case PickMode::kUniform:
      break;
    case PickMode::kSwarm: {
      uint64_t total = 0;
      for (size_t i : runnable_) total += plan_.swarm_weights[i];
      if (total == 0) break;  // only starved actors are runnable: uniform
      uint64_t r = prng_.Below(total);
      for (size_t i : runnable_) {
        const uint64_t w = plan_.swarm_weights[i];
        if (r < w) return i;
        r -= w;
      }
      FERRY_UNREACHABLE();
    }
    case PickMode::kPct: {
      size_t best = runnable_.front();
      for (size_t i : runnable_) {
        if (priority_[i] > priority_[best]) best = i;
      }
      return best;
    }
  }
  return runnable_[prng_.Below(runnable_.size())];
}

std::string Scheduler::ActorsWithWork() {
  std::string names;
  for (Actor* actor : actors_) {
    if (!actor->HasWork()) continue;
    if (!names.empty()) names += ", ";
    absl::StrAppend(&names, std::string(actor->name()));
  }
  return names;
}

Scheduler::StepKind Scheduler::StepImpl(uint64_t time_max_ns) {
  if (trace_ != nullptr) trace_->SetTimeNs(clock_->NowNs());
  const size_t fired = clock_->FireDue();
  if (fired > 0) TraceEvent("timers", fired, clock_->NowNs(), 0);

  runnable_.clear();
  for (size_t i = 0; i < actors_.size(); ++i) {
    if (actors_[i]->Runnable()) runnable_.push_back(i);
  }
  if (!runnable_.empty()) {
    const size_t chosen = Pick();
    last_actor_ = chosen;
    last_step_start_ns_ = clock_->NowNs();
    const uint64_t cost_ns = actors_[chosen]->Step();
    ++steps_;
    TraceEvent("step", chosen, cost_ns, runnable_.size());
    clock_->Advance(cost_ns);
    if (plan_.mode == PickMode::kPct && next_change_ < plan_.pct_change_steps.size() &&
        plan_.pct_change_steps[next_change_] == steps_) {
      // Change i (0-based) drops the actor that ran step k_i to c-i, with c
      // the number of change steps; initial priorities are >= d > c.
      const uint64_t lowered = plan_.pct_change_steps.size() - next_change_;
      FERRY_CHECK_GE(lowered, 1U);
      priority_[chosen] = lowered;
      ++next_change_;
      TraceEvent("pct_change", chosen, lowered, steps_);
    }
    return StepKind::kStepped;
  }

  // Nobody can run: jump to the earliest future timer or actor wake time.
  const uint64_t now_ns = clock_->NowNs();
  std::optional<uint64_t> next_ns = clock_->NextDeadlineNs();
  for (Actor* actor : actors_) {
    const std::optional<uint64_t> wake_ns = actor->NextWakeNs();
    if (wake_ns.has_value() && *wake_ns > now_ns && (!next_ns || *wake_ns < *next_ns)) {
      next_ns = wake_ns;
    }
  }
  if (!next_ns.has_value()) return StepKind::kIdle;
  FERRY_CHECK_GT(*next_ns, now_ns);  // due timers were fired above
  if (*next_ns > time_max_ns) return StepKind::kPastTimeLimit;
  clock_->AdvanceTo(*next_ns);
  last_actor_.reset();
  ++jumps_;
  TraceEvent("jump", now_ns, *next_ns, 0);
  return StepKind::kJumped;
}

bool Scheduler::StepOnce() {
  if (!planned_) MakePlan();
  const StepKind kind = StepImpl(kTimeMaxNs);
  return kind == StepKind::kStepped || kind == StepKind::kJumped;
}

RunResult Scheduler::Run(const std::function<bool()>& done, uint64_t step_max,
                         uint64_t time_max_ns) {
  if (!planned_) MakePlan();
  RunResult result;
  const uint64_t steps_start = steps_;
  const uint64_t jumps_start = jumps_;
  // Bounded: each pass either steps (at most step_max) or jumps (at most
  // step_max), or returns.
  for (;;) {
    result.steps = steps_ - steps_start;
    result.end_time_ns = clock_->NowNs();
    if (done()) {
      result.outcome = RunOutcome::kDone;
      return result;
    }
    if (result.steps >= step_max || jumps_ - jumps_start >= step_max) {
      result.outcome = RunOutcome::kStepLimit;
      result.detail = absl::StrCat("step limit ", step_max, " reached");
      return result;
    }
    if (result.end_time_ns > time_max_ns) {
      result.outcome = RunOutcome::kTimeLimit;
      result.detail = absl::StrCat("virtual time passed ", time_max_ns, " ns");
      return result;
    }
    switch (StepImpl(time_max_ns)) {
      case StepKind::kStepped:
      case StepKind::kJumped:
        continue;
      case StepKind::kPastTimeLimit:
        result.outcome = RunOutcome::kTimeLimit;
        result.detail = absl::StrCat("next event is after the time limit ", time_max_ns, " ns");
        return result;
      case StepKind::kIdle: {
        std::string with_work = ActorsWithWork();
        size_t count = 0;
        for (Actor* actor : actors_) count += actor->HasWork() ? 1 : 0;
        TraceEvent("stall", count, 0, 0);
        result.outcome = RunOutcome::kDeadlock;
        result.detail = with_work.empty()
                            ? std::string(
                                  "no events, nothing runnable, no actor reports work, "
                                  "but done() is false")
                            : absl::StrCat("no events, work remains: ", with_work);
        return result;
      }
    }
  }
}

}  // namespace ferry::sim
