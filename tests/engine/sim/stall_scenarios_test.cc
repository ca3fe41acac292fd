// tests/engine/sim/stall_scenarios_test.cc: the engine against the
// simulated RNIC's stall kinds (sim/rnic/fabric_stall.cc), scripted: a move
// to ERR held while the QP executes (the field bug's probe: a pause before
// the local move to ERR), a QP that hangs and recovers after or before the
// deadline, a CQE delivered twice. Each runs with the oracle on at every
// step, on both destroy profiles and a few seeds, and asserts the order of
// the events it is about (Scenario::InOrder on h0's event log).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/sim/scenario.h"

namespace ferry::engine::testing {
namespace {

using sim::FaultKind;
using sim::RnicProfile;

constexpr uint64_t kSecond = 1'000'000'000;
constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kUs = 1'000;
constexpr uint32_t kForever = 100'000;
constexpr uint64_t kSeeds = 3;

std::string Name(TaskStatus s) { return std::string(TaskStatusName(s)); }

ScenarioSpec Spec(uint64_t seed, RnicProfile p, const base::Mutations& m) {
  ScenarioSpec s;
  s.seed = seed;
  s.profile = p;
  s.mutations = m;
  s.fabric.mutations = m;  // the simulator's switches (sim_*) act there
  s.config.slice_timeout_ns = 5 * kMs;
  s.config.drain_timeout_ns = 100 * kMs;  // no destroy races the stalls below
  return s;
}

// ---------------------------------------------------------------- hold
// Every packet is dropped, so the WRITE's WRs stay outstanding; at the
// deadline the retire moves the QPs to ERR, and the RNIC holds that move
// for 20 ms (the QPs stay RTS and keep retrying). The task is PENDING at
// every step until the flush that comes when the hold ends, and TIMEOUT
// is published after it: a timeout seen while the QP is still RTS is not
// evidence.
std::string HeldErrKeepsTheTaskPending(uint64_t seed, RnicProfile p, const base::Mutations& m) {
  Scenario sc(Spec(seed, p, m));
  if (!sc.setup().empty()) return sc.setup();
  if (std::string f = sc.ArmAll(FaultKind::kPacketLoss, kForever); !f.empty()) return f;
  if (std::string f = sc.ArmAll(FaultKind::kQpErrHold, 1, 20 * kMs); !f.empty()) return f;
  auto id = sc.Submit(OpKind::kWrite, 64 * 1024, 64 * 1024, 32 * 1024, 7);
  if (!id.ok()) return "submit";
  sc.RunUntilTerminal({*id}, kSecond, [&] {
    if (sc.At({"timeout"}) < 0 || sc.At(Scenario::Flush()) >= 0) return;
    if (sc.Status(*id) != TaskStatus::kPending)
      sc.Flag("not PENDING while the move to ERR was held: " + Name(sc.Status(*id)));
  });
  FERRY_SCENARIO_CHECK(sc);
  if (sc.Status(*id) != TaskStatus::kTimeout) return "ended " + Name(sc.Status(*id));
  std::vector<int64_t> at;
  if (std::string o = sc.InOrder(
          {{"timeout"}, {"timeout_retire"}, Scenario::Flush(), Scenario::Publish(sc.Label(*id))},
          &at);
      !o.empty())
    return o;
  const auto& r = sc.records();
  if (r[at[2]].time_ns < r[at[1]].time_ns + 20 * kMs)
    return absl::StrCat("flushed ", r[at[2]].time_ns - r[at[1]].time_ns, " ns after the retire");
  if (sc.w().fabric().stats().faults[static_cast<size_t>(FaultKind::kQpErrHold)] == 0)
    return "no move to ERR was held";
  if (std::string f = sc.Disarm({sc.Qpn(0), sc.Qpn(1)}); !f.empty() && sc.Ep() != nullptr) return f;
  if (std::string f = sc.NextWriteLands(512 * 1024, 8); !f.empty()) return f;
  return sc.Finish();
}

// ---------------------------------------------------------------- hang, after
// The QPs hang for three slice timeouts. At the deadline the retire moves
// them to ERR; a hung QP does not flush, so the task waits; when the QPs
// recover they flush (the evidence), and only then is TIMEOUT published,
// with no destroy before it (drain_timeout_ns is longer than the hang).
std::string HangRecoversAfterTheDeadline(uint64_t seed, RnicProfile p, const base::Mutations& m) {
  Scenario sc(Spec(seed, p, m));
  if (!sc.setup().empty()) return sc.setup();
  if (std::string f = sc.ArmAll(FaultKind::kHungQpRecover, 1, 15 * kMs); !f.empty()) return f;
  const uint64_t t0 = sc.w().clock().NowNs();
  auto id = sc.Submit(OpKind::kWrite, 64 * 1024, 64 * 1024, 32 * 1024, 7);
  if (!id.ok()) return "submit";
  sc.RunUntilTerminal({*id}, kSecond);
  FERRY_SCENARIO_CHECK(sc);
  if (sc.Status(*id) != TaskStatus::kTimeout) return "ended " + Name(sc.Status(*id));
  std::vector<int64_t> at;
  if (std::string o = sc.InOrder(
          {{"timeout"}, {"timeout_retire"}, Scenario::Flush(), Scenario::Publish(sc.Label(*id))},
          &at);
      !o.empty())
    return o;
  const auto& r = sc.records();
  if (r[at[2]].time_ns < t0 + 15 * kMs) return "flushed before the QP recovered";
  // The flush was each WR's evidence: no destroy resolved one (a QP with an
  // empty FIFO may be destroyed early).
  for (size_t i = sc.mark(); i < static_cast<size_t>(at[3]); ++i)
    if (r[i].kind == "qp_released" && r[i].b != 0)
      return absl::StrCat("a destroy, not the flush, was the evidence for a WR\n",
                          sc.Dump(sc.mark()));
  if (std::string f = sc.NextWriteLands(512 * 1024, 8); !f.empty()) return f;
  return sc.Finish();
}

// ---------------------------------------------------------------- hang, before
// The QPs hang for 2 ms, inside the 5 ms deadline: the WRITE completes
// late but in time, COMPLETED with its bytes in place, and no timeout.
std::string HangRecoversBeforeTheDeadline(uint64_t seed, RnicProfile p, const base::Mutations& m) {
  Scenario sc(Spec(seed, p, m));
  if (!sc.setup().empty()) return sc.setup();
  if (std::string f = sc.ArmAll(FaultKind::kHungQpRecover, 1, 2 * kMs); !f.empty()) return f;
  const uint64_t t0 = sc.w().clock().NowNs();
  auto id = sc.Submit(OpKind::kWrite, 64 * 1024, 64 * 1024, 32 * 1024, 7);
  if (!id.ok()) return "submit";
  sc.RunUntilTerminal({*id}, kSecond);
  FERRY_SCENARIO_CHECK(sc);
  if (sc.Status(*id) != TaskStatus::kCompleted) return "ended " + Name(sc.Status(*id));
  const int64_t pub = sc.At(Scenario::Publish(sc.Label(*id)));
  if (pub < 0) return "no publish record";
  if (sc.records()[pub].time_ns < t0 + 2 * kMs) return "completed while the QPs were hung";
  if (sc.At({"timeout"}) >= 0) return "a timeout fired";
  if (!Holds(sc.w(), 1, 64 * 1024, 32 * 1024, 7)) return "the WRITE's bytes did not land";
  return sc.Finish();
}

// ---------------------------------------------------------------- dup CQE
// Every QP delivers its next CQE twice, 30 us apart. The copy names a slot
// the engine freed at the first one: it is counted stale and changes
// nothing; both WRITEs complete with their bytes.
std::string DuplicateCqeIsStale(uint64_t seed, RnicProfile p, const base::Mutations& m) {
  Scenario sc(Spec(seed, p, m));
  if (!sc.setup().empty()) return sc.setup();
  if (std::string f = sc.ArmAll(FaultKind::kDupCqe, 1, 30 * kUs); !f.empty()) return f;
  auto a = sc.Submit(OpKind::kWrite, 64 * 1024, 64 * 1024, 4 * 1024, 7);
  if (!a.ok()) return "submit a";
  sc.RunUntilTerminal({*a}, kSecond);
  auto b = sc.Submit(OpKind::kWrite, 128 * 1024, 128 * 1024, 4 * 1024, 8);
  if (!b.ok()) return "submit b";
  sc.RunUntilTerminal({*b}, kSecond);
  sc.w().RunUntil([] { return false; }, 1 * kMs);  // every copy has landed
  // A third WRITE makes the workers poll what came while they were idle.
  auto c = sc.Submit(OpKind::kWrite, 192 * 1024, 192 * 1024, 4 * 1024, 9);
  if (!c.ok()) return "submit c";
  sc.RunUntilTerminal({*c}, kSecond);
  FERRY_SCENARIO_CHECK(sc);
  for (TaskId id : {*a, *b, *c})
    if (sc.Status(id) != TaskStatus::kCompleted) return "ended " + Name(sc.Status(id));
  if (!Holds(sc.w(), 1, 64 * 1024, 4 * 1024, 7) || !Holds(sc.w(), 1, 128 * 1024, 4 * 1024, 8) ||
      !Holds(sc.w(), 1, 192 * 1024, 4 * 1024, 9))
    return "bytes did not land";
  const uint64_t dups = sc.w().fabric().stats().faults[static_cast<size_t>(FaultKind::kDupCqe)];
  uint64_t stale = 0;
  for (const WorkerStats& s : sc.w().worker_stats()) stale += s.stale_cqes;
  if (dups == 0 || stale != dups) return absl::StrCat(dups, " copies, ", stale, " stale CQEs");
  return sc.Finish();
}

class Stall : public ::testing::TestWithParam<RnicProfile> {};
INSTANTIATE_TEST_SUITE_P(Profiles, Stall, ::testing::Values(RnicProfile::kMlx5, RnicProfile::kRxe),
                         [](const auto& info) { return ProfileName(info.param); });

#define FERRY_STALL_SCENARIO(Test, Fn)                    \
  TEST_P(Stall, Test) {                                   \
    for (uint64_t s = 1; s <= kSeeds; ++s)                \
      ASSERT_EQ(Fn(s, GetParam(), base::Mutations()), "") \
          << ProfileName(GetParam()) << " seed " << s;    \
  }

FERRY_STALL_SCENARIO(HeldErrKeepsTheTaskPending, HeldErrKeepsTheTaskPending)
FERRY_STALL_SCENARIO(HangRecoversAfterTheDeadline, HangRecoversAfterTheDeadline)
FERRY_STALL_SCENARIO(HangRecoversBeforeTheDeadline, HangRecoversBeforeTheDeadline)
FERRY_STALL_SCENARIO(DuplicateCqeIsStale, DuplicateCqeIsStale)

// ================================================================ mutations
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
base::Mutations With(base::Mutation k) {
  base::Mutations m;
  m.Enable(k);
  return m;
}

using ::testing::HasSubstr;
using ::testing::StartsWith;

// engine_c1_early_publish: TIMEOUT at expiry, while the held QP is RTS and
// still retrying the WRITE.
TEST_P(Stall, EarlyPublishIsCaughtDuringTheHold) {
  EXPECT_THAT(
      HeldErrKeepsTheTaskPending(1, GetParam(), With(base::Mutation::kEngineC1EarlyPublish)),
      AllOf(StartsWith("oracle: "), HasSubstr("published_without_evidence: task 2"),
            HasSubstr("published TIMEOUT while h0/sim0 qpn="), HasSubstr("state=RTS")));
}

// sim_unhang_without_flush: the recovered QP never flushes; the engine
// falls back to destroy after drain_timeout_ns (TIMEOUT still comes, by
// destroy evidence), so the scenario's flush is missing from the order.
TEST_P(Stall, UnhangWithoutFlushLosesTheFlush) {
  EXPECT_EQ(
      HangRecoversAfterTheDeadline(1, GetParam(), With(base::Mutation::kSimUnhangWithoutFlush)),
      "order: timeout@9 timeout_retire@10 cqe_error(5)@-1 publish@-1");
}
#endif

}  // namespace
}  // namespace ferry::engine::testing
