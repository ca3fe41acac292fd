// tests/sim/rnic/rnic_recv_test.cc: receive-side rules of the simulated
// RNIC that need its ground truth or its clock (the conformance set,
// tests/conformance/recv_cases.cc, holds the rest): a receive CQE never
// precedes its bytes (checked after every event), posted receive WRs count
// in the CQ's producible CQEs (the engine's receive quota), the RNR wait
// honours the responder's timer on each profile, and the receive-side
// fault kinds (rnr_storm, recv_drop), scripted and seeded (RecvPlan).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "sim/rnic/fault_plan.h"
#include "tests/sim/rnic/rnic_world.h"

namespace ferry::sim::testing {
namespace {

constexpr uint64_t kRecvOff = 0x8000;

absl::Status PostRecv(Side& s, hal::QpHandle qp, uint64_t wr_id, uint64_t off, uint32_t len) {
  hal::RecvWr w;
  w.wr_id = wr_id;
  w.num_sge = 1;
  w.sg_list[0] = hal::Sge{reinterpret_cast<uint64_t>(s.buf.data()) + off, len, s.mr.lkey};
  return s.v->PostRecv(qp, {&w, 1}).status;
}

hal::SendWr Send(World& w, uint64_t wr_id, uint64_t off, uint32_t len) {
  hal::SendWr s = w.Wr(hal::Opcode::kSend, wr_id, off, 0, len, true);
  s.remote_addr = 0;
  s.rkey = 0;
  return s;
}

// A connected pair with A's rnr_retry and B's min_rnr_timer (the world's
// Connect uses 7 and 12).
World::Pair ConnectRnr(World& w, uint8_t rnr_retry, uint8_t timer) {
  World::Pair p{w.MakeQp(w.a()), w.MakeQp(w.b())};
  FERRY_CHECK(World::ToInit(w.a(), p.a.qp).ok());
  FERRY_CHECK(World::ToInit(w.b(), p.b.qp).ok());
  FERRY_CHECK(w.ToRtr(w.a(), p.a.qp, w.b(), p.b.qp_num, 0x500).ok());
  FERRY_CHECK(World::ToRts(w.a(), p.a.qp, 0x100, 14, 7, rnr_retry).ok());
  FERRY_CHECK(w.ToRtr(w.b(), p.b.qp, w.a(), p.a.qp_num, 0x100, timer).ok());
  FERRY_CHECK(World::ToRts(w.b(), p.b.qp, 0x500).ok());
  return p;
}

class RnicRecv : public ::testing::TestWithParam<RnicProfile> {};

// Checked after every event: when the receive CQE can be polled, every
// byte of the 8-packet SEND is in the receive buffer.
TEST_P(RnicRecv, ReceiveCqeOnlyAfterAllBytes) {
  World w(TestConfig(GetParam()));
  auto p = w.Connect();
  ASSERT_TRUE(PostRecv(w.b(), p.b.qp, 77, kRecvOff, 8192).ok());
  for (uint32_t i = 0; i < 8192; ++i) w.a().buf[i] = static_cast<uint8_t>(0x40 + i * 13);
  hal::SendWr s = Send(w, 1, 0, 8192);
  ASSERT_TRUE(w.a().v->PostSend(p.a.qp, {&s, 1}).status.ok());
  auto got = w.PollN(w.b(), 1);  // polls after each event
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 77u);
  ASSERT_EQ(got[0].status, hal::WcStatus::kSuccess);
  uint32_t placed = 0;
  for (uint32_t i = 0; i < 8192; ++i) {
    placed += w.b().buf[kRecvOff + i] == w.a().buf[i] ? 1 : 0;
  }
  EXPECT_EQ(placed, 8192u) << "receive CQE before its data: " << placed << " of 8192 bytes placed";
}

// Posted receive WRs are CQEs the CQ still owes room for (CqTruth), as
// posted send WRs are: the engine's receive quota is checked against it.
TEST_P(RnicRecv, PostedRecvsCountAsProducible) {
  World w(TestConfig(GetParam()));
  hal::QpInfo qp = w.MakeQp(w.b());
  ASSERT_TRUE(World::ToInit(w.b(), qp.qp).ok());
  EXPECT_EQ(w.fabric().TruthOf(w.b().cq)->producible, 0u);
  ASSERT_TRUE(PostRecv(w.b(), qp.qp, 1, kRecvOff, 64).ok());
  EXPECT_EQ(w.fabric().TruthOf(w.b().cq)->producible, 1u);
  hal::QpAttr err;
  err.qp_state = hal::QpState::kErr;
  ASSERT_TRUE(w.b().v->ModifyQp(qp.qp, err, hal::kQpState).ok());
  auto wcs = w.PollN(w.b(), 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, hal::WcStatus::kWrFlushErr);
  const CqTruth t = *w.fabric().TruthOf(w.b().cq);
  EXPECT_EQ(t.producible, 0u);
  EXPECT_EQ(t.present, 0u);
}

// rnr_retry 3 with timer code 14 (1.28 ms): the SEND fails only after
// three waits; rxe rounds each wait up to a 4 ms jiffy.
TEST_P(RnicRecv, RnrWaitHonoursTheResponderTimer) {
  World w(TestConfig(GetParam()));
  auto p = ConnectRnr(w, 3, 14);
  const uint64_t t0 = w.fabric().NowNs();
  hal::SendWr s = Send(w, 1, 0, 64);
  ASSERT_TRUE(w.a().v->PostSend(p.a.qp, {&s, 1}).status.ok());
  auto wcs = w.PollN(w.a(), 1);
  ASSERT_EQ(wcs.size(), 1u) << "the SEND never failed RNR_RETRY_EXC_ERR";
  EXPECT_EQ(wcs[0].status, hal::WcStatus::kRnrRetryExcErr);
  const uint64_t wait_ns = GetParam() == RnicProfile::kRxe ? 4'000'000 : 1'280'000;
  const uint64_t took = w.fabric().NowNs() - t0;
  EXPECT_GE(took, 3 * wait_ns);
  EXPECT_LT(took, 4 * wait_ns);
  EXPECT_EQ(w.fabric().stats().rnr_naks, 4u);  // the first try and three resends
}

// rnr_storm: receive WRs are posted, yet the responder answers RNR until
// the storm ends; the SEND then lands once.
TEST_P(RnicRecv, RnrStormDelaysButDelivers) {
  World w(TestConfig(GetParam()));
  auto p = w.Connect();
  ASSERT_TRUE(PostRecv(w.b(), p.b.qp, 5, kRecvOff, 64).ok());
  ScriptedFault f;
  f.kind = FaultKind::kRnrStorm;
  f.target = FaultTarget{TargetKind::kQp, 1, "sim0", p.b.qp_num};
  f.duration_ns = 3'000'000;
  ASSERT_TRUE(w.fabric().Inject(f).ok());
  const uint64_t t0 = w.fabric().NowNs();
  hal::SendWr s = Send(w, 1, 0, 64);
  ASSERT_TRUE(w.a().v->PostSend(p.a.qp, {&s, 1}).status.ok());
  auto sent = w.PollN(w.a(), 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, hal::WcStatus::kSuccess);
  EXPECT_GE(w.fabric().NowNs() - t0, 3'000'000u);
  EXPECT_GE(w.fabric().stats().rnr_naks, 1u);
  auto got = w.PollN(w.b(), 2, 10'000'000);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 5u);
}

