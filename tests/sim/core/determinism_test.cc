// Tests of the determinism check and of the demo world: the check passes for
// the demo in every scheduler mode; seed X alone == seed X after seed Y in
// the same process; the check finds the first diverging entry (also past
// its first window, and when one trace is shorter); and with the test-only
// kUnseededDraw mutation on, the check FAILS and prints where.
//
// Links the mutation variants (sim_core_mut, demo_world_mut).
#include "sim/determinism.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <string>

#include "base/mutation.h"
#include "sim/demo/demo_world.h"
#include "sim/trace.h"

namespace ferry::sim {
namespace {

static_assert(base::Mutations::kCompiledIn, "this test links the mutation variants");

TracedRun DemoRun(demo::DemoOptions options = {}) {
  return
      [options](uint64_t seed, Trace* trace) { return demo::RunDemo(seed, trace, options).digest; };
}

TEST(Determinism, DemoPassesInEveryMode) {
  for (PickMode mode : {PickMode::kUniform, PickMode::kSwarm, PickMode::kPct}) {
    demo::DemoOptions options;
    options.force_mode = mode;
    for (uint64_t seed : {uint64_t{1}, uint64_t{2}, demo::kDefaultSeed}) {
      absl::StatusOr<DeterminismReport> report = CheckDeterminism(seed, DemoRun(options));
      ASSERT_TRUE(report.ok()) << report.status();
      EXPECT_TRUE(report->deterministic) << report->ToString();
      EXPECT_EQ(report->pairs_run, 1U);
      EXPECT_GT(report->entries_a, 500U);
      EXPECT_EQ(report->ToString().rfind("determinism OK: seed=", 0), 0U);
    }
  }
}

TEST(Determinism, DemoCompletesAndDiffersBetweenSeeds) {
  Trace t1, t2;
  const demo::DemoResult r1 = demo::RunDemo(1, &t1);
  const demo::DemoResult r2 = demo::RunDemo(2, &t2);
  for (const demo::DemoResult* r : {&r1, &r2}) {
    EXPECT_EQ(r->run.outcome, RunOutcome::kDone) << r->run.detail;
    EXPECT_EQ(r->consumed, r->expected);
    EXPECT_EQ(r->delivered, r->expected);
    EXPECT_EQ(r->sent, r->expected);
    EXPECT_EQ(r->run.steps, 2 * r->expected);  // one send and one consume each
  }
  EXPECT_NE(t1.hash(), t2.hash());
  EXPECT_NE(r1.digest, r2.digest);
}

// The default seed's run, as printed by `ferry-sim-demo` (same value with
// g++ and clang, in the production and the mutation build). If the demo
// world changes on purpose, update this pin from the demo's output.
constexpr uint64_t kDefaultSeedTraceHash = 0x002488ce2db06961ULL;

TEST(Determinism, SeedAloneEqualsSeedAfterAnotherSeedInTheSameProcess) {
  const uint64_t x = demo::kDefaultSeed;
  Trace alone(64);
  const demo::DemoResult first = demo::RunDemo(x, &alone);
  EXPECT_EQ(alone.hash(), kDefaultSeedTraceHash);
  for (uint64_t y : {1ULL, 99ULL, 0xffffffffffffffffULL}) {
    Trace other;
    demo::RunDemo(y, &other);
    Trace again(64);
    const demo::DemoResult second = demo::RunDemo(x, &again);
    EXPECT_EQ(again.hash(), alone.hash()) << "after seed " << y;
    EXPECT_EQ(again.entries(), alone.entries());
    EXPECT_EQ(second.digest, first.digest);
    EXPECT_EQ(second.run.end_time_ns, first.run.end_time_ns);
    EXPECT_EQ(second.plan.ToString(), first.plan.ToString());
    ASSERT_EQ(again.record().size(), alone.record().size());
    for (size_t i = 0; i < alone.record().size(); ++i) {
      EXPECT_EQ(again.record()[i].text, alone.record()[i].text);
    }
  }
}

TEST(Determinism, DemoDeadlockWhenAMessageIsLost) {
  demo::DemoOptions options;
  options.drop_message = 5;
  Trace trace;
  const demo::DemoResult r = demo::RunDemo(demo::kDefaultSeed, &trace, options);
  EXPECT_EQ(r.run.outcome, RunOutcome::kDeadlock);
  EXPECT_EQ(r.run.detail.rfind("no events, work remains: consumer-", 0), 0U) << r.run.detail;
  EXPECT_EQ(r.consumed, r.expected - 1);
}

// A synthetic world that changes one entry at `diverge_seq` on its second
// (and later even) calls. The call counter is the test's, not the world's.
struct FlakyWorld {
  uint64_t entries = 10;
  uint64_t diverge_seq = 3;
  bool second_run_shorter = false;
  bool only_result_differs = false;
  int calls = 0;
  uint64_t Run(uint64_t seed, Trace* trace) {
    const bool odd = (calls++ % 2) == 1;
    const uint64_t n = odd && second_run_shorter ? diverge_seq : entries;
    for (uint64_t i = 0; i < n; ++i) {
      trace->SetTimeNs(10 * i);
      const bool flip = odd && !second_run_shorter && !only_result_differs && i == diverge_seq;
      trace->Event("work", seed, i, flip ? 1 : 0);
    }
    return odd && only_result_differs ? 2 : 1;
  }
};

TracedRun Bind(FlakyWorld* world) {
  return [world](uint64_t seed, Trace* trace) { return world->Run(seed, trace); };
}

TEST(Determinism, ReportsTheFirstDivergingEntry) {
  FlakyWorld world;
  absl::StatusOr<DeterminismReport> report = CheckDeterminism(5, Bind(&world));
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->deterministic);
  ASSERT_TRUE(report->divergence.has_value());
  EXPECT_EQ(report->divergence->seq, 3U);
  EXPECT_EQ(report->divergence->time_a_ns, 30U);
  EXPECT_EQ(report->divergence->text_a, "event work 5 3 0");
  EXPECT_EQ(report->divergence->text_b, "event work 5 3 1");
  const std::string text = report->ToString();
  EXPECT_NE(text.find("first diverging step: seq=3"), std::string::npos) << text;
  EXPECT_NE(text.find("run B @30ns: event work 5 3 1"), std::string::npos) << text;
}

TEST(Determinism, FindsADivergencePastTheFirstWindow) {
  FlakyWorld world;
  world.entries = 10000;
  world.diverge_seq = 9000;
  DeterminismOptions options;
  options.window_entries = 4096;
  absl::StatusOr<DeterminismReport> report = CheckDeterminism(5, Bind(&world), options);
  ASSERT_TRUE(report.ok());
  ASSERT_TRUE(report->divergence.has_value()) << report->ToString();
  EXPECT_EQ(report->divergence->seq, 9000U);
  EXPECT_EQ(report->pairs_run, 3U);  // windows [0,4096) [4096,8192) [8192,..)
}

TEST(Determinism, ReportsAShorterTrace) {
  FlakyWorld world;
  world.second_run_shorter = true;
  world.diverge_seq = 6;
  absl::StatusOr<DeterminismReport> report = CheckDeterminism(5, Bind(&world));
  ASSERT_TRUE(report.ok());
  ASSERT_TRUE(report->divergence.has_value());
  EXPECT_EQ(report->divergence->seq, 6U);
  EXPECT_EQ(report->divergence->text_a, "event work 5 6 0");
  EXPECT_EQ(report->divergence->text_b, "<end of trace>");
}

TEST(Determinism, ReportsResultsThatDifferWithEqualTraces) {
  FlakyWorld world;
  world.only_result_differs = true;
  absl::StatusOr<DeterminismReport> report = CheckDeterminism(5, Bind(&world));
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->deterministic);
  EXPECT_FALSE(report->divergence.has_value());
  EXPECT_EQ(report->detail, "traces are identical but the results differ");
}

