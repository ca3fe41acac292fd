// tests/sim/rnic/rnic_stall_test.cc: the stall kinds of the simulated RNIC
// (sim/rnic/fabric_stall.cc): a QP that hangs and recovers, a move to ERR
// held while the QP executes, a CQE delivered twice; their seeded plan
// (StallPlan) and script forms. Each rule has a test-only switch that
// breaks it (MutationDetect below).
#include <algorithm>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "sim/rnic/fabric.h"
#include "sim/rnic/fault_plan.h"
#include "tests/sim/rnic/rnic_world.h"

namespace ferry::sim {
namespace {

using hal::QpState;
using hal::WcStatus;
using testing::TestConfig;
using testing::World;

ScriptedFault OnQp(FaultKind k, const hal::QpInfo& qp, uint64_t ns) {
  ScriptedFault f;
  f.kind = k;
  f.target.kind = TargetKind::kQp;
  f.target.host = 0;
  f.target.device = "sim0";
  f.target.number = qp.qp_num;
  f.duration_ns = ns;
  return f;
}

uint64_t Faults(World& w, FaultKind k) { return w.fabric().stats().faults[static_cast<size_t>(k)]; }

QpState StateOf(World& w, const hal::QpInfo& qp) { return *w.fabric().TrueStateOf(qp.qp); }

void ToErr(World& w, const hal::QpInfo& qp) {
  hal::QpAttr err;
  err.qp_state = QpState::kErr;
  ASSERT_TRUE(w.va().ModifyQp(qp.qp, err, hal::kQpState).ok());
}

// ---------------------------------------------------------------- plan

TEST(StallPlan, DrawIsSeededAndFromTheMenus) {
  const std::set<uint64_t> hung_den = {20, 100, 1000}, hold_den = {2, 10, 100},
                           dup_den = {100, 1000, 10000};
  const uint64_t t = 30'000'000;
  std::set<std::string> texts;
  for (uint64_t seed = 1; seed <= 64; ++seed) {
    Prng a(seed), b(seed);
    const StallPlan p = StallPlan::Draw(a, t);
    EXPECT_EQ(p.ToString(), StallPlan::Draw(b, t).ToString());
    if (p.hung_recover.num != 0) {
      EXPECT_TRUE(hung_den.contains(p.hung_recover.den));
      EXPECT_TRUE(p.hung_recover_ns_max == t / 2 || p.hung_recover_ns_max == 2 * t ||
                  p.hung_recover_ns_max == 8 * t);
    }
    if (p.err_hold.num != 0) {
      EXPECT_TRUE(hold_den.contains(p.err_hold.den));
    }
    if (p.dup_cqe.num != 0) {
      EXPECT_TRUE(dup_den.contains(p.dup_cqe.den));
    }
    texts.insert(p.ToString());
  }
  EXPECT_GT(texts.size(), 16u);  // the draw varies with the seed
  EXPECT_TRUE(texts.contains("stall plan: off\n"));
  StallPlan one;
  one.dup_cqe = Ratio{1, 100};
  one.dup_cqe_ns_max = 5000;
  EXPECT_EQ(one.ToString(),
            "stall plan:\n  hung_qp_recover off\n  qp_err_hold off\n"
            "  dup_cqe 1/100 up to 5000 ns\n");
}

TEST(StallPlan, ScriptFormsTakeADuration) {
  auto ok = ParseFaultScript(
      "at 5 hung_qp_recover qp:h0/sim0/17 for 1000\n"
      "at 6 qp_err_hold qp:h1/sim0/18 for 2000\n"
      "at 7 dup_cqe qp:h0/sim1/19 for 30\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 3u);
  EXPECT_EQ((*ok)[0].ToString(), "at 5 hung_qp_recover qp:h0/sim0/17 for 1000");
  EXPECT_EQ((*ok)[1].kind, FaultKind::kQpErrHold);
  EXPECT_EQ((*ok)[2].duration_ns, 30u);
  auto bad = ParseFaultScript("at 5 dup_cqe qp:h0/sim0/17\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "fault script line 1: dup_cqe needs 'for <ns>' (ns > 0)");
}

// ---------------------------------------------------------------- hung_qp_recover

// The QP hangs with a WRITE posted: nothing moves until it recovers, then
// the WRITE completes (a success that comes after any short deadline).
TEST(StallRule, HungQpRecoversAndCompletesLate) {
  for (RnicProfile prof : {RnicProfile::kMlx5, RnicProfile::kRxe}) {
    World w(TestConfig(prof));
    auto p = w.Connect();
    const uint64_t t0 = w.clock().NowNs();
    ASSERT_TRUE(w.fabric().Inject(OnQp(FaultKind::kHungQpRecover, p.a, 5'000'000)).ok());
    hal::SendWr wr = w.Write(1, 0, 0, 4096);
    ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
    EXPECT_TRUE(w.PollN(w.a(), 1, 4'000'000).empty());
    EXPECT_EQ(w.b().buf[0], 0x11);  // nothing sent while hung
    EXPECT_EQ(StateOf(w, p.a), QpState::kRts);
    auto wcs = w.PollN(w.a(), 1);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
    EXPECT_GE(w.clock().NowNs(), t0 + 5'000'000);
    EXPECT_EQ(w.b().buf[4095], 0x10);  // the bytes landed after the recovery
    EXPECT_EQ(Faults(w, FaultKind::kHungQpRecover), 1u);
  }
}

// Moved to ERR while hung, the QP owes its flush until it recovers: the
// flush CQE is the only evidence, and it comes at the recovery.
bool FlushesAtRecovery(FabricConfig cfg) {
  World w(std::move(cfg));
  auto p = w.Connect();
  const uint64_t t0 = w.clock().NowNs();
  FERRY_CHECK(w.fabric().Inject(OnQp(FaultKind::kHungQpRecover, p.a, 5'000'000)).ok());
  hal::SendWr wr = w.Write(1, 0, 0, 4096);
  FERRY_CHECK(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  hal::QpAttr err;
  err.qp_state = QpState::kErr;
  FERRY_CHECK(w.va().ModifyQp(p.a.qp, err, hal::kQpState).ok());
  if (!w.PollN(w.a(), 1, 4'000'000).empty()) return false;  // no flush while hung
  auto wcs = w.PollN(w.a(), 1, 100'000'000);
  return wcs.size() == 1 && wcs[0].status == WcStatus::kWrFlushErr &&
         w.clock().NowNs() >= t0 + 5'000'000 && w.b().buf[0] == 0x11;
}

TEST(StallRule, HungQpMovedToErrFlushesWhenItRecovers) {
  EXPECT_TRUE(FlushesAtRecovery(TestConfig(RnicProfile::kMlx5)));
  EXPECT_TRUE(FlushesAtRecovery(TestConfig(RnicProfile::kRxe)));
}

// A reset cancels the recovery: the QP was reused from RESET and must not
// be "unhung" by an old event while a later hang holds it.
TEST(StallRule, ResetCancelsAPendingRecovery) {
  World w(TestConfig(RnicProfile::kMlx5));
  auto p = w.Connect();
  ASSERT_TRUE(w.fabric().Inject(OnQp(FaultKind::kHungQpRecover, p.a, 1'000'000)).ok());
  hal::QpAttr reset;
  reset.qp_state = QpState::kReset;
  ASSERT_TRUE(w.va().ModifyQp(p.a.qp, reset, hal::kQpState).ok());
  ASSERT_TRUE(w.fabric().Inject(OnQp(FaultKind::kHungQpRecover, p.a, 10'000'000)).ok());
  w.fabric().RunFor(2'000'000);  // the first recovery's time passes
  auto again = w.fabric().Inject(OnQp(FaultKind::kHungQpRecover, p.a, 10));
  EXPECT_EQ(again.message(), "hung_qp_recover: the qp is hung already");
}

// ---------------------------------------------------------------- qp_err_hold

// ibv_modify_qp(ERR) returns, but the QP keeps executing until the hold
// ends: query_qp says RTS, WRs posted meanwhile still succeed; only after
// the hold is the QP in ERR and a new WR flushed.
TEST(StallRule, ErrHoldKeepsTheQpExecutingUntilItEnds) {
  for (RnicProfile prof : {RnicProfile::kMlx5, RnicProfile::kRxe}) {
    World w(TestConfig(prof));
    auto p = w.Connect();
    ASSERT_TRUE(w.fabric().Inject(OnQp(FaultKind::kQpErrHold, p.a, 2'000'000)).ok());
    hal::SendWr first = w.Write(1, 0, 0, 4096);
    ASSERT_TRUE(w.va().PostSend(p.a.qp, {&first, 1}).status.ok());
    ToErr(w, p.a);
    EXPECT_EQ(w.va().QueryQp(p.a.qp)->qp_state, QpState::kRts);
    EXPECT_EQ(Faults(w, FaultKind::kQpErrHold), 1u);
    hal::SendWr second = w.Write(2, 4096, 4096, 4096);
    ASSERT_TRUE(w.va().PostSend(p.a.qp, {&second, 1}).status.ok());
    auto wcs = w.PollN(w.a(), 2, 1'000'000);
    ASSERT_EQ(wcs.size(), 2u);
    EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);  // after the "move" to ERR
    EXPECT_EQ(wcs[1].status, WcStatus::kSuccess);
    EXPECT_EQ(w.b().buf[8191], 0x10);
    w.fabric().RunFor(2'000'000);
    EXPECT_EQ(StateOf(w, p.a), QpState::kErr);
    hal::SendWr third = w.Write(3, 0, 0, 64);
    ASSERT_TRUE(w.va().PostSend(p.a.qp, {&third, 1}).status.ok());
    wcs = w.PollN(w.a(), 1, 1'000'000);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kWrFlushErr);
  }
}

// A later modify applies the held ERR first (so ERR -> RESET is the path
// taken, with the flush in between); the hold's end then changes nothing.
TEST(StallRule, ModifyDuringAHoldAppliesTheHeldErrFirst) {
  World w(TestConfig(RnicProfile::kRxe));  // rxe keeps the flush CQE across RESET
  auto stuck = w.Connect(64, 14, 7, /*b_stays_in_init=*/true);
  ASSERT_TRUE(w.fabric().Inject(OnQp(FaultKind::kQpErrHold, stuck.a, 10'000'000)).ok());
  hal::SendWr wr = w.Write(1, 0, 0, 64);
  ASSERT_TRUE(w.va().PostSend(stuck.a.qp, {&wr, 1}).status.ok());
  ToErr(w, stuck.a);
  EXPECT_EQ(StateOf(w, stuck.a), QpState::kRts);
  hal::QpAttr reset;
  reset.qp_state = QpState::kReset;
  ASSERT_TRUE(w.va().ModifyQp(stuck.a.qp, reset, hal::kQpState).ok());
  EXPECT_EQ(StateOf(w, stuck.a), QpState::kReset);
  auto wcs = w.PollN(w.a(), 1, 1'000'000);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kWrFlushErr);
  w.fabric().RunFor(20'000'000);
  EXPECT_EQ(StateOf(w, stuck.a), QpState::kReset);
}

// ---------------------------------------------------------------- dup_cqe

// The copy comes later, with the same wr_id and status, and is not in the
// CQ truth's `present` (no WR owes it a slot).
TEST(StallRule, DupCqeDeliversTheSameCompletionAgain) {
  World w(TestConfig(RnicProfile::kMlx5));
  auto p = w.Connect();
  ASSERT_TRUE(w.fabric().Inject(OnQp(FaultKind::kDupCqe, p.a, 50'000)).ok());
  hal::SendWr wr = w.Write(7, 0, 0, 64);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  auto first = w.PollN(w.a(), 1, 40'000);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(Faults(w, FaultKind::kDupCqe), 0u);
  w.fabric().RunFor(100'000);
  EXPECT_EQ(Faults(w, FaultKind::kDupCqe), 1u);
  EXPECT_EQ(w.fabric().TruthOf(w.a().cq)->present, 0u);
  auto copy = w.PollN(w.a(), 1, 0);
  ASSERT_EQ(copy.size(), 1u);
  EXPECT_EQ(copy[0].wr_id, 7u);
  EXPECT_EQ(copy[0].status, first[0].status);
  EXPECT_TRUE(w.PollN(w.a(), 1, 1'000'000).empty());  // once only
}

// A copy lands only if the CQ has room beyond what its QPs can still
// produce: it never overruns a CQ the consumer sized exactly (here the
// first CQE plus the stuck QP's flushes fill it to the last entry).
bool CopyOverrunsAFullCq(FabricConfig cfg) {
  World w(std::move(cfg), 1, /*cqe=*/4);
  const uint32_t cap = w.a().cqe;
  auto ok = w.Connect();
  auto stuck = w.Connect(64, 14, 7, /*b_stays_in_init=*/true);
  std::vector<hal::SendWr> chain;
  for (uint32_t i = 0; i + 1 < cap; ++i) chain.push_back(w.Write(100 + i, 0, 0, 8));
  FERRY_CHECK(w.va().PostSend(stuck.a.qp, chain).status.ok());  // producible = cap - 1
  FERRY_CHECK(w.fabric().Inject(OnQp(FaultKind::kDupCqe, ok.a, 1000)).ok());
  hal::SendWr wr = w.Write(1, 0, 0, 8);
  FERRY_CHECK(w.va().PostSend(ok.a.qp, {&wr, 1}).status.ok());
  w.fabric().RunFor(1'000'000);  // the CQE and the copy's time
  hal::QpAttr err;
  err.qp_state = QpState::kErr;  // the stuck QP's cap - 1 flushes fill the CQ exactly
  FERRY_CHECK(w.va().ModifyQp(stuck.a.qp, err, hal::kQpState).ok());
  w.fabric().RunFor(1'000'000);
  return w.fabric().TruthOf(w.a().cq)->errored;
}

TEST(StallRule, DupCqeNeverOverrunsTheCq) {
  EXPECT_FALSE(CopyOverrunsAFullCq(TestConfig(RnicProfile::kMlx5)));
}

// ---------------------------------------------------------------- seeded

// Seeded stall rates act; StopSeededFaults ends them (a campaign's
// liveness phase runs without them).
TEST(StallRule, SeededDupCqeStopsWithTheSeededFaults) {
  FabricConfig cfg = TestConfig(RnicProfile::kMlx5);
  cfg.stall.dup_cqe = Ratio{1, 1};
  cfg.stall.dup_cqe_ns_max = 100;
  cfg.stall.seed = 42;
  World w(std::move(cfg));
  auto p = w.Connect();
  hal::SendWr wr = w.Write(1, 0, 0, 64);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  EXPECT_EQ(w.PollN(w.a(), 2, 1'000'000).size(), 2u);
  w.fabric().StopSeededFaults();
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  EXPECT_EQ(w.PollN(w.a(), 2, 1'000'000).size(), 1u);
  EXPECT_EQ(Faults(w, FaultKind::kDupCqe), 1u);
}

#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
FabricConfig Mutated(RnicProfile prof, base::Mutation m) {
  FabricConfig c = TestConfig(prof);
  c.mutations.Enable(m);
  return c;
}

TEST(MutationDetect, UnhangWithoutFlushLeavesTheWrOutstanding) {
  EXPECT_FALSE(
      FlushesAtRecovery(Mutated(RnicProfile::kMlx5, base::Mutation::kSimUnhangWithoutFlush)));
}

TEST(MutationDetect, DupCqeNoRoomOverrunsTheCq) {
  EXPECT_TRUE(CopyOverrunsAFullCq(Mutated(RnicProfile::kMlx5, base::Mutation::kSimDupCqeNoRoom)));
}
#endif

}  // namespace
}  // namespace ferry::sim