// recv_drop: the SEND's packet is lost on arrival; the retry timer resends
// it and it is delivered once.
TEST_P(RnicRecv, RecvDropResentAndDeliveredOnce) {
  World w(TestConfig(GetParam()));
  auto p = w.Connect(64, 8);
  ASSERT_TRUE(PostRecv(w.b(), p.b.qp, 6, kRecvOff, 64).ok());
  ScriptedFault f;
  f.kind = FaultKind::kRecvDrop;
  f.target = FaultTarget{TargetKind::kQp, 1, "sim0", p.b.qp_num};
  ASSERT_TRUE(w.fabric().Inject(f).ok());
  hal::SendWr s = Send(w, 1, 0, 64);
  ASSERT_TRUE(w.a().v->PostSend(p.a.qp, {&s, 1}).status.ok());
  auto sent = w.PollN(w.a(), 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, hal::WcStatus::kSuccess);
  EXPECT_EQ(w.fabric().stats().faults[static_cast<size_t>(FaultKind::kRecvDrop)], 1u);
  EXPECT_GE(w.fabric().RetransmitsOf(p.a.qp).value_or(0), 1u);
  auto got = w.PollN(w.b(), 2, 10'000'000);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 6u);
}

// Seeded receive-side kinds (RecvPlan): with drops and storms on, 40
// SENDs still land once each, in post order; the same seed replays the
// same faults at the same times; a plan that is off draws nothing.
struct SeededRun {
  uint64_t drops = 0, storms = 0, end_ns = 0;
  std::vector<uint64_t> delivered;
};
SeededRun RunSeeded(RnicProfile profile, const RecvPlan& plan) {
  FabricConfig cfg = TestConfig(profile);
  cfg.recv = plan;
  World w(std::move(cfg), /*seed=*/5);
  auto p = w.Connect(64, 8);
  SeededRun out;
  for (uint64_t i = 0; i < 40; ++i) {
    FERRY_CHECK(PostRecv(w.b(), p.b.qp, 100 + i, kRecvOff + 64 * (i % 16), 64).ok());
    hal::SendWr s = Send(w, i, 64 * (i % 16), 64);
    FERRY_CHECK(w.a().v->PostSend(p.a.qp, {&s, 1}).status.ok());
    auto sent = w.PollN(w.a(), 1);
    FERRY_CHECK(sent.size() == 1 && sent[0].status == hal::WcStatus::kSuccess);
    for (const hal::WorkCompletion& wc : w.PollN(w.b(), 1)) out.delivered.push_back(wc.wr_id);
  }
  out.drops = w.fabric().stats().faults[static_cast<size_t>(FaultKind::kRecvDrop)];
  out.storms = w.fabric().stats().faults[static_cast<size_t>(FaultKind::kRnrStorm)];
  out.end_ns = w.fabric().NowNs();
  return out;
}

