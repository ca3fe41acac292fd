// tests/sim/rnic/rnic_truth_test.cc: ground truth and the memory oracle on
// the sim side (docs/design.md section 6): shadow ownership per 64 bytes checked
// at every DMA packet event, attributable bytes, per-CQ CQE truth, leak
// accounting; and the fault plans (swarm draw, printing, script parsing,
// scripted faults, determinism of a faulty run).
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "sim/rnic/fabric.h"
#include "sim/rnic/fault_plan.h"
#include "sim/rnic/shadow_memory.h"
#include "sim/scheduler.h"
#include "tests/sim/rnic/rnic_world.h"

namespace ferry::sim {
namespace {

using hal::QpState;
using hal::WcStatus;
using testing::TestConfig;
using testing::World;

// ---------------------------------------------------------------- shadow

TEST(Shadow, ClaimReleaseFenceAndCheck) {
  alignas(64) uint8_t buf[1024] = {};
  ShadowMemory s;
  EXPECT_FALSE(s.Check(buf, 1024).has_value());
  s.Claim(buf, 256, 7, "write-A");
  s.Claim(buf + 256, 256, 8, "write-B");
  EXPECT_FALSE(s.Check(buf, 512).has_value());
  s.Release(buf, 256);
  EXPECT_EQ(*s.StateAt(buf), ShadowState::kReleased);
  EXPECT_EQ(*s.StateAt(buf + 256), ShadowState::kOwned);
  auto v = s.Check(buf + 128, 8);
  ASSERT_TRUE(v.has_value());
  EXPECT_NE(v->find("task 7 (write-A)"), std::string::npos) << *v;
  EXPECT_FALSE(s.Check(buf + 256, 256).has_value());
  s.Fence(buf + 512, 64, 9, "mr deregistered");
  auto f = s.Check(buf + 500, 40);
  ASSERT_TRUE(f.has_value());
  EXPECT_NE(f->find("fenced"), std::string::npos);
  s.Forget(buf, 1024);
  EXPECT_TRUE(s.empty());
}

// Found by the engine state-machine property (EngineStateProp, seed 1007,
// shrunk to two READs on h1: 64 KiB into [0, 64 KiB), then 4 KiB into
// [64 KiB, 68 KiB) of a buffer 16 bytes past a 64-byte boundary). With
// 64-byte granules the two claims shared one granule; the 4 KiB READ
// published first and released it, so the 64 KiB READ's own last packet was
// reported as "DMA touched released range of task 2". Granules are bytes
// now: adjacent claims are independent in both orders of publishing.
TEST(Shadow, AdjacentUnalignedClaimsAreIndependent) {
  alignas(64) static uint8_t buf[256];
  uint8_t* a = buf + 16;  // 16 past a 64-byte boundary, as a vector's data() is
  uint8_t* b = a + 100;   // a's last byte and b's first are 1 byte apart
  for (bool a_first : {true, false}) {
    ShadowMemory m;
    m.Claim(a, 100, 1, "task 1");
    m.Claim(b, 50, 2, "task 2");
    m.Release(a_first ? a : b, a_first ? 100 : 50);  // one of them publishes
    uint8_t* other = a_first ? b : a;
    uint8_t* done = a_first ? a : b;
    EXPECT_EQ(m.Check(a_first ? b : a + 99, 1), std::nullopt) << a_first;  // the other's edge
    EXPECT_EQ(m.Check(other, 1), std::nullopt);
    ASSERT_TRUE(m.Check(done + (a_first ? 99 : 0), 1).has_value());
    EXPECT_NE(m.Check(done, 1)->find(a_first ? "task 1" : "task 2"), std::string::npos);
  }
}

TEST(Shadow, AttributableBytesNameTheirTask) {
  std::vector<uint8_t> a(300), b(300);
  FillAttributable(a, 7, 0);
  FillAttributable(b, 8, 0);
  EXPECT_EQ(FirstNotAttributable(a, 7, 0), a.size());
  EXPECT_LT(FirstNotAttributable(b, 7, 0), 8u);
  EXPECT_EQ(AttributableByte(7, 5), a[5]);
}

TEST(Oracle, DmaIntoReleasedBufferNamesOwner) {
  for (RnicProfile prof : {RnicProfile::kMlx5, RnicProfile::kRxe}) {
    World w(TestConfig(prof));
    auto p = w.Connect();
    // Task 7 READs into a[4096..8192); it publishes (releases) too early,
    // while the READ is still in flight.
    uint8_t* local = w.a().buf.data() + 4096;
    w.fabric().shadow().Claim(local, 4096, 7, "read-into-A");
    hal::SendWr wr = w.Read(1, 4096, 0, 4096);
    ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
    w.fabric().shadow().Release(local, 4096);
    w.fabric().Settle(1'000'000'000);
    ASSERT_TRUE(w.fabric().HasViolation(ViolationKind::kLocalAfterRelease));
    const std::string& msg = w.fabric().violations().front().message;
    EXPECT_NE(msg.find("task 7 (read-into-A)"), std::string::npos) << msg;
  }
}

// A WRITE's packets are on the wire when its QP is moved to ERR: the WR is
// flushed, its task publishes and releases the source buffer, and the user
// reuses it at once. The packets still in flight carry what the RNIC
// fetched when it sent them: they land (the remote caveat of
// docs/contract.md) with the old bytes and never read the released buffer.
struct LateWriteOutcome {
  bool local_after_release = false;
  bool remote_holds_sent_bytes = false;
  uint64_t landed = 0;
};
LateWriteOutcome LateWritePackets(FabricConfig cfg) {
  cfg.link_latency_ns = 50'000;  // every packet is in flight at once
  World w(std::move(cfg));
  auto p = w.Connect();
  uint8_t* local = w.a().buf.data();
  std::fill(local, local + 32 * 1024, 0x5A);
  w.fabric().shadow().Claim(local, 32 * 1024, 9, "write-from-A");
  hal::SendWr wr = w.Write(1, 0, 0, 32 * 1024);
  FERRY_CHECK(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  w.fabric().RunUntil(w.clock().NowNs() + 10'000);  // sent, not arrived
  hal::QpAttr err;
  err.qp_state = hal::QpState::kErr;
  FERRY_CHECK(w.va().ModifyQp(p.a.qp, err, hal::kQpState).ok());
  auto wcs = w.PollN(w.a(), 1, 1'000'000);
  FERRY_CHECK_EQ(wcs.size(), 1u);
  FERRY_CHECK(wcs[0].status == WcStatus::kWrFlushErr);
  w.fabric().shadow().Release(local, 32 * 1024);  // the task published
  std::fill(local, local + 32 * 1024, 0xEE);      // and the buffer was reused
  w.fabric().Settle(1'000'000'000);
  LateWriteOutcome o;
  o.local_after_release = w.fabric().HasViolation(ViolationKind::kLocalAfterRelease);
  o.remote_holds_sent_bytes = std::all_of(w.b().buf.begin(), w.b().buf.begin() + 32 * 1024,
                                          [](uint8_t b) { return b == 0x5A; });
  o.landed = w.fabric().stats().late_packets_landed;
  return o;
}

TEST(Oracle, PacketsOfAFlushedWriteNeverReadItsSourceAgain) {
  for (RnicProfile prof : {RnicProfile::kMlx5, RnicProfile::kRxe}) {
    const LateWriteOutcome o = LateWritePackets(TestConfig(prof));
    EXPECT_FALSE(o.local_after_release);
    EXPECT_TRUE(o.remote_holds_sent_bytes);
    EXPECT_EQ(o.landed, 32u);  // 32 KiB in 1 KiB packets, all in flight
  }
}

#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
TEST(MutationDetect, FetchAfterCompletionReadsAReleasedSource) {
  FabricConfig c = TestConfig(RnicProfile::kMlx5);
  c.mutations.Enable(base::Mutation::kSimFetchAfterCompletion);
  const LateWriteOutcome o = LateWritePackets(c);
  EXPECT_TRUE(o.local_after_release);
  EXPECT_FALSE(o.remote_holds_sent_bytes);  // the reused buffer's bytes landed
}
#endif

TEST(Oracle, WriteIntoFencedRemoteRangeIsAViolation) {
  World w(TestConfig(RnicProfile::kMlx5));
  auto p = w.Connect();
  w.fabric().shadow().Fence(w.b().buf.data(), 128, 3, "target fenced");
  hal::SendWr wr = w.Write(1, 0, 0, 64);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  w.fabric().Settle(1'000'000'000);
  EXPECT_TRUE(w.fabric().HasViolation(ViolationKind::kRemoteAfterFence));
}

TEST(Oracle, DeregisteredTargetIsNeverTouched) {
  World w(TestConfig(RnicProfile::kMlx5));
  auto p = w.Connect();
  std::fill(w.a().buf.begin(), w.a().buf.begin() + 64, 0xA5);
  ASSERT_TRUE(w.vb().DeregMr(w.b().mr.mr).ok());
  w.fabric().shadow().Fence(w.b().buf.data(), w.b().buf.size(), 2, "dereg_mr returned");
  hal::SendWr wr = w.Write(1, 0, 0, 64);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  auto wcs = w.PollN(w.a(), 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(w.b().buf[0], 0x11);
  EXPECT_TRUE(w.fabric().violations().empty());
}

// ---------------------------------------------------------------- truth

TEST(Truth, CqTruthCountsPresentAndProducible) {
  World w(TestConfig(RnicProfile::kRxe));
  auto stuck = w.Connect(64, 14, 7, /*b_stays_in_init=*/true);
  auto ok = w.Connect(64);
  std::vector<hal::SendWr> chain;
  for (uint64_t i = 0; i < 3; ++i) chain.push_back(w.Write(i, 0, 0, 8, /*signaled=*/i != 1));
  ASSERT_TRUE(w.va().PostSend(stuck.a.qp, chain).status.ok());
  ASSERT_TRUE(w.va().PostSend(ok.a.qp, chain).status.ok());
  w.fabric().RunFor(1'000'000);
  auto t = *w.fabric().TruthOf(w.a().cq);
  EXPECT_EQ(t.present, 2u);     // the signaled successes of `ok`
  EXPECT_EQ(t.producible, 3u);  // `stuck` can still produce 3 (error/flush, unsignaled too)
  EXPECT_LE(t.present + t.producible, t.capacity);
  ASSERT_TRUE(w.va().DestroyQp(stuck.a.qp).ok());
  EXPECT_EQ(w.fabric().TruthOf(w.a().cq)->producible, 0u);
}

TEST(Truth, LeakAccountingListsWhatIsAlive) {
  World w(TestConfig(RnicProfile::kMlx5));
  auto p = w.Connect();
  EXPECT_EQ(w.fabric().LiveCount(ObjectKind::kQp), 2u);
  EXPECT_EQ(w.fabric().LiveCount(ObjectKind::kContext), 2u);
  auto live = w.fabric().LiveObjects();
  EXPECT_EQ(live.size(), 2u * 5 + 2);  // ctx, pd, channel, cq, mr per side + 2 QPs
  ASSERT_TRUE(w.va().DestroyQp(p.a.qp).ok());
  ASSERT_TRUE(w.vb().CloseDevice(w.b().ctx).ok());
  EXPECT_EQ(w.fabric().LiveCount(ObjectKind::kQp), 0u);
  EXPECT_EQ(w.fabric().LiveObjects().size(), 5u);
  EXPECT_EQ(w.fabric().CreatedCount(ObjectKind::kQp), 2u);
  // Dependents keep their parents: a PD with an MR cannot be freed.
  EXPECT_EQ(w.va().DeallocPd(w.a().pd).code(), absl::StatusCode::kUnavailable);
}

// ---------------------------------------------------------------- fault plans

TEST(FaultPlan, DrawIsDeterministicSwarmAndPrintable) {
  Prng a(42), b(42);
  FaultPlan pa = FaultPlan::Draw(a), pb = FaultPlan::Draw(b);
  EXPECT_EQ(pa.ToString(), pb.ToString());
  int enabled = 0;
  std::set<std::string> distinct;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    Prng p(seed);
    FaultPlan plan = FaultPlan::Draw(p);
    distinct.insert(plan.ToString());
    for (size_t k = 0; k < kSeededFaultKinds; ++k) enabled += plan.rate[k].num != 0;
  }
  EXPECT_GT(distinct.size(), 60u);
  // Swarm: about half of the kinds per plan.
  EXPECT_GT(enabled, 64 * 18 / 4);
  EXPECT_LT(enabled, 64 * 18 * 3 / 4);
  EXPECT_NE(pa.ToString().find("packet_loss"), std::string::npos);
  EXPECT_NE(pa.ToString().find("ctrl_partition"), std::string::npos);
}

TEST(FaultPlan, ScriptParsesRoundTripsAndRejectsGarbage) {
  auto s = ParseFaultScript(
      "# comment\n"
      "at 500 hung_qp qp:h1/sim0/18\n"
      "at 100 link_down dev:h0/sim0   # trailing\n"
      "\n"
      "at 200 peer_restart host:h1\n"
      "at 300 cq_overrun cq:h0/sim0/1\n");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ((*s)[0].kind, FaultKind::kLinkDown);  // sorted by time
  EXPECT_EQ((*s)[3].ToString(), "at 500 hung_qp qp:h1/sim0/18");
  auto again = ParseFaultScript((*s)[3].ToString());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0].target.number, 18u);
  for (const char* bad :
       {"at x wr_flush qp:h0/sim0/1", "at 1 nope qp:h0/sim0/1", "at 1 wr_flush qp:h0/sim0",
        "on 1 wr_flush qp:h0/sim0/1", "at 1 wr_flush zz:h0"}) {
    auto r = ParseFaultScript(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("line 1"), std::string::npos);
  }
}

TEST(FaultPlan, EveryQpTargetAndDurationsParseAndPrint) {
  auto s = ParseFaultScript(
      "at 5 wr_flush qp:h0/sim0/*\n"
      "at 6 paused_peer host:h1 for 2000000\n"
      "at 7 ctrl_partition host:h0 for 30\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)[0].target.number, kEveryQp);
  EXPECT_EQ((*s)[0].ToString(), "at 5 wr_flush qp:h0/sim0/*");
  EXPECT_EQ((*s)[1].duration_ns, 2'000'000u);
  EXPECT_EQ((*s)[1].ToString(), "at 6 paused_peer host:h1 for 2000000");
  EXPECT_EQ(ParseFaultScript((*s)[2].ToString())->at(0).duration_ns, 30u);
  const std::pair<const char*, const char*> bad[] = {
      {"at 1 paused_peer host:h1", "paused_peer needs 'for <ns>'"},
      {"at 1 paused_peer host:h1 for 0", "paused_peer needs 'for <ns>'"},
      {"at 1 wr_flush qp:h0/sim0/1 for 9", "wr_flush takes no 'for <ns>'"},
      {"at 1 paused_peer host:h1 during 9", "expected 'for <ns>' after the target"},
      {"at 1 cq_overrun cq:h0/sim0/*", "bad number"},
      {"at 1 wr_flush qp:h0/sim0/4294967295", "bad number"},
  };
  for (const auto& [line, why] : bad) {
    auto r = ParseFaultScript(line);
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status();
  }
}

// qp:h<H>/<dev>/*: every live QP of that device, none of the peer's.
TEST(Faults, EveryQpTargetFlushesEachLiveQpOfTheDevice) {
  World w(TestConfig(RnicProfile::kMlx5));
  auto p1 = w.Connect();
  auto p2 = w.Connect();
  ASSERT_TRUE(
      w.fabric().Inject({0, FaultKind::kWrFlush, {TargetKind::kQp, 0, "sim0", kEveryQp}}).ok());
  EXPECT_EQ(w.va().QueryQp(p1.a.qp)->qp_state, QpState::kErr);
  EXPECT_EQ(w.va().QueryQp(p2.a.qp)->qp_state, QpState::kErr);
  EXPECT_EQ(w.vb().QueryQp(p1.b.qp)->qp_state, QpState::kRts);
  ASSERT_TRUE(w.va().DestroyQp(p1.a.qp).ok());
  ASSERT_TRUE(w.va().DestroyQp(p2.a.qp).ok());
  const absl::Status none =
      w.fabric().Inject({0, FaultKind::kLateCqe, {TargetKind::kQp, 0, "sim0", kEveryQp}});
  EXPECT_EQ(none.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(none.message(), "no live qp on qp:h0/sim0/*");
}

TEST(Faults, ScriptedHungQpNeitherExecutesNorFlushes) {
  World w(TestConfig(RnicProfile::kMlx5));
  auto p = w.Connect();
  ASSERT_TRUE(
      w.fabric().Inject({0, FaultKind::kHungQp, {TargetKind::kQp, 0, "sim0", p.a.qp_num}}).ok());
  hal::SendWr wr = w.Write(1, 0, 0, 64);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  w.fabric().RunFor(1'000'000'000);
  hal::QpAttr a;
  a.qp_state = QpState::kErr;
  ASSERT_TRUE(w.va().ModifyQp(p.a.qp, a, hal::kQpState).ok());
  w.fabric().RunFor(1'000'000'000);
  EXPECT_EQ(*w.fabric().OutstandingOf(p.a.qp), 1u);
  EXPECT_EQ(w.fabric().TruthOf(w.a().cq)->present, 0u);
  EXPECT_TRUE(w.va().DestroyQp(p.a.qp).ok());  // destroy still works
}

TEST(Faults, ScriptedPostModifyResourceAndLateCqe) {
  World w(TestConfig(RnicProfile::kMlx5));
  auto p = w.Connect();
  auto script = ParseFaultScript(
      absl::StrFormat("at 0 post_send_enomem qp:h0/sim0/%u\nat 0 modify_qp_fail qp:h0/sim0/%u\n"
                      "at 0 resource_fail host:h0\nat 0 late_cqe qp:h0/sim0/%u\n",
                      p.a.qp_num, p.a.qp_num, p.a.qp_num));
  ASSERT_TRUE(script.ok());
  for (const auto& f : *script) ASSERT_TRUE(w.fabric().Inject(f).ok());
  hal::SendWr wr[2] = {w.Write(1, 0, 0, 8), w.Write(2, 0, 0, 8)};
  auto r = w.va().PostSend(p.a.qp, wr);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.posted(), 0u);
  hal::QpAttr a;
  a.qp_state = QpState::kRts;
  EXPECT_FALSE(w.va().ModifyQp(p.a.qp, a, hal::kQpState).ok());
  EXPECT_EQ(w.va().QueryQp(p.a.qp)->qp_state, QpState::kRts);
  EXPECT_EQ(w.va().OpenDevice("sim0").status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, wr).status.ok());
  const uint64_t t0 = w.clock().NowNs();
  auto wcs = w.PollN(w.a(), 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);  // late, and order kept
  EXPECT_GE(w.clock().NowNs() - t0, w.fabric().config().late_cqe_ns_max);
}

TEST(Faults, PeerRestartReusesQpnsAndStopsTraffic) {
  World w(TestConfig(RnicProfile::kRxe));
  auto p = w.Connect(64, 8, 2);
  const uint32_t old_qpn = p.b.qp_num;
  w.fabric().RestartHost(1);
  EXPECT_EQ(w.fabric().IncarnationOf(1), 2u);
  EXPECT_EQ(w.fabric().LiveCount(ObjectKind::kContext), 1u);
  auto v1 = w.fabric().NewVerbs(1);
  auto ctx = *v1->OpenDevice("sim0");
  auto pd = *v1->AllocPd(ctx);
  auto cq = *v1->CreateCq(ctx, 16, {});
  hal::QpInitAttr init;
  init.send_cq = init.recv_cq = cq.cq;
  init.cap.max_send_wr = 4;
  auto qp = *v1->CreateQp(pd, init);
  EXPECT_EQ(qp.qp_num, old_qpn);  // the new incarnation reuses the QPN
  hal::SendWr wr = w.Write(1, 0, 0, 8);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  auto wcs = w.PollN(w.a(), 1, 10'000'000'000);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);  // the new QP is in RESET: drops
}

// A swarm run: random plan, many WRs on several QPs; every WR gets at most
// one CQE, per-QP order holds, and the same seed replays exactly.
struct SwarmResult {
  std::vector<std::pair<uint32_t, uint64_t>> cqes;
  uint64_t events = 0;
  std::string plan;
};

SwarmResult RunSwarm(uint64_t seed, Trace* trace = nullptr) {
  Prng root(seed);
  Prng plan_prng = root.Fork();
  FabricConfig cfg = TestConfig(seed % 2 == 0 ? RnicProfile::kMlx5 : RnicProfile::kRxe);
  cfg.plan = FaultPlan::Draw(plan_prng);
  cfg.plan.Set(FaultKind::kResourceFail, kNever);
  cfg.plan.Set(FaultKind::kCqOverrun, kNever);
  cfg.plan.Set(FaultKind::kPostSendEnomem, kNever);
  cfg.plan.Set(FaultKind::kModifyQpFail, kNever);
  SwarmResult out;
  out.plan = cfg.plan.ToString();
  World w(cfg, root.Next(), 4096, 1 << 16, trace);
  std::vector<World::Pair> pairs;
  for (int q = 0; q < 4; ++q) pairs.push_back(w.Connect(256, 8, 3));
  for (uint64_t i = 0; i < 100; ++i) {
    for (int q = 0; q < 4; ++q) {
      hal::SendWr wr =
          i % 3 == 0 ? w.Read(i, 1024 * q, 1024 * q, 1500) : w.Write(i, 1024 * q, 1024 * q, 700);
      (void)w.va().PostSend(pairs[q].a.qp, {&wr, 1});
    }
  }
  w.fabric().Settle(5'000'000'000);
  hal::WorkCompletion wc[64];
  for (int guard = 0; guard < 1000; ++guard) {
    auto n = w.va().PollCq(w.a().cq, absl::MakeSpan(wc, 64));
    if (!n.ok() || *n == 0) break;
    for (uint32_t i = 0; i < *n; ++i) out.cqes.emplace_back(wc[i].qp_num, wc[i].wr_id);
  }
  out.events = w.fabric().stats().events;
  return out;
}

TEST(Faults, SwarmRunsKeepOrderAndReplay) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SwarmResult r = RunSwarm(seed);
    std::map<uint32_t, uint64_t> last;
    for (auto [qpn, id] : r.cqes) {
      auto it = last.find(qpn);
      if (it != last.end()) {
        EXPECT_GT(id, it->second) << "seed " << seed << "\n" << r.plan;
      }
      last[qpn] = id;
    }
    EXPECT_LE(r.cqes.size(), 400u);
    SwarmResult again = RunSwarm(seed);
    EXPECT_EQ(r.cqes, again.cqes) << "seed " << seed;
    EXPECT_EQ(r.events, again.events);
  }
}

// The Fabric as a scheduler actor: a poller actor posts and polls; the
// scheduler steps the RNIC when its events are due and jumps virtual time to
// its NextWakeNs when every actor is idle (retransmission included).
class Poller final : public Actor {
 public:
  Poller(World* w, hal::QpHandle qp) : w_(w), qp_(qp) {}
  std::string_view name() const override { return "poller"; }
  bool Runnable() override { return posted_ < 40 || w_->fabric().TruthOf(w_->a().cq)->present > 0; }
  uint64_t Step() override {
    w_->fabric().set_current_actor(1);
    if (posted_ < 40) {
      hal::SendWr wr = w_->Write(posted_, 64 * (posted_ % 16), 64 * (posted_ % 16), 64);
      if (w_->va().PostSend(qp_, {&wr, 1}).status.ok()) ++posted_;
      return 100;
    }
    hal::WorkCompletion wc[8];
    auto n = w_->va().PollCq(w_->a().cq, absl::MakeSpan(wc, 8));
    for (uint32_t i = 0; n.ok() && i < *n; ++i) {
      EXPECT_EQ(wc[i].wr_id, done_);
      EXPECT_EQ(wc[i].status, WcStatus::kSuccess);
      ++done_;
    }
    return 50;
  }
  bool HasWork() override { return done_ < 40; }
  uint64_t done() const { return done_; }

 private:
  World* w_;
  hal::QpHandle qp_;
  uint64_t posted_ = 0;
  uint64_t done_ = 0;
};

TEST(Scheduler, FabricIsAnActorSteppedByTheScheduler) {
  FabricConfig cfg = TestConfig(RnicProfile::kMlx5);
  World w(cfg);
  auto p = w.Connect(64, /*timeout=*/8);
  ASSERT_TRUE(w.fabric()
                  .Inject({0, FaultKind::kPacketLoss, {TargetKind::kQp, 0, "sim0", p.a.qp_num}})
                  .ok());
  ASSERT_TRUE(w.fabric().BindOwner(p.a.qp, 1).ok());
  ASSERT_TRUE(w.fabric().BindOwner(w.a().cq, 1).ok());
  Poller poller(&w, p.a.qp);
  Scheduler sched(Prng(9), &w.clock(), nullptr);
  sched.AddActor(&w.fabric());
  sched.AddActor(&poller);
  RunResult r = sched.Run([&] { return poller.done() == 40; }, 1'000'000, 10'000'000'000);
  EXPECT_EQ(r.outcome, RunOutcome::kDone) << r.detail;
  EXPECT_EQ(poller.done(), 40u);
  EXPECT_GE(w.fabric().stats().retransmits, 1u);
  EXPECT_GT(w.fabric().CallsBy(1), 40u);
  EXPECT_TRUE(w.fabric().violations().empty());
}

TEST(Determinism, TraceHashReplaysAndIgnoresEarlierRuns) {
  Trace alone;
  RunSwarm(7, &alone);
  Trace other, after;
  RunSwarm(4, &other);
  RunSwarm(7, &after);               // seed 7 after seed 4 in the same process
  EXPECT_GT(alone.entries(), 100u);  // every PRNG draw of the RNIC is traced
  EXPECT_EQ(alone.hash(), after.hash());
  EXPECT_NE(alone.hash(), other.hash());
}

}  // namespace
}  // namespace ferry::sim
