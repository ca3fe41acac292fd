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

}  // namespace
}  // namespace ferry::engine::testing