TEST(Determinism, RejectsBadArguments) {
  EXPECT_EQ(CheckDeterminism(1, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  DeterminismOptions zero;
  zero.window_entries = 0;
  EXPECT_EQ(CheckDeterminism(1, DemoRun(), zero).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The test-only switch: every PRNG draw mixes in an unseeded source, so two
// runs of one seed differ and the determinism check must fail.
TEST(DeterminismMutation, UnseededDrawMakesTheCheckFail) {
  demo::DemoOptions options;
  options.mutations.Enable(base::Mutation::kUnseededDraw);
  absl::StatusOr<DeterminismReport> report = CheckDeterminism(demo::kDefaultSeed, DemoRun(options));
  ASSERT_TRUE(report.ok());
  std::cout << "with mutation " << base::MutationName(base::Mutation::kUnseededDraw) << ":\n"
            << report->ToString() << "\n";
  EXPECT_FALSE(report->deterministic);
  ASSERT_TRUE(report->divergence.has_value());
  // The first entry of the demo is the root's first fork draw.
  EXPECT_EQ(report->divergence->seq, 0U);
  EXPECT_EQ(report->divergence->text_a.rfind("draw s=1 ", 0), 0U);
  EXPECT_NE(report->divergence->text_a, report->divergence->text_b);
  EXPECT_NE(report->ToString().find("first diverging step: seq=0"), std::string::npos);

  // Same binary, mutation off: the check passes again (the switch, not the
  // build, made it fail).
  absl::StatusOr<DeterminismReport> clean =
      CheckDeterminism(demo::kDefaultSeed, DemoRun(demo::DemoOptions{}));
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE(clean->deterministic) << clean->ToString();
}

}  // namespace
}  // namespace ferry::sim
