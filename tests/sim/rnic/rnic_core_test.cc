// tests/sim/rnic/rnic_core_test.cc: the simulated RNIC's rules of docs/design.md
// section 3 (state table, posting, limits, DMA packets, responder, retry,
// completion order, flush, notification, destroy profiles, overrun, async
// events, device close, QPN reuse, handle misuse), each with an assertion
// that could fail. docs/simulator.md maps rules to these test names.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "gtest/gtest.h"
#include "sim/rnic/fabric.h"
#include "tests/sim/rnic/rnic_world.h"

namespace ferry::sim {
namespace {

using hal::QpState;
using hal::WcStatus;
using testing::TestConfig;
using testing::World;

class Rnic : public ::testing::TestWithParam<RnicProfile> {
 protected:
  FabricConfig Cfg() { return TestConfig(GetParam()); }
};

std::string ProfileParamName(const ::testing::TestParamInfo<RnicProfile>& info) {
  return std::string(RnicProfileName(info.param));
}

QpState StateOf(hal::Verbs& v, hal::QpHandle qp) { return v.QueryQp(qp)->qp_state; }

// ---------------------------------------------------------------- state table

TEST_P(Rnic, StateTableLegalPath) {
  World w(Cfg());
  auto qp = w.MakeQp(w.a());
  EXPECT_EQ(StateOf(w.va(), qp.qp), QpState::kReset);
  ASSERT_TRUE(World::ToInit(w.a(), qp.qp).ok());
  EXPECT_EQ(StateOf(w.va(), qp.qp), QpState::kInit);
  auto peer = w.MakeQp(w.b());
  ASSERT_TRUE(w.ToRtr(w.a(), qp.qp, w.b(), peer.qp_num, 7).ok());
  EXPECT_EQ(StateOf(w.va(), qp.qp), QpState::kRtr);
  ASSERT_TRUE(World::ToRts(w.a(), qp.qp, 9).ok());
  EXPECT_EQ(StateOf(w.va(), qp.qp), QpState::kRts);
  EXPECT_EQ(w.va().QueryQp(qp.qp)->sq_psn, 9u);
  hal::QpAttr a;
  a.qp_state = QpState::kSqd;
  ASSERT_TRUE(w.va().ModifyQp(qp.qp, a, hal::kQpState).ok());
  a.qp_state = QpState::kRts;
  ASSERT_TRUE(w.va().ModifyQp(qp.qp, a, hal::kQpState).ok());
  a.qp_state = QpState::kErr;
  ASSERT_TRUE(w.va().ModifyQp(qp.qp, a, hal::kQpState).ok());
  a.qp_state = QpState::kReset;
  ASSERT_TRUE(w.va().ModifyQp(qp.qp, a, hal::kQpState).ok());
  EXPECT_EQ(StateOf(w.va(), qp.qp), QpState::kReset);
}

TEST_P(Rnic, StateTableIllegalTransitionOrMaskChangesNothing) {
  World w(Cfg());
  auto qp = w.MakeQp(w.a());
  hal::QpAttr a;
  a.qp_state = QpState::kRtr;  // RESET -> RTR is illegal
  EXPECT_EQ(w.va().ModifyQp(qp.qp, a, hal::kQpState | hal::kQpAv).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StateOf(w.va(), qp.qp), QpState::kReset);
  a.qp_state = QpState::kInit;  // missing required PORT / ACCESS_FLAGS
  EXPECT_FALSE(w.va().ModifyQp(qp.qp, a, hal::kQpState | hal::kQpPkeyIndex).ok());
  EXPECT_EQ(StateOf(w.va(), qp.qp), QpState::kReset);
  // An extra bit outside req|opt fails the whole call, attributes included.
  a.qp_access_flags = hal::kAccessRemoteRead;
  EXPECT_FALSE(w.va()
                   .ModifyQp(qp.qp, a,
                             hal::kQpState | hal::kQpPkeyIndex | hal::kQpPort |
                                 hal::kQpAccessFlags | hal::kQpSqPsn)
                   .ok());
  EXPECT_EQ(StateOf(w.va(), qp.qp), QpState::kReset);
  EXPECT_EQ(w.va().QueryQp(qp.qp)->qp_access_flags, 0u);
  ASSERT_TRUE(World::ToInit(w.a(), qp.qp).ok());
  a.qp_state = QpState::kRts;  // INIT -> RTS is illegal
  EXPECT_FALSE(w.va()
                   .ModifyQp(qp.qp, a,
                             hal::kQpState | hal::kQpSqPsn | hal::kQpTimeout | hal::kQpRetryCnt |
                                 hal::kQpRnrRetry | hal::kQpMaxQpRdAtomic)
                   .ok());
  EXPECT_EQ(StateOf(w.va(), qp.qp), QpState::kInit);
}

TEST_P(Rnic, ReadDepthsAboveTheDeviceLimitsAreRefused) {
  // ibv_modify_qp: max_dest_rd_atomic <= max_qp_rd_atom (RTR) and
  // max_rd_atomic <= max_qp_init_rd_atom (RTS), else EINVAL and the QP
  // stays where it was (rxe_qp_chk_attr; both 128 on rxe, 16 on mlx5).
  World w(Cfg());
  const hal::DeviceAttr dev = *w.va().QueryDevice(w.a().ctx);
  ASSERT_GE(dev.max_qp_rd_atom, 16u);
  ASSERT_LT(dev.max_qp_init_rd_atom, 255u);
  auto qp = w.MakeQp(w.a());
  auto peer = w.MakeQp(w.b());
  ASSERT_TRUE(World::ToInit(w.a(), qp.qp).ok());
  hal::QpAttr a;
  a.qp_state = QpState::kRtr;
  a.path_mtu = hal::Mtu::k1024;
  a.dest_qp_num = peer.qp_num;
  a.min_rnr_timer = 12;
  a.ah_attr.dgid = *w.vb().QueryGid(w.b().ctx, 1, 0);
  const uint32_t rtr = hal::kQpState | hal::kQpAv | hal::kQpPathMtu | hal::kQpDestQpn |
                       hal::kQpRqPsn | hal::kQpMaxDestRdAtomic | hal::kQpMinRnrTimer;
  a.max_dest_rd_atomic = static_cast<uint8_t>(dev.max_qp_rd_atom + 1);
  EXPECT_EQ(w.va().ModifyQp(qp.qp, a, rtr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StateOf(w.va(), qp.qp), QpState::kInit);
  a.max_dest_rd_atomic = static_cast<uint8_t>(dev.max_qp_rd_atom);
  ASSERT_TRUE(w.va().ModifyQp(qp.qp, a, rtr).ok());
  hal::QpAttr r;
  r.qp_state = QpState::kRts;
  r.timeout = 14;
  r.retry_cnt = 7;
  r.rnr_retry = 7;
  const uint32_t rts = hal::kQpState | hal::kQpSqPsn | hal::kQpTimeout | hal::kQpRetryCnt |
                       hal::kQpRnrRetry | hal::kQpMaxQpRdAtomic;
  r.max_rd_atomic = static_cast<uint8_t>(dev.max_qp_init_rd_atom + 1);
  EXPECT_EQ(w.va().ModifyQp(qp.qp, r, rts).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StateOf(w.va(), qp.qp), QpState::kRtr);
  r.max_rd_atomic = static_cast<uint8_t>(dev.max_qp_init_rd_atom);
  ASSERT_TRUE(w.va().ModifyQp(qp.qp, r, rts).ok());
  EXPECT_EQ(StateOf(w.va(), qp.qp), QpState::kRts);
}

TEST_P(Rnic, StateTableRejectsResetToErr) {
  // The kernel's core table has no RESET->ERR entry (EINVAL on rxe, 6.1).
  World w(Cfg());
  auto qp = w.MakeQp(w.a());
  hal::QpAttr a;
  a.qp_state = QpState::kErr;
  const absl::Status s = w.va().ModifyQp(qp.qp, a, hal::kQpState);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StateOf(w.va(), qp.qp), QpState::kReset);
}

TEST_P(Rnic, RetryCnt7IsForeverOnRxeOnly) {
  World w(Cfg());
  auto p = w.Connect(64, /*timeout=*/8, /*retry=*/7, /*b_stays_in_init=*/true);
  hal::SendWr wr = w.Write(1, 0, 0, 64);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  w.fabric().RunFor(100 * (uint64_t{4096} << 8));
  if (GetParam() == RnicProfile::kRxe) {
    EXPECT_EQ(*w.fabric().OutstandingOf(p.a.qp), 1u);  // rxe_comp.c never counts 7 down
    EXPECT_GE(*w.fabric().RetransmitsOf(p.a.qp), 90u);
  } else {
    EXPECT_EQ(*w.fabric().OutstandingOf(p.a.qp), 0u);
    EXPECT_EQ(*w.fabric().RetransmitsOf(p.a.qp), 7u);
  }
}

// ---------------------------------------------------------------- posting

TEST_P(Rnic, PostChainStopsAtFirstBadWr) {
  World w(Cfg());
  auto p = w.Connect();
  hal::SendWr chain[3] = {w.Write(1, 0, 0, 64), w.Write(2, 64, 64, 64), w.Write(3, 128, 128, 64)};
  chain[1].num_sge = 3;  // more than max_send_sge (2)
  auto r = w.va().PostSend(p.a.qp, chain);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.posted(), 1u);
  auto wcs = w.PollN(w.a(), 3, 10'000'000);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
}

TEST_P(Rnic, PostBelowRtsFailsEinval) {
  World w(Cfg());
  auto qp = w.MakeQp(w.a());
  hal::SendWr wr = w.Write(1, 0, 0, 8);
  EXPECT_EQ(w.va().PostSend(qp.qp, {&wr, 1}).status.code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(World::ToInit(w.a(), qp.qp).ok());
  EXPECT_EQ(w.va().PostSend(qp.qp, {&wr, 1}).status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*w.fabric().OutstandingOf(qp.qp), 0u);
}

TEST_P(Rnic, PostInErrIsFlushedAtOnce) {
  World w(Cfg());
  auto p = w.Connect();
  hal::QpAttr a;
  a.qp_state = QpState::kErr;
  ASSERT_TRUE(w.va().ModifyQp(p.a.qp, a, hal::kQpState).ok());
  hal::SendWr wr = w.Write(77, 0, 0, 8, /*signaled=*/false);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  auto wcs = w.PollN(w.a(), 1, 1'000'000);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 77u);
  EXPECT_EQ(wcs[0].status, WcStatus::kWrFlushErr);
}

TEST_P(Rnic, PostSlotFreesOnPollNotOnExecution) {
  World w(Cfg());
  auto p = w.Connect(/*depth=*/4);
  const uint32_t depth = w.va().QueryQp(p.a.qp)->cap.max_send_wr;
  ASSERT_EQ(depth, 4u);
  for (uint32_t i = 0; i < depth; ++i) {
    hal::SendWr wr = w.Write(i, 0, 0, 8);
    ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  }
  w.fabric().Settle(1'000'000'000);
  EXPECT_EQ(*w.fabric().OutstandingOf(p.a.qp), 0u);  // all executed...
  hal::SendWr wr = w.Write(9, 0, 0, 8);
  EXPECT_EQ(w.va().PostSend(p.a.qp, {&wr, 1}).status.code(),
            absl::StatusCode::kResourceExhausted);  // ...but not polled
  hal::WorkCompletion wc[1];
  ASSERT_EQ(*w.va().PollCq(w.a().cq, absl::MakeSpan(wc, 1)), 1u);
  EXPECT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
}

TEST_P(Rnic, DeviceLimitsEnforced) {
  FabricConfig cfg = Cfg();
  hal::DeviceAttr lim = ProfileLimits(cfg.profile);
  lim.max_qp = 2;
  lim.max_cq = 2;
  lim.max_mr = 2;
  lim.max_cqe = 64;
  lim.max_qp_wr = 16;
  lim.max_sge = 2;
  cfg.limits = lim;
  World w(cfg, 1, 32, 4096);  // one CQ and one MR per side already
  EXPECT_EQ(w.va().QueryDevice(w.a().ctx)->max_qp, 2u);
  std::vector<uint8_t> extra(64);
  EXPECT_TRUE(w.va().RegMr(w.a().pd, extra.data(), 64, 1).ok());
  EXPECT_EQ(w.va().RegMr(w.a().pd, extra.data(), 64, 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(w.va().CreateCq(w.a().ctx, 65, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(w.va().CreateCq(w.a().ctx, 64, {}).ok());
  EXPECT_EQ(w.va().CreateCq(w.a().ctx, 8, {}).status().code(),
            absl::StatusCode::kResourceExhausted);
  hal::QpInitAttr init;
  init.send_cq = init.recv_cq = w.a().cq;
  init.cap.max_send_wr = 17;
  EXPECT_EQ(w.va().CreateQp(w.a().pd, init).status().code(), absl::StatusCode::kInvalidArgument);
  init.cap.max_send_wr = 16;
  init.cap.max_send_sge = 3;
  EXPECT_EQ(w.va().CreateQp(w.a().pd, init).status().code(), absl::StatusCode::kInvalidArgument);
  init.cap.max_send_sge = 2;
  EXPECT_TRUE(w.va().CreateQp(w.a().pd, init).ok());
  EXPECT_TRUE(w.va().CreateQp(w.a().pd, init).ok());
  EXPECT_EQ(w.va().CreateQp(w.a().pd, init).status().code(), absl::StatusCode::kResourceExhausted);
}

// ---------------------------------------------------------------- DMA

TEST_P(Rnic, DmaWriteAndReadMoveRealBytesInPackets) {
  World w(Cfg());
  auto p = w.Connect();
  for (size_t i = 0; i < 4096; ++i) w.a().buf[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < 4096; ++i) w.b().buf[8192 + i] = static_cast<uint8_t>(i * 3);
  hal::SendWr wrs[2] = {w.Write(1, 0, 0, 4096), w.Read(2, 16384, 8192, 4096)};
  const uint64_t before = w.fabric().stats().packets_executed;
  ASSERT_TRUE(w.va().PostSend(p.a.qp, wrs).status.ok());
  auto wcs = w.PollN(w.a(), 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[1].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[1].byte_len, 4096u);
  EXPECT_EQ(0, std::memcmp(w.a().buf.data(), w.b().buf.data(), 4096));
  EXPECT_EQ(0, std::memcmp(w.a().buf.data() + 16384, w.b().buf.data() + 8192, 4096));
  EXPECT_EQ(w.fabric().stats().packets_executed - before, 8u);  // 2 x ceil(4096/1024)
}

TEST_P(Rnic, DmaFailedWrLeavesPlacedPacketsInPlace) {
  FabricConfig cfg = Cfg();
  cfg.link_jitter_ns = 0;
  World w(cfg);
  auto p = w.Connect();
  std::fill(w.a().buf.begin(), w.a().buf.begin() + 8192, 0xAB);
  hal::SendWr wr = w.Write(1, 0, 0, 8192);  // 8 packets
  const uint64_t t0 = w.clock().NowNs();
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  // Packet i arrives at t0 + 86*(i+1) + latency: let three land.
  w.fabric().RunUntil(t0 + cfg.link_latency_ns + 86 * 3 + 20);
  ASSERT_TRUE(w.vb().DeregMr(w.b().mr.mr).ok());  // the target fences its memory
  auto wcs = w.PollN(w.a(), 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(w.b().buf[0], 0xAB);
  EXPECT_EQ(w.b().buf[3 * 1024 - 1], 0xAB);
  EXPECT_EQ(w.b().buf[3 * 1024], 0x11);  // never placed
  EXPECT_EQ(w.b().buf[8191], 0x11);
}

TEST_P(Rnic, RetransmitAfterLossCompletesWithRightBytes) {
  World w(Cfg());
  auto p = w.Connect(64, /*timeout=*/8);
  ASSERT_TRUE(w.fabric()
                  .Inject({0, FaultKind::kPacketLoss, {TargetKind::kQp, 0, "sim0", p.a.qp_num}})
                  .ok());
  for (size_t i = 0; i < 3000; ++i) w.a().buf[i] = static_cast<uint8_t>(i);
  hal::SendWr wr = w.Write(1, 0, 0, 3000);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  auto wcs = w.PollN(w.a(), 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_GE(*w.fabric().RetransmitsOf(p.a.qp), 1u);
  EXPECT_EQ(0, std::memcmp(w.a().buf.data(), w.b().buf.data(), 3000));
}

// Regression (ferry-bench, WRITE 4 KiB, 4 streams, --verify: p999 67 ms =
// the ACK timeout with no fault): a WRITE whose last packet had a READ
// request right behind it on the wire got no coalesced ACK (the responder
// waited for "more" packets), and the READ response did not acknowledge the
// WRITE at the requester (IBA: a READ response implicitly acknowledges every
// earlier request), so the WRITE waited for the retransmit timer.
TEST_P(Rnic, NoTimeoutWithoutLossWhenReadFollowsWrite) {
  World w(Cfg());
  auto p = w.Connect(64, /*timeout=*/14);
  hal::SendWr wrs[2] = {w.Write(1, 0, 0, 4096), w.Read(2, 16384, 8192, 4096)};
  const uint64_t t0 = w.clock().NowNs();
  ASSERT_TRUE(w.va().PostSend(p.a.qp, wrs).status.ok());
  auto wcs = w.PollN(w.a(), 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[1].status, WcStatus::kSuccess);
  EXPECT_LT(w.clock().NowNs() - t0, 100'000u);  // the timeout is 67 ms
  EXPECT_EQ(*w.fabric().RetransmitsOf(p.a.qp), 0u);
  EXPECT_EQ(w.fabric().stats().retransmits, 0u);
  EXPECT_EQ(w.fabric().stats().timeouts_without_loss, 0u);
}

// With no fault configured, every packet is delivered and acknowledged: over
// a seeded mix of WRITE and READ chains (sizes 0 B .. 9000 B, unsignaled WRs,
// several QPs on one CQ) no timer may fire and nothing is retransmitted.
TEST_P(Rnic, MixedWorkloadWithoutFaultsNeverRetransmits) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    World w(Cfg(), seed, /*cqe=*/4096);
    constexpr uint32_t kQps = 4;
    std::vector<World::Pair> pairs;
    for (uint32_t i = 0; i < kQps; ++i) pairs.push_back(w.Connect(64, /*timeout=*/14));
    Prng rng(seed * 1000 + 7);
    constexpr uint32_t kSizes[] = {0, 64, 1000, 1024, 4096, 9000};
    uint64_t signaled = 0;
    const uint64_t t0 = w.clock().NowNs();
    for (uint32_t round = 0; round < 40; ++round) {
      for (uint32_t qi = 0; qi < kQps; ++qi) {
        const uint32_t n = 1 + static_cast<uint32_t>(rng.Below(6));
        std::vector<hal::SendWr> chain;
        for (uint32_t k = 0; k < n; ++k) {
          const uint32_t len = kSizes[rng.Below(std::size(kSizes))];
          const bool sig = k + 1 == n || rng.Below(2) == 0;
          const uint64_t id = round * 100 + qi * 10 + k;
          // WRITEs use the low 16 KiB, READs land in the high 16 KiB.
          chain.push_back(rng.Below(2) == 0 ? w.Write(id, 0, 0, len, sig)
                                            : w.Read(id, 16384, 16384, len, sig));
          signaled += sig ? 1 : 0;
        }
        ASSERT_TRUE(w.va().PostSend(pairs[qi].a.qp, chain).status.ok());
      }
      w.fabric().RunFor(rng.Below(20'000));
      // Keep the SQs from filling: poll what is there.
      hal::WorkCompletion wc[64];
      for (int guard = 0; guard < 64; ++guard) {
        auto got = w.va().PollCq(w.a().cq, absl::MakeSpan(wc, 64));
        ASSERT_TRUE(got.ok());
        for (uint32_t i = 0; i < *got; ++i) ASSERT_EQ(wc[i].status, WcStatus::kSuccess);
        signaled -= *got;
        if (*got == 0) break;
      }
    }
    auto wcs = w.PollN(w.a(), signaled);
    ASSERT_EQ(wcs.size(), signaled) << "seed " << seed;
    for (const auto& wc : wcs) EXPECT_EQ(wc.status, WcStatus::kSuccess);
    EXPECT_LT(w.clock().NowNs() - t0, 67'000'000u) << "seed " << seed;
    EXPECT_EQ(w.fabric().stats().retransmits, 0u) << "seed " << seed;
    EXPECT_EQ(w.fabric().stats().duplicates, 0u) << "seed " << seed;
    EXPECT_EQ(w.fabric().stats().packets_dropped, 0u) << "seed " << seed;
    EXPECT_EQ(w.fabric().stats().timeouts_without_loss, 0u) << "seed " << seed;
  }
}

// Link bandwidth is per port and direction: two QPs of one device share
// their port's egress (together at most link_gbps), and READ responses are
// serialized on the responder's port like WRITE packets.
TEST_P(Rnic, PortSerializationIsSharedAcrossQpsAndCoversReadResponses) {
  FabricConfig cfg = Cfg();
  cfg.link_jitter_ns = 0;
  World w(cfg, 1, 256, 1 << 20);
  auto p0 = w.Connect();
  auto p1 = w.Connect();
  constexpr uint32_t kLen = 256 * 1024;
  // Wire time of one 256 KiB WR at 100 Gb/s (MTU 1024 + 58 B headers).
  const uint64_t wire_ns = (kLen / 1024) * ((1024 + 58) * 8 / cfg.link_gbps);
  hal::SendWr a = w.Write(1, 0, 0, kLen);
  hal::SendWr b = w.Write(2, kLen, kLen, kLen);
  uint64_t t0 = w.clock().NowNs();
  ASSERT_TRUE(w.va().PostSend(p0.a.qp, {&a, 1}).status.ok());
  ASSERT_TRUE(w.va().PostSend(p1.a.qp, {&b, 1}).status.ok());
  auto wcs = w.PollN(w.a(), 2);
  ASSERT_EQ(wcs.size(), 2u);
  // Per-QP serialization would finish both in about one wire time.
  EXPECT_GE(w.clock().NowNs() - t0, 2 * wire_ns);
  EXPECT_LT(w.clock().NowNs() - t0, 2 * wire_ns + 20'000);
  // A READ's data crosses the link in the responses: at least its wire time.
  hal::SendWr r = w.Read(3, 2 * kLen, 0, kLen);
  t0 = w.clock().NowNs();
  ASSERT_TRUE(w.va().PostSend(p0.a.qp, {&r, 1}).status.ok());
  wcs = w.PollN(w.a(), 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_GE(w.clock().NowNs() - t0, wire_ns);
  EXPECT_EQ(0, std::memcmp(w.a().buf.data() + 2 * kLen, w.b().buf.data(), kLen));
  EXPECT_EQ(w.fabric().stats().retransmits, 0u);
}

TEST_P(Rnic, RequesterKeepsAtMostMaxRdAtomicReadsInFlight) {
  // The requester sends a READ only while fewer than max_rd_atomic READs
  // are outstanding on its QP (verbs max_rd_atomic; rxe_req.c counts them
  // in qp->req.rd_atomic): at 1,
  // four READs take four round trips; at 4, about one.
  FabricConfig cfg = Cfg();
  cfg.link_jitter_ns = 0;
  const uint64_t rtt_ns = 2 * cfg.link_latency_ns;
  uint64_t elapsed_ns[2] = {0, 0};
  uint64_t waits[2] = {0, 0};
  const uint8_t depths[2] = {1, 4};
  for (int k = 0; k < 2; ++k) {
    World w(cfg);
    w.set_rd_atomic(depths[k]);
    auto p = w.Connect();
    std::vector<hal::SendWr> chain;
    for (uint32_t i = 0; i < 4; ++i) chain.push_back(w.Read(10 + i, 64 * i, 64 * i, 64));
    const uint64_t t0 = w.clock().NowNs();
    ASSERT_TRUE(w.va().PostSend(p.a.qp, chain).status.ok());
    auto wcs = w.PollN(w.a(), 4);
    ASSERT_EQ(wcs.size(), 4u);
    for (uint32_t i = 0; i < 4; ++i) {
      EXPECT_EQ(wcs[i].status, WcStatus::kSuccess);
      EXPECT_EQ(wcs[i].wr_id, 10 + i);  // in order, whatever the depth
    }
    EXPECT_EQ(0, std::memcmp(w.a().buf.data(), w.b().buf.data(), 256));
    elapsed_ns[k] = w.clock().NowNs() - t0;
    waits[k] = w.fabric().stats().read_depth_waits;
  }
  EXPECT_GE(elapsed_ns[0], 4 * rtt_ns) << "4 READs at max_rd_atomic 1 took " << elapsed_ns[0]
                                       << " ns: the requester had more than one READ in flight";
  EXPECT_GT(waits[0], 0u);
  EXPECT_LT(elapsed_ns[1], 2 * rtt_ns)
      << "4 READs at max_rd_atomic 4 took " << elapsed_ns[1] << " ns: they did not go out together";
  EXPECT_EQ(waits[1], 0u);
}

// ---------------------------------------------------------------- responder

TEST_P(Rnic, ResponderInInitDropsSilently) {
  World w(Cfg());
  auto p = w.Connect(64, 14, 7, /*b_stays_in_init=*/true);
  std::fill(w.a().buf.begin(), w.a().buf.begin() + 64, 0xCD);
  hal::SendWr wr = w.Write(1, 0, 0, 64);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  w.fabric().RunFor(10'000'000);
  EXPECT_EQ(w.b().buf[0], 0x11);
  EXPECT_EQ(*w.fabric().OutstandingOf(p.a.qp), 1u);
  EXPECT_EQ(StateOf(w.vb(), p.b.qp), QpState::kInit);
}

TEST_P(Rnic, ResponderDuplicateIsReackedWithoutExecuting) {
  FabricConfig cfg = Cfg();
  cfg.link_jitter_ns = 0;
  World w(cfg);
  auto p = w.Connect(64, /*timeout=*/8);  // ~1 ms
  std::fill(w.a().buf.begin(), w.a().buf.begin() + 64, 0xEE);
  hal::SendWr wr = w.Write(1, 0, 0, 64);
  const uint64_t t0 = w.clock().NowNs();
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  // The request executes; its ACK is lost because the requester's link drops.
  w.fabric().RunUntil(t0 + 500);
  ASSERT_TRUE(w.fabric().SetLinkUp(0, "sim0", false).ok());
  w.fabric().RunUntil(t0 + 1500);
  ASSERT_EQ(w.b().buf[0], 0xEE);
  std::fill(w.b().buf.begin(), w.b().buf.begin() + 64, 0x55);  // sentinel
  ASSERT_TRUE(w.fabric().SetLinkUp(0, "sim0", true).ok());
  const uint64_t dups = w.fabric().stats().duplicates;
  auto wcs = w.PollN(w.a(), 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_GE(w.fabric().stats().duplicates, dups + 1);
  EXPECT_EQ(w.b().buf[0], 0x55);  // the retransmitted duplicate was not executed
}

TEST_P(Rnic, RkeyViolationGivesRemAccessErrAndResponderErr) {
  World w(Cfg());
  auto p = w.Connect();
  hal::SendWr wr = w.Write(1, 0, 0, 64);
  wr.rkey ^= 0x55;
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  auto wcs = w.PollN(w.a(), 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(StateOf(w.va(), p.a.qp), QpState::kErr);
  EXPECT_EQ(StateOf(w.vb(), p.b.qp), QpState::kErr);
  auto ev = w.vb().GetAsyncEvent(w.b().ctx);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->type, hal::AsyncEventType::kQpAccessErr);
  w.vb().AckAsyncEvent(*ev);
  // Bounds violation too.
  auto p2 = w.Connect();
  hal::SendWr big = w.Write(2, 0, w.b().buf.size() - 8, 64);
  ASSERT_TRUE(w.va().PostSend(p2.a.qp, {&big, 1}).status.ok());
  wcs = w.PollN(w.a(), 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(StateOf(w.vb(), p2.b.qp), QpState::kErr);
}

TEST_P(Rnic, InFlightPacketsLandAfterRequesterLeftRts) {
  World w(Cfg());
  auto p = w.Connect();
  std::fill(w.a().buf.begin(), w.a().buf.begin() + 4096, 0x77);
  hal::SendWr wr = w.Write(1, 0, 0, 4096);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  hal::QpAttr a;
  a.qp_state = QpState::kErr;
  ASSERT_TRUE(w.va().ModifyQp(p.a.qp, a, hal::kQpState).ok());  // before any packet arrived
  auto wcs = w.PollN(w.a(), 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kWrFlushErr);
  w.fabric().Settle(10'000'000);
  EXPECT_EQ(w.b().buf[0], 0x77);  // the packets still executed at the responder
  EXPECT_EQ(w.b().buf[4095], 0x77);
}

// ---------------------------------------------------------------- retry

TEST_P(Rnic, RetryExhaustionTowardPeerInInitTakesRetryBudget) {
  World w(Cfg());
  const uint8_t timeout = 10, retry = 3;
  auto p = w.Connect(64, timeout, retry, /*b_stays_in_init=*/true);
  hal::SendWr wr = w.Write(5, 0, 0, 64);
  const uint64_t t0 = w.clock().NowNs();
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  auto wcs = w.PollN(w.a(), 1, 10'000'000'000);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(wcs[0].wr_id, 5u);
  const uint64_t t_ns = uint64_t{4096} << timeout;
  const uint64_t took = w.clock().NowNs() - t0;
  EXPECT_GE(took, (retry + 1) * t_ns);
  EXPECT_LE(took, (retry + 1) * t_ns + t_ns / 2);
  EXPECT_EQ(StateOf(w.va(), p.a.qp), QpState::kErr);
  EXPECT_EQ(*w.fabric().RetransmitsOf(p.a.qp), retry);
}

TEST_P(Rnic, RetryPeerReadyInsideBudgetSucceeds) {
  World w(Cfg());
  auto p = w.Connect(64, 10, 7, /*b_stays_in_init=*/true);
  std::fill(w.a().buf.begin(), w.a().buf.begin() + 64, 0x42);
  hal::SendWr wr = w.Write(5, 0, 0, 64);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  w.fabric().RunFor(3 * (uint64_t{4096} << 10));
  ASSERT_TRUE(w.ToRtr(w.b(), p.b.qp, w.a(), p.a.qp_num, 0x100).ok());
  auto wcs = w.PollN(w.a(), 1, 10'000'000'000);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(w.b().buf[0], 0x42);
}

TEST_P(Rnic, RetryTimeoutZeroWaitsForever) {
  World w(Cfg());
  auto p = w.Connect(64, /*timeout=*/0, 7, /*b_stays_in_init=*/true);
  hal::SendWr wr = w.Write(5, 0, 0, 64);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  w.fabric().RunFor(100'000'000'000);
  EXPECT_EQ(*w.fabric().OutstandingOf(p.a.qp), 1u);
  EXPECT_EQ(StateOf(w.va(), p.a.qp), QpState::kRts);
}

// ---------------------------------------------------------------- order

// True when, per QP, wr_ids arrive in increasing order.
bool PerQpOrderHolds(const std::vector<hal::WorkCompletion>& wcs) {
  std::map<uint32_t, uint64_t> last;
  for (const auto& wc : wcs) {
    auto it = last.find(wc.qp_num);
    if (it != last.end() && wc.wr_id <= it->second) return false;
    last[wc.qp_num] = wc.wr_id;
  }
  return true;
}

std::vector<hal::WorkCompletion> RunOrderWorkload(FabricConfig cfg, uint64_t seed, int qps,
                                                  int per_qp, uint64_t cqe_jitter_ns = 3000) {
  cfg.cqe_jitter_ns = cqe_jitter_ns;
  World w(cfg, seed, 1024);
  std::vector<World::Pair> pairs;
  for (int q = 0; q < qps; ++q) pairs.push_back(w.Connect(128));
  for (int i = 0; i < per_qp; ++i) {
    for (int q = 0; q < qps; ++q) {
      hal::SendWr wr = w.Write(static_cast<uint64_t>(i), 64 * q, 64 * q, 64);
      FERRY_CHECK(w.va().PostSend(pairs[q].a.qp, {&wr, 1}).status.ok());
    }
  }
  return w.PollN(w.a(), static_cast<size_t>(qps * per_qp));
}

TEST_P(Rnic, OrderPerQpPostOrderKeptUnderJitter) {
  auto wcs = RunOrderWorkload(Cfg(), 3, 2, 100);
  ASSERT_EQ(wcs.size(), 200u);
  EXPECT_TRUE(PerQpOrderHolds(wcs));
}

TEST_P(Rnic, OrderAcrossQpsInterleavesInSeededOrder) {
  // Default config: no CQE jitter; the link jitter alone interleaves QPs.
  auto one = RunOrderWorkload(Cfg(), 5, 4, 20, 0);
  auto again = RunOrderWorkload(Cfg(), 5, 4, 20, 0);
  auto other = RunOrderWorkload(Cfg(), 6, 4, 20, 0);
  ASSERT_EQ(one.size(), 80u);
  auto qpns = [](const std::vector<hal::WorkCompletion>& v) {
    std::vector<uint32_t> out;
    for (auto& wc : v) out.push_back(wc.qp_num);
    return out;
  };
  EXPECT_EQ(qpns(one), qpns(again));  // same seed, same interleaving
  EXPECT_NE(qpns(one), qpns(other));  // another seed, another interleaving
  // Not one QP after the other (that would be 3 switches); ACKs are
  // coalesced, so completions come in per-QP bursts.
  int switches = 0;
  for (size_t i = 1; i < one.size(); ++i) switches += one[i].qp_num != one[i - 1].qp_num;
  EXPECT_GT(switches, 3);
}

// ---------------------------------------------------------------- flush

// Checks the error-then-flush rule on `wcs` for wr_ids [0, n): ids < fail
// succeed, `fail` has `status`, every later one is WR_FLUSH_ERR, in order.
bool ErrorThenFlushHolds(const std::vector<hal::WorkCompletion>& wcs, uint64_t n, uint64_t fail,
                         WcStatus status) {
  if (wcs.size() != n) return false;
  for (uint64_t i = 0; i < n; ++i) {
    if (wcs[i].wr_id != i) return false;
    const WcStatus want =
        i < fail ? WcStatus::kSuccess : (i == fail ? status : WcStatus::kWrFlushErr);
    if (wcs[i].status != want) return false;
  }
  return true;
}

TEST_P(Rnic, FlushErrorThenFlushInPostOrder) {
  World w(Cfg());
  auto p = w.Connect();
  std::vector<hal::SendWr> chain;
  for (uint64_t i = 0; i < 6; ++i) chain.push_back(w.Write(i, 64 * i, 64 * i, 64));
  chain[3].rkey ^= 0x1;  // the failing WR
  ASSERT_TRUE(w.va().PostSend(p.a.qp, chain).status.ok());
  auto wcs = w.PollN(w.a(), 6, 1'000'000'000);
  EXPECT_TRUE(ErrorThenFlushHolds(wcs, 6, 3, WcStatus::kRemAccessErr)) << wcs.size();
}

TEST_P(Rnic, FlushModifyToErrFlushesUnsignaledToo) {
  World w(Cfg());
  auto p = w.Connect(64, 14, 7, /*b_stays_in_init=*/true);  // nothing completes
  std::vector<hal::SendWr> chain;
  for (uint64_t i = 0; i < 5; ++i) chain.push_back(w.Write(i, 0, 0, 64, /*signaled=*/i % 2 == 0));
  ASSERT_TRUE(w.va().PostSend(p.a.qp, chain).status.ok());
  w.fabric().RunFor(1'000'000);
  hal::QpAttr a;
  a.qp_state = QpState::kErr;
  ASSERT_TRUE(w.va().ModifyQp(p.a.qp, a, hal::kQpState).ok());
  auto wcs = w.PollN(w.a(), 5, 1'000'000);
  EXPECT_TRUE(ErrorThenFlushHolds(wcs, 5, 0, WcStatus::kWrFlushErr)) << wcs.size();
}

TEST_P(Rnic, ErrorCqeFieldsOnlyIdStatusQpnVendorAreValid) {
  World w(Cfg(), 11);
  auto p = w.Connect(128, 14, 7, true);
  std::vector<hal::SendWr> chain;
  for (uint64_t i = 0; i < 64; ++i) chain.push_back(w.Write(1000 + i, 0, 0, 64));
  ASSERT_TRUE(w.va().PostSend(p.a.qp, chain).status.ok());
  hal::QpAttr a;
  a.qp_state = QpState::kErr;
  ASSERT_TRUE(w.va().ModifyQp(p.a.qp, a, hal::kQpState).ok());
  auto wcs = w.PollN(w.a(), 64);
  ASSERT_EQ(wcs.size(), 64u);
  std::set<uint32_t> lens;
  std::set<int> opcodes;
  for (size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].wr_id, 1000 + i);
    EXPECT_EQ(wcs[i].status, WcStatus::kWrFlushErr);
    EXPECT_EQ(wcs[i].qp_num, p.a.qp_num);
    lens.insert(wcs[i].byte_len);
    opcodes.insert(static_cast<int>(wcs[i].opcode));
    if (GetParam() == RnicProfile::kRxe) {
      EXPECT_EQ(wcs[i].opcode, hal::Opcode::kSend);  // raw 0: IBV_WC_SEND
      EXPECT_EQ(wcs[i].vendor_err, 0u);
    }
  }
  EXPECT_GT(lens.size(), 32u);  // garbage, not the real 64
  if (GetParam() == RnicProfile::kMlx5) {
    EXPECT_GT(opcodes.size(), 1u);
  }
}

// ---------------------------------------------------------------- notify

TEST_P(Rnic, NotifyIsOneShot) {
  World w(Cfg());
  auto p = w.Connect();
  EXPECT_EQ(w.va().GetCqEvent(w.a().ch).status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(w.va().ReqNotifyCq(w.a().cq, false).ok());
  hal::SendWr wr[2] = {w.Write(1, 0, 0, 8), w.Write(2, 0, 0, 8)};
  ASSERT_TRUE(w.va().PostSend(p.a.qp, wr).status.ok());
  w.fabric().Settle(1'000'000'000);
  auto ev = w.va().GetCqEvent(w.a().ch);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(*ev, w.a().cq);
  EXPECT_FALSE(w.va().GetCqEvent(w.a().ch).ok());  // second CQE: no event
  w.va().AckCqEvents(w.a().cq, 1);
  ASSERT_TRUE(w.va().ReqNotifyCq(w.a().cq, false).ok());
  EXPECT_FALSE(w.va().GetCqEvent(w.a().ch).ok());  // CQEs before arming do not fire
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr[0], 1}).status.ok());
  w.fabric().Settle(1'000'000'000);
  EXPECT_TRUE(w.va().GetCqEvent(w.a().ch).ok());
  w.va().AckCqEvents(w.a().cq, 1);
  EXPECT_TRUE(w.fabric().violations().empty());
}

// ---------------------------------------------------------------- destroy

TEST_P(Rnic, DestroyFailureKeepsQpAliveAndWorking) {
  World w(Cfg());
  auto p = w.Connect();
  ASSERT_TRUE(w.fabric()
                  .Inject({0, FaultKind::kDestroyQpFail, {TargetKind::kQp, 0, "sim0", p.a.qp_num}})
                  .ok());
  absl::Status s = w.va().DestroyQp(p.a.qp);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;  // EBUSY
  EXPECT_TRUE(w.fabric().TrueStateOf(p.a.qp).ok());
  hal::SendWr wr = w.Write(1, 0, 0, 8);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  EXPECT_EQ(w.PollN(w.a(), 1).size(), 1u);
  EXPECT_TRUE(w.va().DestroyQp(p.a.qp).ok());
}

TEST_P(Rnic, DestroySuccessMeansNoExecutionOrCompletionAfter) {
  World w(Cfg());
  auto p = w.Connect();
  ASSERT_TRUE(w.fabric()
                  .Inject({0, FaultKind::kDestroyQpFail, {TargetKind::kQp, 0, "sim0", p.a.qp_num}})
                  .ok());
  std::fill(w.a().buf.begin(), w.a().buf.begin() + 4096, 0x99);
  hal::SendWr wr = w.Write(1, 0, 0, 4096);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  // The engine's retire ladder: retry destroy until it succeeds.
  absl::Status s;
  for (int i = 0; i < 5; ++i) {
    s = w.va().DestroyQp(p.a.qp);
    if (s.ok()) break;
  }
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(w.fabric().TrueStateOf(p.a.qp).ok()) << "QP still alive after destroy said OK";
  w.fabric().Settle(1'000'000'000);
  EXPECT_EQ(w.b().buf[0], 0x11) << "a destroyed QP's packets executed";
  hal::WorkCompletion wc[4];
  EXPECT_EQ(*w.va().PollCq(w.a().cq, absl::MakeSpan(wc, 4)), 0u);
}

TEST_P(Rnic, DestroyProfileMlx5ScrubsRxeLeavesCqes) {
  World w(Cfg());
  auto p = w.Connect();
  std::vector<hal::SendWr> chain;
  for (uint64_t i = 0; i < 5; ++i) chain.push_back(w.Write(i, 0, 0, 8));
  ASSERT_TRUE(w.va().PostSend(p.a.qp, chain).status.ok());
  w.fabric().Settle(1'000'000'000);
  EXPECT_EQ(w.fabric().TruthOf(w.a().cq)->present, 5u);
  ASSERT_TRUE(w.va().DestroyQp(p.a.qp).ok());
  hal::WorkCompletion wc[8];
  const uint32_t left = *w.va().PollCq(w.a().cq, absl::MakeSpan(wc, 8));
  if (GetParam() == RnicProfile::kMlx5) {
    EXPECT_EQ(left, 0u);
  } else {
    EXPECT_EQ(left, 5u);  // leftover CQEs of a destroyed QP
  }
}

TEST_P(Rnic, DestroyProfileModifyToResetScrubsOnMlx5) {
  World w(Cfg());
  auto p = w.Connect();
  hal::SendWr wr = w.Write(1, 0, 0, 8);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  w.fabric().Settle(1'000'000'000);
  hal::QpAttr a;
  a.qp_state = QpState::kReset;
  ASSERT_TRUE(w.va().ModifyQp(p.a.qp, a, hal::kQpState).ok());
  EXPECT_EQ(w.fabric().TruthOf(w.a().cq)->present, GetParam() == RnicProfile::kMlx5 ? 0u : 1u);
}

TEST_P(Rnic, DestroyWithUnackedEventsFailsTheRun) {
  World w(Cfg());
  auto p = w.Connect();
  ASSERT_TRUE(
      w.fabric().Inject({0, FaultKind::kWrFlush, {TargetKind::kQp, 0, "sim0", p.a.qp_num}}).ok());
  auto ev = w.va().GetAsyncEvent(w.a().ctx);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->type, hal::AsyncEventType::kQpFatal);
  EXPECT_EQ(ev->qp, p.a.qp);
  EXPECT_EQ(w.va().DestroyQp(p.a.qp).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(w.fabric().HasViolation(ViolationKind::kUnackedEventsAtDestroy));
  w.va().AckAsyncEvent(*ev);
  w.fabric().ClearViolations();
  EXPECT_TRUE(w.va().DestroyQp(p.a.qp).ok());
  // A CQ with an unacknowledged completion event.
  auto cq = *w.va().CreateCq(w.a().ctx, 16, w.a().ch);
  auto p2 = w.Connect(64, 14, 7, false, cq.cq);
  ASSERT_TRUE(w.va().ReqNotifyCq(cq.cq, false).ok());
  hal::SendWr wr = w.Write(1, 0, 0, 8);
  ASSERT_TRUE(w.va().PostSend(p2.a.qp, {&wr, 1}).status.ok());
  w.fabric().Settle(1'000'000'000);
  ASSERT_TRUE(w.va().GetCqEvent(w.a().ch).ok());
  ASSERT_TRUE(w.va().DestroyQp(p2.a.qp).ok());
  EXPECT_FALSE(w.va().DestroyCq(cq.cq).ok());
  EXPECT_TRUE(w.fabric().HasViolation(ViolationKind::kUnackedEventsAtDestroy));
}

// ---------------------------------------------------------------- overrun

TEST_P(Rnic, OverrunGivesCqErrAndLosesCqes) {
  World w(Cfg(), 1, /*cqe=*/4);
  const uint32_t cap = w.a().cqe;
  auto p = w.Connect(64);
  std::vector<hal::SendWr> chain;
  for (uint64_t i = 0; i <= cap; ++i) chain.push_back(w.Write(i, 0, 0, 8));
  ASSERT_TRUE(w.va().PostSend(p.a.qp, chain).status.ok());
  w.fabric().Settle(1'000'000'000);
  hal::WorkCompletion wc[64];
  EXPECT_FALSE(w.va().PollCq(w.a().cq, absl::MakeSpan(wc, 64)).ok()) << "overrun not detected";
  bool cq_err = false;
  for (int i = 0; i < 8; ++i) {
    auto ev = w.va().GetAsyncEvent(w.a().ctx);
    if (!ev.ok()) break;
    cq_err |= ev->type == hal::AsyncEventType::kCqErr;
    w.va().AckAsyncEvent(*ev);
  }
  EXPECT_TRUE(cq_err);
  EXPECT_TRUE(w.fabric().TruthOf(w.a().cq)->errored);
}

TEST_P(Rnic, OverrunRxeFlushIntoFullCqStopsSilently) {
  if (GetParam() != RnicProfile::kRxe) GTEST_SKIP() << "rxe-only quirk";
  World w(Cfg(), 1, /*cqe=*/4);
  auto done = w.Connect(64);
  std::vector<hal::SendWr> chain;
  for (uint64_t i = 0; i < 4; ++i) chain.push_back(w.Write(i, 0, 0, 8));
  ASSERT_TRUE(w.va().PostSend(done.a.qp, chain).status.ok());
  w.fabric().Settle(1'000'000'000);  // CQ now full (4 of 4)
  auto stuck = w.Connect(64, 14, 7, true);
  ASSERT_TRUE(w.va().PostSend(stuck.a.qp, chain).status.ok());
  hal::QpAttr a;
  a.qp_state = QpState::kErr;
  ASSERT_TRUE(w.va().ModifyQp(stuck.a.qp, a, hal::kQpState).ok());
  w.fabric().Settle(1'000'000'000);
  hal::WorkCompletion wc[16];
  auto n = w.va().PollCq(w.a().cq, absl::MakeSpan(wc, 16));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 4u);  // only the earlier successes; the flush was dropped
  EXPECT_FALSE(w.va().GetAsyncEvent(w.a().ctx).ok());  // no CQ_ERR
  EXPECT_EQ(*w.fabric().OutstandingOf(stuck.a.qp), 0u);
}

// ---------------------------------------------------------------- events

TEST_P(Rnic, EventsPortErrActiveAndRtrFailsAfterActive) {
  World w(Cfg());
  auto qp = w.MakeQp(w.a());
  auto peer = w.MakeQp(w.b());
  ASSERT_TRUE(World::ToInit(w.a(), qp.qp).ok());
  ASSERT_TRUE(w.fabric().SetLinkUp(0, "sim0", false).ok());
  auto ev = w.va().GetAsyncEvent(w.a().ctx);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->type, hal::AsyncEventType::kPortErr);
  w.va().AckAsyncEvent(*ev);
  EXPECT_EQ(w.va().QueryPort(w.a().ctx, 1)->state, hal::PortState::kDown);
  ASSERT_TRUE(w.fabric().SetLinkUp(0, "sim0", true).ok());
  ev = w.va().GetAsyncEvent(w.a().ctx);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->type, hal::AsyncEventType::kPortActive);
  w.va().AckAsyncEvent(*ev);
  EXPECT_EQ(w.ToRtr(w.a(), qp.qp, w.b(), peer.qp_num, 0).code(), absl::StatusCode::kUnavailable);
  w.fabric().RunFor(w.fabric().config().rtr_fail_after_active_ns);
  EXPECT_TRUE(w.ToRtr(w.a(), qp.qp, w.b(), peer.qp_num, 0).ok());
  // Double ack is a bug.
  w.va().AckAsyncEvent(*ev);
  EXPECT_TRUE(w.fabric().HasViolation(ViolationKind::kBadAck));
}

TEST_P(Rnic, EventsDeviceFatalGidChangeCommEst) {
  World w(Cfg());
  auto p = w.Connect(64, 14, 7, true);
  ASSERT_TRUE(w.ToRtr(w.b(), p.b.qp, w.a(), p.a.qp_num, 0x100).ok());  // b at RTR
  hal::SendWr wr = w.Write(1, 0, 0, 8);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  w.fabric().Settle(1'000'000'000);
  auto ev = w.vb().GetAsyncEvent(w.b().ctx);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->type, hal::AsyncEventType::kCommEst);
  w.vb().AckAsyncEvent(*ev);
  auto parsed = ParseFaultScript("at 0 gid_change dev:h1/sim0\nat 0 device_fatal dev:h1/sim0\n");
  ASSERT_TRUE(parsed.ok());
  for (const auto& f : *parsed) ASSERT_TRUE(w.fabric().Inject(f).ok());
  ev = w.vb().GetAsyncEvent(w.b().ctx);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->type, hal::AsyncEventType::kGidChange);
  w.vb().AckAsyncEvent(*ev);
  ev = w.vb().GetAsyncEvent(w.b().ctx);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->type, hal::AsyncEventType::kDeviceFatal);
  w.vb().AckAsyncEvent(*ev);
  EXPECT_EQ(StateOf(w.vb(), p.b.qp), QpState::kErr);
  EXPECT_FALSE(w.vb().AllocPd(w.b().ctx).ok());
}

// ---------------------------------------------------------------- close, QPN, handles

TEST_P(Rnic, CloseDeviceDestroysEverythingAndStopsDma) {
  World w(Cfg());
  auto p = w.Connect();
  std::fill(w.a().buf.begin(), w.a().buf.begin() + 4096, 0x31);
  hal::SendWr wr = w.Write(1, 0, 0, 4096);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  const uint64_t qps_before = w.fabric().LiveCount(ObjectKind::kQp);
  ASSERT_TRUE(w.va().CloseDevice(w.a().ctx).ok());
  EXPECT_EQ(w.fabric().LiveCount(ObjectKind::kQp), qps_before - 1);
  EXPECT_EQ(w.fabric().LiveCount(ObjectKind::kContext), 1u);
  EXPECT_EQ(w.fabric().LiveCount(ObjectKind::kMr), 1u);
  w.fabric().Settle(1'000'000'000);
  EXPECT_EQ(w.b().buf[0], 0x11) << "DMA of a closed context";
  EXPECT_EQ(w.va().PostSend(p.a.qp, {&wr, 1}).status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(w.fabric().HasViolation(ViolationKind::kDestroyedHandle));
}

TEST_P(Rnic, QpnReusedAfterDestroy) {
  World w(Cfg());
  auto q1 = w.MakeQp(w.a());
  const uint32_t qpn = q1.qp_num;
  ASSERT_TRUE(w.va().DestroyQp(q1.qp).ok());
  auto q2 = w.MakeQp(w.a());
  EXPECT_EQ(q2.qp_num, qpn);
  EXPECT_NE(q2.qp, q1.qp);  // handles are never reused
  auto q3 = w.MakeQp(w.a());
  EXPECT_NE(q3.qp_num, q2.qp_num);
}

TEST_P(Rnic, HandleMisuseFailsTheRun) {
  World w(Cfg());
  auto p = w.Connect();
  // Foreign: host 1's QP through host 0's Verbs.
  EXPECT_EQ(w.va().QueryQp(p.b.qp).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(w.fabric().HasViolation(ViolationKind::kForeignHandle));
  // Unknown handle.
  EXPECT_FALSE(w.va().PollCq(hal::CqHandle{999}, {}).ok());
  // Wrong actor.
  ASSERT_TRUE(w.fabric().BindOwner(p.a.qp, 7).ok());
  w.fabric().set_current_actor(8);
  EXPECT_EQ(w.va().QueryQp(p.a.qp).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(w.fabric().HasViolation(ViolationKind::kWrongActor));
  w.fabric().set_current_actor(7);
  EXPECT_TRUE(w.va().QueryQp(p.a.qp).ok());
  EXPECT_EQ(w.fabric().LastCallerOf(p.a.qp), 7u);
  EXPECT_EQ(w.fabric().CallsBy(7), 1u);
  EXPECT_EQ(w.fabric().CallsBy(8), 1u);
  // Destroyed.
  ASSERT_TRUE(w.va().DestroyQp(p.a.qp).ok());
  EXPECT_FALSE(w.va().QueryQp(p.a.qp).ok());
  EXPECT_TRUE(w.fabric().HasViolation(ViolationKind::kDestroyedHandle));
  const auto& v = w.fabric().violations().back();
  EXPECT_EQ(v.actor, 7u);
  EXPECT_NE(v.message.find("destroyed"), std::string::npos);
}

// A stale requester after QPN reuse (docs/design.md section 4, "QP numbers are
// never an identity"): host 1 destroys its QP and creates a new one, which
// gets the same QPN and is connected to a new host-0 QP at new PSNs. Host
// 0's old QP is still RTS and still aims at that QPN. RC hardware answers a
// request to the QP it is connected to (the BTH names only the destination),
// and the new requester ignores a PSN outside its window, so the stale
// WRITE is never acknowledged: it ends in RETRY_EXC_ERR and never lands.
// Returns the stale WR's completion status, and whether its bytes landed.
struct StaleOutcome {
  WcStatus status = WcStatus::kSuccess;
  bool bytes_landed = false;
  bool fresh_pair_works = false;
};
StaleOutcome StaleRequesterAfterQpnReuse(FabricConfig cfg) {
  World w(std::move(cfg));
  auto p = w.Connect(64, /*timeout=*/10, /*retry=*/2);
  // The stale QP's next PSN (0x100) is behind the new responder's (0x9000):
  // a duplicate there, which a responder re-acknowledges without executing.
  FERRY_CHECK(w.vb().DestroyQp(p.b.qp).ok());
  auto b2 = w.MakeQp(w.b());
  FERRY_CHECK_EQ(b2.qp_num, p.b.qp_num);
  auto a2 = w.MakeQp(w.a());
  FERRY_CHECK(World::ToInit(w.a(), a2.qp).ok());
  FERRY_CHECK(World::ToInit(w.b(), b2.qp).ok());
  FERRY_CHECK(w.ToRtr(w.a(), a2.qp, w.b(), b2.qp_num, 0x7000).ok());
  FERRY_CHECK(World::ToRts(w.a(), a2.qp, 0x9000, 10, 2).ok());
  FERRY_CHECK(w.ToRtr(w.b(), b2.qp, w.a(), a2.qp_num, 0x9000).ok());
  FERRY_CHECK(World::ToRts(w.b(), b2.qp, 0x7000, 10, 2).ok());
  for (size_t i = 0; i < 4096; ++i) w.a().buf[i] = static_cast<uint8_t>(i * 7 + 3);
  hal::SendWr stale = w.Write(1, 0, 0, 4096);
  FERRY_CHECK(w.va().PostSend(p.a.qp, {&stale, 1}).status.ok());
  StaleOutcome out;
  auto wcs = w.PollN(w.a(), 1, 1'000'000'000);
  FERRY_CHECK_EQ(wcs.size(), 1u);
  FERRY_CHECK_EQ(wcs[0].qp_num, p.a.qp_num);
  out.status = wcs[0].status;
  out.bytes_landed = std::memcmp(w.a().buf.data(), w.b().buf.data(), 4096) == 0;
  // The new pair is unaffected.
  hal::SendWr fresh = w.Write(2, 8192, 8192, 4096);
  FERRY_CHECK(w.va().PostSend(a2.qp, {&fresh, 1}).status.ok());
  auto wcs2 = w.PollN(w.a(), 1, 1'000'000'000);
  out.fresh_pair_works =
      wcs2.size() == 1 && wcs2[0].qp_num == a2.qp_num && wcs2[0].status == WcStatus::kSuccess;
  return out;
}

TEST_P(Rnic, StaleRequesterAfterQpnReuseIsNeverAcknowledged) {
  const StaleOutcome o = StaleRequesterAfterQpnReuse(Cfg());
  EXPECT_EQ(o.status, WcStatus::kRetryExcErr);
  EXPECT_FALSE(o.bytes_landed);
  EXPECT_TRUE(o.fresh_pair_works);
  // The new requester saw the responder's answers to the stale QP and
  // ignored them as outside its PSN window.
}

// A requester paired with a responder set up from another handshake (seed
// 13854): A sends from PSN 0x0F00 while B expects 0x1000, so A's packets
// are duplicates in B's numbering; B has executed none of them. A posts a
// WRITE then a READ.
struct MispairOutcome {
  WcStatus write_status = WcStatus::kSuccess, read_status = WcStatus::kSuccess;
  bool write_landed = false, read_landed = false;
  std::vector<ViolationKind> violations;
};
MispairOutcome MispairedRequester(FabricConfig cfg) {
  World w(std::move(cfg));
  const hal::QpInfo a = w.ConnectWithPsns(0x0F00, 0x1000).a;
  MispairOutcome out;
  for (const Violation& v : w.fabric().violations()) out.violations.push_back(v.kind);
  w.fabric().ClearViolations();
  for (size_t i = 0; i < 4096; ++i) w.a().buf[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t i = 0; i < 4096; ++i) w.b().buf[8192 + i] = static_cast<uint8_t>(i * 5 + 1);
  std::vector<hal::SendWr> chain = {w.Write(1, 0, 0, 4096), w.Read(2, 16384, 8192, 4096)};
  FERRY_CHECK(w.va().PostSend(a.qp, chain).status.ok());
  auto wcs = w.PollN(w.a(), 2, 1'000'000'000);
  FERRY_CHECK_EQ(wcs.size(), 2u);
  out.write_status = wcs[0].status;
  out.read_status = wcs[1].status;
  out.write_landed = std::memcmp(w.a().buf.data(), w.b().buf.data(), 4096) == 0;
  out.read_landed = std::memcmp(w.a().buf.data() + 16384, w.b().buf.data() + 8192, 4096) == 0;
  return out;
}

// Rules: a duplicate WRITE is re-acknowledged with the PSN of the last
// packet the responder executed (IBA C9-105, rxe duplicate_request), and a
// duplicate READ is re-executed only from a responder resource (a READ it
// ran); the pairing itself is a ground-truth violation.
TEST_P(Rnic, MispairedRequesterIsNeverAcknowledgedForUnplacedBytes) {
  const MispairOutcome o = MispairedRequester(Cfg());
  EXPECT_EQ(o.write_status, WcStatus::kRetryExcErr);
  EXPECT_EQ(o.read_status, WcStatus::kWrFlushErr);
  EXPECT_FALSE(o.write_landed);
  EXPECT_FALSE(o.read_landed);
  EXPECT_EQ(o.violations, std::vector<ViolationKind>(2, ViolationKind::kMispairedQps));
}

// A correctly paired requester whose READ response and the ACKs behind it
// were lost retransmits from the READ: the responder has the READ as a
// resource, runs it again, and the WRITEs around it complete once.
TEST_P(Rnic, RetransmittedReadIsAnsweredFromItsResource) {
  FabricConfig cfg = Cfg();
  cfg.link_jitter_ns = 0;
  World w(cfg);
  auto p = w.Connect(64, /*timeout=*/8, /*retry=*/7);
  EXPECT_TRUE(w.fabric().violations().empty());
  for (size_t i = 0; i < 4096; ++i) w.b().buf[8192 + i] = static_cast<uint8_t>(i * 5 + 1);
  std::vector<hal::SendWr> chain = {w.Write(1, 0, 0, 1024), w.Read(2, 16384, 8192, 4096),
                                    w.Write(3, 4096, 4096, 1024)};
  const uint64_t t0 = w.clock().NowNs();
  ASSERT_TRUE(w.va().PostSend(p.a.qp, chain).status.ok());
  // Every request is on the wire; the responses are lost because the
  // requester's link drops before the responder sends them.
  w.fabric().RunUntil(t0 + 1000);
  ASSERT_TRUE(w.fabric().SetLinkUp(0, "sim0", false).ok());
  w.fabric().RunUntil(t0 + 5000);
  ASSERT_EQ(w.fabric().stats().duplicates, 0u);
  ASSERT_TRUE(w.fabric().SetLinkUp(0, "sim0", true).ok());
  auto wcs = w.PollN(w.a(), 3);
  ASSERT_EQ(wcs.size(), 3u);
  for (const auto& wc : wcs) EXPECT_EQ(wc.status, WcStatus::kSuccess) << wc.wr_id;
  EXPECT_EQ(std::memcmp(w.a().buf.data() + 16384, w.b().buf.data() + 8192, 4096), 0);
  // The retransmission from the READ reached a responder that had run it
  // all: duplicates, the READ answered again from its resource.
  EXPECT_GE(w.fabric().stats().retransmits, 1u);
  EXPECT_GE(w.fabric().stats().duplicates, 4u);
}

// A requester whose READ at the head is never answered while the WRITEs
// behind it are acknowledged: B expects PSN 0x0F05, so A's READ (0x0F00) and
// its first four WRITEs are duplicates to B. B drops the READ (no resource
// for it) and re-acknowledges each duplicate WRITE, and every such ACK is an
// implied NAK at A (the storm of seed 12132945 came from a QP like this one,
// paired by QPN reuse with a restarted peer's QP). Polled with a bound on
// the packets sent, so a storm ends the run instead of the test's time.
struct ImpliedNakOutcome {
  std::vector<hal::WorkCompletion> wcs;
  uint64_t retransmits = 0, suppressed = 0, packets_sent = 0;
};
// With `write_first`, a WRITE goes before the READ and B expects 0x0F06:
// the first duplicate's ACK completes that WRITE (progress, which ends any
// retry under way) and then meets the READ, an implied NAK in the same ACK.
ImpliedNakOutcome UnansweredReadBeforeAckedWrites(FabricConfig cfg, bool write_first = false) {
  cfg.link_jitter_ns = 0;
  World w(std::move(cfg));
  const hal::QpInfo a = w.ConnectWithPsns(0x0F00, write_first ? 0x0F06 : 0x0F05).a;
  w.fabric().ClearViolations();  // the pairing is the point here
  std::vector<hal::SendWr> chain;
  if (write_first) chain.push_back(w.Write(100, 12288, 12288, 1024));
  chain.push_back(w.Read(1, 16384, 8192, 1024));
  for (uint64_t i = 0; i < 8; ++i) chain.push_back(w.Write(2 + i, 1024 * i, 1024 * i, 1024));
  FERRY_CHECK(w.va().PostSend(a.qp, chain).status.ok());
  constexpr uint64_t kPacketsMax = 20'000;
  hal::WorkCompletion wc[32];
  ImpliedNakOutcome out;
  // Bounded by the guard; each round runs one instant of the fabric.
  for (int guard = 0; guard < 100'000 && out.wcs.size() < chain.size(); ++guard) {
    auto got = w.va().PollCq(w.a().cq, absl::MakeSpan(wc, 32));
    FERRY_CHECK(got.ok());
    for (uint32_t i = 0; i < *got; ++i) out.wcs.push_back(wc[i]);
    auto next = w.fabric().NextWakeNs();
    if (!next.has_value() || w.fabric().stats().packets_sent > kPacketsMax) break;
    w.fabric().RunUntil(*next);
  }
  out.retransmits = *w.fabric().RetransmitsOf(a.qp);
  out.suppressed = w.fabric().stats().retries_suppressed;
  out.packets_sent = w.fabric().stats().packets_sent;
  return out;
}

// Rule: every retry counts against retry_cnt, whether a timeout, a
// NAK-sequence error or an implied NAK started it, and while a retry is
// under way a NAK or implied NAK starts no other (rxe's started_retry). The
// READ fails RETRY_EXC_ERR after exactly retry_cnt retransmissions, the
// WRITEs behind it are flushed, and the ACKs that arrived during a retry
// were counted as suppressed.
TEST_P(Rnic, ImpliedNakStartsOneRetryAtATimeAndCountsIt) {
  const ImpliedNakOutcome o = UnansweredReadBeforeAckedWrites(Cfg());
  ASSERT_EQ(o.wcs.size(), 9u) << "packets sent " << o.packets_sent;
  EXPECT_EQ(o.wcs[0].wr_id, 1u);
  EXPECT_EQ(o.wcs[0].status, WcStatus::kRetryExcErr);
  for (size_t i = 1; i < o.wcs.size(); ++i) {
    EXPECT_EQ(o.wcs[i].wr_id, 1 + i);
    EXPECT_EQ(o.wcs[i].status, WcStatus::kWrFlushErr) << i;
  }
  EXPECT_EQ(o.retransmits, 2u);  // retry_cnt
  EXPECT_GE(o.suppressed, 3u);
  EXPECT_LE(o.packets_sent, 3u * 9u + 3u * 9u);  // 3 rounds of requests, an answer each
}

// The same with a WRITE before the READ: the ACK that completes the WRITE
// and then meets the READ starts one counted retry after booking its
// progress (a retry counted before the progress reset would be uncounted,
// and every later duplicate ACK would start another).
TEST_P(Rnic, ImpliedNakAfterProgressInTheSameAckIsCounted) {
  const ImpliedNakOutcome o = UnansweredReadBeforeAckedWrites(Cfg(), /*write_first=*/true);
  ASSERT_EQ(o.wcs.size(), 10u) << "packets sent " << o.packets_sent;
  EXPECT_EQ(o.wcs[0].wr_id, 100u);
  EXPECT_EQ(o.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(o.wcs[1].wr_id, 1u);
  EXPECT_EQ(o.wcs[1].status, WcStatus::kRetryExcErr);
  for (size_t i = 2; i < o.wcs.size(); ++i) EXPECT_EQ(o.wcs[i].status, WcStatus::kWrFlushErr) << i;
  EXPECT_EQ(o.retransmits, 2u);  // retry_cnt
  EXPECT_GE(o.suppressed, 3u);
  EXPECT_LE(o.packets_sent, 4u * 10u + 4u * 10u);
}

INSTANTIATE_TEST_SUITE_P(Profiles, Rnic, ::testing::Values(RnicProfile::kMlx5, RnicProfile::kRxe),
                         ProfileParamName);

// ---------------------------------------------------------------- mutations
// Each test switches one rule off on purpose and expects the check that
// guards the rule to see the breakage (only in builds with FERRY_MUTATIONS).

#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
FabricConfig Mutated(RnicProfile p, base::Mutation m) {
  FabricConfig c;
  c.profile = p;
  c.mutations.Enable(m);
  return c;
}

TEST(MutationDetect, PerQpOrderOffBreaksPerQpOrder) {
  auto wcs =
      RunOrderWorkload(Mutated(RnicProfile::kMlx5, base::Mutation::kSimPerQpOrderOff), 3, 2, 100);
  ASSERT_EQ(wcs.size(), 200u);
  EXPECT_FALSE(PerQpOrderHolds(wcs));
}

TEST(MutationDetect, NoFlushAfterErrorBreaksErrorThenFlush) {
  World w(Mutated(RnicProfile::kMlx5, base::Mutation::kSimNoFlushAfterError));
  auto p = w.Connect();
  std::vector<hal::SendWr> chain;
  for (uint64_t i = 0; i < 6; ++i) chain.push_back(w.Write(i, 64 * i, 64 * i, 64));
  chain[3].rkey ^= 0x1;
  ASSERT_TRUE(w.va().PostSend(p.a.qp, chain).status.ok());
  auto wcs = w.PollN(w.a(), 6, 1'000'000'000);
  EXPECT_FALSE(ErrorThenFlushHolds(wcs, 6, 3, WcStatus::kRemAccessErr));
}

TEST(MutationDetect, ScrubUnderRxeRemovesLeftoverCqes) {
  World w(Mutated(RnicProfile::kRxe, base::Mutation::kSimScrubUnderRxe));
  auto p = w.Connect();
  hal::SendWr wr = w.Write(1, 0, 0, 8);
  ASSERT_TRUE(w.va().PostSend(p.a.qp, {&wr, 1}).status.ok());
  w.fabric().Settle(1'000'000'000);
  ASSERT_TRUE(w.va().DestroyQp(p.a.qp).ok());
  EXPECT_EQ(w.fabric().TruthOf(w.a().cq)->present, 0u);  // rxe would leave 1
}

TEST(MutationDetect, OverrunUndetectedKeepsCqUsable) {
  World w(Mutated(RnicProfile::kMlx5, base::Mutation::kSimOverrunUndetected), 1, 4);
  auto p = w.Connect();
  std::vector<hal::SendWr> chain;
  for (uint64_t i = 0; i <= w.a().cqe; ++i) chain.push_back(w.Write(i, 0, 0, 8));
  ASSERT_TRUE(w.va().PostSend(p.a.qp, chain).status.ok());
  w.fabric().Settle(1'000'000'000);
  EXPECT_FALSE(w.fabric().TruthOf(w.a().cq)->errored);
  hal::WorkCompletion wc[64];
  EXPECT_TRUE(w.va().PollCq(w.a().cq, absl::MakeSpan(wc, 64)).ok());
}

TEST(MutationDetect, DestroyFailSilentlyLeavesQpAliveAfterOk) {
  World w(Mutated(RnicProfile::kMlx5, base::Mutation::kSimDestroyFailSilently));
  auto p = w.Connect();
  ASSERT_TRUE(w.fabric()
                  .Inject({0, FaultKind::kDestroyQpFail, {TargetKind::kQp, 0, "sim0", p.a.qp_num}})
                  .ok());
  EXPECT_TRUE(w.va().DestroyQp(p.a.qp).ok());
  EXPECT_TRUE(w.fabric().TrueStateOf(p.a.qp).ok());  // alive although destroy said OK
}
TEST(MutationDetect, DupAckEchoesPsnAcksAMispairedWrite) {
  const MispairOutcome o =
      MispairedRequester(Mutated(RnicProfile::kMlx5, base::Mutation::kSimDupAckEchoesPsn));
  EXPECT_EQ(o.write_status, WcStatus::kSuccess);  // acknowledged...
  EXPECT_FALSE(o.write_landed);                   // ...never placed
}

TEST(MutationDetect, DupReadAnyPsnAcksAMispairedWrite) {
  const MispairOutcome o =
      MispairedRequester(Mutated(RnicProfile::kMlx5, base::Mutation::kSimDupReadAnyPsn));
  EXPECT_EQ(o.read_status, WcStatus::kSuccess);   // a READ the responder never ran...
  EXPECT_EQ(o.write_status, WcStatus::kSuccess);  // ...implicitly ACKs the WRITE
  EXPECT_FALSE(o.write_landed);
}

TEST(MutationDetect, ImpliedNakUnboundedStormsTheWire) {
  // Every duplicate WRITE's ACK restarts the send queue: each restart puts
  // the READ and eight WRITEs on the wire again, and their eight ACKs
  // restart it eight times more; no retry is ever counted, so RETRY_EXC_ERR
  // never ends it (the run stops at the packet bound).
  const ImpliedNakOutcome o = UnansweredReadBeforeAckedWrites(
      Mutated(RnicProfile::kMlx5, base::Mutation::kSimImpliedNakUnbounded));
  EXPECT_TRUE(o.wcs.empty());
  EXPECT_GT(o.retransmits, 1000u);
  EXPECT_EQ(o.suppressed, 0u);
}

TEST(MutationDetect, RespToSourceAcksAStaleRequester) {
  // Responses routed to the packet's source: the stale WRITE is
  // acknowledged as a duplicate and completes successfully although none
  // of its bytes landed (the swarm's seed-119 "COMPLETED moved wrong bytes").
  const StaleOutcome o =
      StaleRequesterAfterQpnReuse(Mutated(RnicProfile::kMlx5, base::Mutation::kSimRespToSource));
  EXPECT_EQ(o.status, WcStatus::kSuccess);
  EXPECT_FALSE(o.bytes_landed);
}
#endif  // FERRY_MUTATIONS

}  // namespace
}  // namespace ferry::sim
