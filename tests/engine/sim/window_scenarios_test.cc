// tests/engine/sim/window_scenarios_test.cc: revocable remote access through
// type 2 memory windows (docs/security.md section 6) on the simulated RNIC,
// both profiles, with the oracle on at every step (its window_after_retire
// rule and the fabric's bound_mw_at_destroy among them) and the C9 leak check
// at the end of each.
//
//   row                         what must hold
//   bound and used              h0's range is offered with rkey 0 and a
//                               window id; h1's WRITE waits for the WIN, then
//                               lands; events in the order ep_ready,
//                               winreq_sent, (h0) winreq_recv, mw_bind,
//                               win_sent, (h1) win_recv, post
//   revoked on retire           h0 retires the endpoint (a port flap): its
//                               windows are deallocated (mw_revoked, none
//                               bound after); h1's next WRITE reaches h0
//                               over a fresh endpoint with fresh windows
//                               (new rkeys) and lands
//   revoked on unregister       UnregisterMemory returns OK with the windows
//                               gone; h1's WRITE through its old window is
//                               refused by the RNIC (FAILED), bytes unchanged
//   a stale window id           h1 asks for the windows of a range h0 has
//                               since replaced with one not offered to it:
//                               WIN refused, the slice FAILED unposted, no
//                               window bound for it
//   no type 2 windows           the range falls back to its MR rkey (the
//                               descriptor says so), the WRITE lands
// Each guard has a mutation switch; the *Caught tests turn it on and assert
// the row's own failure message. Scenarios return "" or what broke.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/types.h"
#include "tests/engine/sim/two_engines.h"

namespace ferry::engine::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kLen = 16 * 1024;

struct World {
  sim::RnicProfile profile = sim::RnicProfile::kMlx5;
  base::Mutations mutations;
  uint64_t seed = 1;
  bool device_has_windows = true;
  MemoryOptions memory = [] {
    MemoryOptions m;
    m.revocable = true;
    return m;
  }();
  std::unique_ptr<TwoEngines> Make() const {
    sim::FabricConfig fc = TwoEngines::MakeFabricConfig();
    fc.profile = profile;
    if (!device_has_windows) {
      hal::DeviceAttr a = sim::ProfileLimits(profile);
      a.mw_type2 = false;
      fc.limits = a;
    }
    simworld::WorldOptions o;
    o.host_memory = {{0, memory}};
    return std::make_unique<TwoEngines>(seed, sim::NetPlan{}, mutations, ScenarioConfig(), fc, o);
  }
};

std::string PeerPath(TwoEngines& w, uint32_t to) { return w.host(to).addr + "@sim0"; }

// The endpoint h `from` holds towards h `to` (nullptr: none).
const Endpoint* EndpointOf(TwoEngines& w, uint32_t from, uint32_t to) {
  SteppedEngine& e = *w.host(from).engine;
  const std::string path = PeerPath(w, to);
  return e.FindEndpoint(e.OwnerOf(0, path), 0, path);
}

// h1 WRITEs kLen bytes tagged `tag` into h0 at offset 0.
std::string WriteLands(TwoEngines& w, SegmentHandle seg, uint64_t tag, const std::string& what) {
  Fill(w, 1, 0, kLen, tag);
  const TaskStatus st = Run1(w, 1, MakeReq(w, 1, seg, OpKind::kWrite, 0, 0, kLen)).first;
  if (st != TaskStatus::kCompleted)
    return absl::StrCat(what, " WRITE ended ", std::string(TaskStatusName(st)));
  if (!Holds(w, 0, 0, kLen, tag)) return what + " WRITE bytes did not land";
  return "";
}

// The first record of each kind, in this order, on host h.
std::string InOrder(TwoEngines& w, uint32_t h, const std::vector<std::string>& kinds,
                    size_t from = 0) {
  const auto& r = w.host(h).obs->records();
  int64_t last = -1;
  for (const std::string& k : kinds) {
    const int64_t i = Find(r, k, "", from);
    if (i < 0) return absl::StrCat("h", h, ": no ", k);
    if (i < last) return absl::StrCat("h", h, ": ", k, " before the event it follows");
    last = i;
  }
  return "";
}

