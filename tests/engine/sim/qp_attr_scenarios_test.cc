// tests/engine/sim/qp_attr_scenarios_test.cc: the READ depth of an
// endpoint's QPs (EngineConfig::qp_rd_atomic_max; docs/design.md section 4,
// "Identity and handshake"), on the simulated RNIC with the oracle on:
// - each side offers its peer min(qp_rd_atomic_max, device max_qp_rd_atom)
//   READs in flight (max_dest_rd_atomic, sent in REQ/REP) and issues at
//   most min(qp_rd_atomic_max, device max_qp_init_rd_atom, the peer's
//   offer) (max_rd_atomic);
// - a 1 MiB READ (16 slices over 2 QPs) completes with its bytes whatever
//   the depths.
// - an owner spreads its endpoints over its cqs_per_worker CQs (the one
//   with the fewest live endpoints), as the CQ budget
//   (EngineConfig::EndpointsPerCq) assumes; before, every endpoint went on
//   the owner's first CQ.
// - peers with different qps_per_endpoint never pair: the target refuses
//   the REQ ("qp_count") and the initiator fails the key's queued slices
//   at once, unposted, instead of retrying until their deadline.
// These tests check the attributes the QPs get, through the fabric's view
// of its live QPs.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/engine/sim/two_engines.h"