TEST_P(RnicRecv, SeededRecvKindsInjectDeliverOnceAndReplay) {
  RecvPlan plan;
  plan.drop = Ratio{1, 4};
  plan.rnr_storm = Ratio{1, 5};
  plan.rnr_storm_ns_max = 200'000;
  plan.seed = 77;
  const SeededRun a = RunSeeded(GetParam(), plan);
  EXPECT_GT(a.drops, 0u);
  EXPECT_GT(a.storms, 0u);
  ASSERT_EQ(a.delivered.size(), 40u);
  for (uint64_t i = 0; i < 40; ++i) EXPECT_EQ(a.delivered[i], 100 + i) << "post order, once";
  const SeededRun b = RunSeeded(GetParam(), plan);
  EXPECT_EQ(b.drops, a.drops);
  EXPECT_EQ(b.storms, a.storms);
  EXPECT_EQ(b.end_ns, a.end_ns);
  const SeededRun off = RunSeeded(GetParam(), RecvPlan{});
  EXPECT_EQ(off.drops + off.storms, 0u);
  EXPECT_EQ(off.delivered.size(), 40u);
  EXPECT_LT(off.end_ns, a.end_ns);
}

TEST(RecvPlanTest, DrawIsDeterministicAndPrintable) {
  Prng p1(9), p2(9);
  const RecvPlan a = RecvPlan::Draw(p1), b = RecvPlan::Draw(p2);
  EXPECT_EQ(a.ToString(), b.ToString());
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(RecvPlan{}.ToString(), "recv plan: off\n");
  int on = 0;
  for (uint64_t s = 0; s < 200; ++s) {
    Prng p(s);
    on += RecvPlan::Draw(p).drop.num != 0 ? 1 : 0;
  }
  EXPECT_GT(on, 60);  // about half
  EXPECT_LT(on, 140);
}

INSTANTIATE_TEST_SUITE_P(Profiles, RnicRecv,
                         ::testing::Values(RnicProfile::kMlx5, RnicProfile::kRxe),
                         [](const ::testing::TestParamInfo<RnicProfile>& i) {
                           return std::string(RnicProfileName(i.param));
                         });

}  // namespace
}  // namespace ferry::sim::testing