// The range as h0 offers it and h1 holds it: windowed, rkey 0.
std::string OfferedThroughWindows(TwoEngines& w, SegmentHandle seg) {
  const SegmentDescriptor d = w.host(0).engine->LocalSegment();
  if (d.buffers.size() != 1) return "h0 offers no single range";
  const BufferDescriptor& b = d.buffers[0];
  if (b.window == 0 || b.window_devices != 1 || b.rkeys.size() != 1 || b.rkeys[0] != 0)
    return absl::StrCat("h0's range is not windowed: window ", b.window, " devices ",
                        b.window_devices, " rkey ", b.rkeys.empty() ? 0 : b.rkeys[0]);
  auto info = w.host(1).engine->GetSegmentInfo(seg);
  if (!info.ok() || info->buffers.size() != 1 || !info->buffers[0].windows)
    return "h1's segment info does not say windows";
  return "";
}

// --------------------------------------------------------------- rows
std::string BoundAndUsed(const World& c) {
  auto w = c.Make();
  if (!w->start_failure().empty()) return w->start_failure();
  auto seg = w->Open(1, 0);
  if (!seg.ok()) return "open: " + seg.status().ToString();
  if (std::string e = OfferedThroughWindows(*w, *seg); !e.empty()) return e;
  if (std::string e = WriteLands(*w, *seg, 51, "the"); !e.empty()) return e;
  if (std::string e = InOrder(*w, 1, {"ep_ready", "winreq_sent", "win_recv", "post"}); !e.empty())
    return e;
  if (std::string e = InOrder(*w, 0, {"winreq_recv", "mw_bind", "win_sent"}); !e.empty()) return e;
  const uint32_t qps = ScenarioConfig().qps_per_endpoint;
  if (w->host(0).engine->WindowsHeld() != qps)
    return absl::StrCat("h0 holds ", w->host(0).engine->WindowsHeld(), " windows, want ", qps);
  const Endpoint* ep = EndpointOf(*w, 1, 0);
  const uint64_t window = w->host(0).engine->LocalSegment().buffers[0].window;
  if (ep == nullptr || !ep->peer_windows.contains(window) ||
      ep->peer_windows.at(window).rkeys.size() != qps)
    return "h1's endpoint holds no rkey per QP";
  return Finish(*w);
}