namespace ferry::engine::testing {
namespace {

struct DepthRun {
  std::map<std::string, int> qps;  // "h0 rd_atomic=6/12" -> live data QPs like that
  bool read_landed = false;
  std::string finish;
};

// Host 0 READs 1 MiB from host 1; host h's engine has qp_rd_atomic_max
// depth[h]. The depths of the QPs live after the READ, per host.
DepthRun ReadWithDepths(sim::RnicProfile profile, uint8_t depth0, uint8_t depth1) {
  sim::FabricConfig fc = TwoEngines::MakeFabricConfig();
  fc.profile = profile;
  simworld::WorldOptions o;
  o.host_rd_atomic_max = {{0, depth0}, {1, depth1}};
  TwoEngines w(43, sim::NetPlan{}, {}, ScenarioConfig(), fc, o);
  DepthRun out;
  auto seg = w.Open(0, 1);
  if (!seg.ok()) {
    out.finish = "open: " + seg.status().ToString();
    return out;
  }
  Fill(w, 1, 0, kBufBytes, 9);
  out.read_landed = Run1(w, 0, MakeReq(w, 0, *seg, OpKind::kRead, 0, 0, kBufBytes)).first ==
                        TaskStatus::kCompleted &&
                    Holds(w, 0, 0, kBufBytes, 9);
  for (const std::string& line : w.fabric().LiveObjects()) {
    if (!absl::StartsWith(line, "qp ") || !absl::StrContains(line, "state=RTS")) continue;
    const std::string host = absl::StrContains(line, " h0/") ? "h0" : "h1";
    ++out.qps[absl::StrCat(host, " ", line.substr(line.find("rd_atomic=")))];
  }
  out.finish = Finish(w);
  return out;
}

TEST(QpAttrScenario, ReadDepthIsTheLeastOfConfigDeviceAndPeerOffer) {
  // h0 offers 12 and may issue 12, h1 offers 6: h0 issues 6 (what h1
  // accepts), h1 issues 6 (its own bound) toward h0's offer of 12.
  const DepthRun r = ReadWithDepths(sim::RnicProfile::kMlx5, 12, 6);
  EXPECT_EQ(r.finish, "");
  EXPECT_TRUE(r.read_landed);
  EXPECT_EQ(r.qps, (std::map<std::string, int>{{"h0 rd_atomic=6/12", 2}, {"h1 rd_atomic=6/6", 2}}));
}

TEST(QpAttrScenario, DefaultDepthIsSixteenAndTheDeviceCapsIt) {
  EXPECT_EQ(EngineConfig{}.qp_rd_atomic_max, 16);
  const DepthRun mlx5 = ReadWithDepths(sim::RnicProfile::kMlx5, 16, 16);
  EXPECT_EQ(mlx5.finish, "");
  EXPECT_TRUE(mlx5.read_landed);
  EXPECT_EQ(mlx5.qps,
            (std::map<std::string, int>{{"h0 rd_atomic=16/16", 2}, {"h1 rd_atomic=16/16", 2}}));
  // 255 asked: mlx5 allows 16, rxe 128 (as the devices report).
  const DepthRun capped = ReadWithDepths(sim::RnicProfile::kMlx5, 255, 255);
  EXPECT_EQ(capped.finish, "");
  EXPECT_EQ(capped.qps,
            (std::map<std::string, int>{{"h0 rd_atomic=16/16", 2}, {"h1 rd_atomic=16/16", 2}}));
  const DepthRun rxe = ReadWithDepths(sim::RnicProfile::kRxe, 255, 255);
  EXPECT_EQ(rxe.finish, "");
  EXPECT_TRUE(rxe.read_landed);
  EXPECT_EQ(rxe.qps,
            (std::map<std::string, int>{{"h0 rd_atomic=128/128", 2}, {"h1 rd_atomic=128/128", 2}}));
}

TEST(QpAttrScenario, DepthOneIsTheOldBehaviourAndStillCompletes) {
  const DepthRun r = ReadWithDepths(sim::RnicProfile::kRxe, 1, 1);
  EXPECT_EQ(r.finish, "");
  EXPECT_TRUE(r.read_landed);
  EXPECT_EQ(r.qps, (std::map<std::string, int>{{"h0 rd_atomic=1/1", 2}, {"h1 rd_atomic=1/1", 2}}));
}

// Host 0 (one worker, `cqs` CQs) WRITEs to hosts 1..4 in turn: four
// endpoints, two QPs each. Host 0's live QPs per send CQ ("cq=N" -> QPs).
std::map<std::string, int> QpsPerCqAfterFourPeers(uint32_t cqs, std::string* finish) {
  EngineConfig c = ScenarioConfig();
  c.workers = 1;
  c.cqs_per_worker = cqs;
  c.qps_per_endpoint = 2;
  simworld::WorldOptions o;
  o.hosts = 5;
  TwoEngines w(44, sim::NetPlan{}, {}, c, TwoEngines::MakeFabricConfig(), o);
  for (uint32_t to = 1; to <= 4; ++to) {
    auto seg = w.Open(0, to);
    if (!seg.ok()) {
      *finish = absl::StrCat("open h", to, ": ", seg.status().ToString());
      return {};
    }
    const Request r = simworld::MakeReqTo(w, 0, to, *seg, OpKind::kWrite, 0, 0, 4096);
    if (Run1(w, 0, r).first != TaskStatus::kCompleted) {
      *finish = absl::StrCat("the WRITE to h", to, " did not complete");
      return {};
    }
  }
  std::map<std::string, int> per_cq;
  for (const std::string& line : w.fabric().LiveObjects()) {
    if (!absl::StartsWith(line, "qp ") || !absl::StrContains(line, " h0/")) continue;
    const size_t at = line.find(" cq=");
    ++per_cq[line.substr(at + 1, line.find(' ', at + 1) - at - 1)];
  }
  *finish = Finish(w);
  return per_cq;
}

TEST(QpAttrScenario, EndpointsSpreadOverTheOwnersCqs) {
  std::string finish;
  // Two CQs: two endpoints (four QPs) on each, in creation order.
  EXPECT_EQ(QpsPerCqAfterFourPeers(2, &finish),
            (std::map<std::string, int>{{"cq=1", 4}, {"cq=2", 4}}));
  EXPECT_EQ(finish, "");
  // One CQ: all eight QPs on it.
  EXPECT_EQ(QpsPerCqAfterFourPeers(1, &finish), (std::map<std::string, int>{{"cq=1", 8}}));
  EXPECT_EQ(finish, "");
}

// Host 0 runs 2 QPs per endpoint, host 1 `target_qps`. What one 32 KiB
// WRITE (two slices) from host 0 ended as, when, and the order of host 0's
// events about it.
struct MismatchRun {
  TaskStatus status = TaskStatus::kPending;
  uint64_t took_ns = 0;
  int64_t req_sent = -1, refusal_seen = -1, refused = -1;
  uint64_t refusals = 0, failed = 0, slices_in_refusal = 0;
  std::string finish;
};

MismatchRun WriteToPeerWithQps(uint32_t target_qps) {
  simworld::WorldOptions o;
  o.host_qps_per_endpoint = {{1, target_qps}};
  EngineConfig c = ScenarioConfig();
  c.cqe_limit = 4096;  // room for 4 QPs per endpoint in the CQ budget
  TwoEngines w(45, sim::NetPlan{}, {}, c, TwoEngines::MakeFabricConfig(), o);
  MismatchRun out;
  auto seg = w.Open(0, 1);
  if (!seg.ok()) {
    out.finish = "open: " + seg.status().ToString();
    return out;
  }
  const size_t from = w.host(0).obs->records().size();
  const uint64_t t0 = w.clock().NowNs();
  out.status = Run1(w, 0, MakeReq(w, 0, *seg, OpKind::kWrite, 0, 0, 32 * 1024)).first;
  out.took_ns = w.clock().NowNs() - t0;
  const auto& r = w.host(0).obs->records();
  const std::string key = "sim0|" + w.host(1).addr + "@sim0";
  out.req_sent = Find(r, "req_sent", key, from);
  out.refusal_seen = Find(r, "stale_recv", key, from);
  out.refused = Find(r, "qp_count_refused", key, from);
  if (out.refused >= 0) out.slices_in_refusal = r[out.refused].b;
  for (uint32_t k = 0; k < w.host(0).engine->worker_count(); ++k) {
    out.refusals += w.host(0).engine->StatsOf(k).qp_count_refusals;
    out.failed += w.host(0).engine->StatsOf(k).config_failed;
  }
  out.finish = Finish(w);
  return out;
}

TEST(QpAttrScenario, PeersWithOtherQpCountsFailAtOnceNotAtTheDeadline) {
  for (uint32_t target_qps : {1u, 4u}) {
    SCOPED_TRACE(absl::StrCat("target qps_per_endpoint ", target_qps));
    const MismatchRun m = WriteToPeerWithQps(target_qps);
    EXPECT_EQ(m.status, TaskStatus::kFailed);
    // One control round trip, far inside ScenarioConfig's 2 s slice
    // timeout (before: TIMEOUT after 2 s of REQs refused one by one).
    EXPECT_LT(m.took_ns, ScenarioConfig().slice_timeout_ns / 100);
    EXPECT_GE(m.req_sent, 0);
    EXPECT_GT(m.refusal_seen, m.req_sent);
    EXPECT_GT(m.refused, m.refusal_seen);
    EXPECT_EQ(m.slices_in_refusal, 2u);
    EXPECT_EQ(m.refusals, 1u);
    EXPECT_EQ(m.failed, 2u);
    EXPECT_EQ(m.finish, "");
  }
}

}  // namespace
}  // namespace ferry::engine::testing