std::string RevokedOnRetire(const World& c) {
  auto w = c.Make();
  if (!w->start_failure().empty()) return w->start_failure();
  auto seg = w->Open(1, 0);
  if (!seg.ok()) return "open: " + seg.status().ToString();
  if (std::string e = WriteLands(*w, *seg, 52, "the first"); !e.empty()) return e;
  const uint64_t window = w->host(0).engine->LocalSegment().buffers[0].window;
  const std::vector<uint32_t> old = EndpointOf(*w, 1, 0)->peer_windows.at(window).rkeys;
  const size_t from0 = w->host(0).obs->records().size();
  if (!InjectDeviceFault(*w, 0, "sim0", sim::FaultKind::kPortFlap).ok()) return "port flap";
  // h0 retires its endpoint once the port is back; its windows go with it.
  w->RunUntil([&] { return Find(w->host(0).obs->records(), "mw_revoked", "", from0) >= 0; },
              2'000'000'000);
  if (Find(w->host(0).obs->records(), "mw_revoked", "", from0) < 0) return "h0 revoked nothing";
  if (std::string e = InOrder(*w, 0, {"ep_retire", "mw_revoked"}, from0); !e.empty()) return e;
  if (std::string v = w->OracleAndViolations(); !v.empty()) return "oracle: " + v;
  if (w->host(0).engine->WindowsHeld() != 0)
    return absl::StrCat("h0 still holds ", w->host(0).engine->WindowsHeld(),
                        " windows after the retire");
  const size_t from1 = w->host(1).obs->records().size();
  // h1 retires its own endpoint too (a flap of its port: on the rxe
  // profile a WR towards the destroyed QP would wait for its timeout).
  if (!InjectDeviceFault(*w, 1, "sim0", sim::FaultKind::kPortFlap).ok()) return "port flap h1";
  w->RunUntil([&] { return Find(w->host(1).obs->records(), "ep_retire", "", from1) >= 0; },
              2'000'000'000);
  if (std::string e = WriteLands(*w, *seg, 53, "the second"); !e.empty()) return e;
  if (std::string e = InOrder(*w, 1, {"ep_ready", "winreq_sent", "win_recv"}, from1); !e.empty())
    return "after the retire, " + e;
  const std::vector<uint32_t> fresh = EndpointOf(*w, 1, 0)->peer_windows.at(window).rkeys;
  for (uint32_t k : fresh)
    for (uint32_t o : old)
      if (k == o) return absl::StrCat("the fresh endpoint reuses rkey ", k);
  return Finish(*w);
}

std::string RevokedOnUnregister(const World& c) {
  auto w = c.Make();
  if (!w->start_failure().empty()) return w->start_failure();
  auto seg = w->Open(1, 0);
  if (!seg.ok()) return "open: " + seg.status().ToString();
  if (std::string e = WriteLands(*w, *seg, 54, "the first"); !e.empty()) return e;
  SteppedEngine& e0 = *w->host(0).engine;
  if (absl::Status s = e0.UnregisterMemory(w->host(0).buf.data()); !s.ok())
    return "UnregisterMemory: " + s.ToString();
  w->host(0).registered = false;
  if (e0.WindowsHeld() != 0)
    return absl::StrCat("h0 holds ", e0.WindowsHeld(), " windows after UnregisterMemory");
  // h1 still holds the old window rkeys: the RNIC refuses them.
  Fill(*w, 1, 0, kLen, 55);
  const TaskStatus st = Run1(*w, 1, MakeReq(*w, 1, *seg, OpKind::kWrite, 0, 0, kLen)).first;
  if (st != TaskStatus::kFailed)
    return absl::StrCat("a WRITE through a revoked window ended ", std::string(TaskStatusName(st)));
  if (!Holds(*w, 0, 0, kLen, 54)) return "a WRITE through a revoked window changed bytes";
  return Finish(*w);
}

std::string StaleWindowRefused(const World& c) {
  auto w = c.Make();
  if (!w->start_failure().empty()) return w->start_failure();
  auto seg = w->Open(1, 0);
  if (!seg.ok()) return "open: " + seg.status().ToString();
  // Before h1 ever asks: h0 replaces the range by one offered to nobody.
  SteppedEngine& e0 = *w->host(0).engine;
  if (!e0.UnregisterMemory(w->host(0).buf.data()).ok()) return "unregister";
  MemoryOptions other = c.memory;
  other.peers = {"someone-else"};
  if (!e0.RegisterMemory(w->host(0).buf.data(), w->host(0).buf.size(), other).ok())
    return "re-register";
  const size_t from0 = w->host(0).obs->records().size();
  Fill(*w, 1, 0, kLen, 56);
  const TaskStatus st = Run1(*w, 1, MakeReq(*w, 1, *seg, OpKind::kWrite, 0, 0, kLen)).first;
  if (st != TaskStatus::kFailed)
    return absl::StrCat("a WRITE to a stale window id ended ", std::string(TaskStatusName(st)));
  if (std::string e = InOrder(*w, 0, {"winreq_recv", "win_refused"}, from0); !e.empty()) return e;
  if (Find(w->host(0).obs->records(), "mw_bind", "", from0) >= 0)
    return "h0 bound a window for a range not offered to h1";
  if (e0.WindowsHeld() != 0) return "h0 holds windows for a refused peer";
  if (Holds(*w, 0, 0, kLen, 56)) return "the refused WRITE landed";
  if (std::string e = InOrder(*w, 1, {"win_refused_recv"}); !e.empty()) return e;
  return Finish(*w);
}

std::string NoWindowsFallsBack(const World& cfg) {
  World c = cfg;
  c.device_has_windows = false;
  auto w = c.Make();
  if (!w->start_failure().empty()) return w->start_failure();
  auto seg = w->Open(1, 0);
  if (!seg.ok()) return "open: " + seg.status().ToString();
  const BufferDescriptor b = w->host(0).engine->LocalSegment().buffers.at(0);
  if (b.window != 0 || b.window_devices != 0 || b.rkeys.at(0) == 0)
    return "a device without windows still offers the range through windows";
  if (w->host(1).engine->GetSegmentInfo(*seg)->buffers.at(0).windows)
    return "h1's segment info says windows";
  if (std::string e = WriteLands(*w, *seg, 57, "the fallback"); !e.empty()) return e;
  if (Find(w->host(1).obs->records(), "winreq_sent", "") >= 0) return "h1 asked for windows";
  return Finish(*w);
}

// --------------------------------------------------------------- tests
class Windows : public ::testing::TestWithParam<sim::RnicProfile> {
 protected:
  World Seeded(uint64_t seed) const {
    World c;
    c.profile = GetParam();
    c.seed = seed;
    return c;
  }
  World Mutated(base::Mutation m) const {
    World c = Seeded(1);
    c.mutations.Enable(m);
    return c;
  }
};

TEST_P(Windows, BoundAndUsed) {
  for (uint64_t s = 1; s <= 3; ++s) ASSERT_EQ(BoundAndUsed(Seeded(s)), "") << s;
}
TEST_P(Windows, RevokedOnRetire) {
  for (uint64_t s = 1; s <= 3; ++s) ASSERT_EQ(RevokedOnRetire(Seeded(s)), "") << s;
}
TEST_P(Windows, RevokedOnUnregister) {
  for (uint64_t s = 1; s <= 2; ++s) ASSERT_EQ(RevokedOnUnregister(Seeded(s)), "") << s;
}
TEST_P(Windows, StaleWindowIdIsRefused) {
  for (uint64_t s = 1; s <= 2; ++s) ASSERT_EQ(StaleWindowRefused(Seeded(s)), "") << s;
}
TEST_P(Windows, NoType2WindowsFallsBackToTheMr) { ASSERT_EQ(NoWindowsFallsBack(Seeded(1)), ""); }

// Each guard's mutation fails its row with the row's own message.
TEST_P(Windows, KeepAtRetireIsCaughtByTheOracle) {
  EXPECT_THAT(RevokedOnRetire(Mutated(base::Mutation::kEngineMwKeepAtRetire)),
              HasSubstr("window_after_retire"));
}
TEST_P(Windows, UnregisterKeepingWindowsIsCaught) {
  EXPECT_THAT(RevokedOnUnregister(Mutated(base::Mutation::kEngineMwUnregisterKeepsWindows)),
              HasSubstr("UnregisterMemory: INVALID_ARGUMENT"));
}
// The old rkeys name the old QPs: the RNIC refuses them on the new ones.
TEST_P(Windows, ReusingOldRkeysIsRefusedByTheRnic) {
  EXPECT_EQ(RevokedOnRetire(Mutated(base::Mutation::kEngineMwReuseAcrossEndpoints)),
            "the second WRITE ended FAILED");
}
TEST_P(Windows, PostingBeforeTheWinIsRefusedByTheRnic) {
  EXPECT_EQ(BoundAndUsed(Mutated(base::Mutation::kEngineMwPostBeforeWin)),
            "the WRITE ended FAILED");
}

INSTANTIATE_TEST_SUITE_P(Profiles, Windows,
                         ::testing::Values(sim::RnicProfile::kMlx5, sim::RnicProfile::kRxe),
                         [](const auto& info) {
                           return std::string(info.param == sim::RnicProfile::kMlx5 ? "mlx5"
                                                                                    : "rxe");
                         });

}  // namespace
}  // namespace ferry::engine::testing
