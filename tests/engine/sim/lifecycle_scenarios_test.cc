// tests/engine/sim/lifecycle_scenarios_test.cc: engine lifecycle scenarios
// on the simulated RNIC and control network (suite 'sim'): end-to-end
// WRITE/READ with bytes verified, C5 simultaneous open over many seeds with
// control-network loss/duplication/reordering, C6 peer restart and stale
// REQs, C9 leak check at shutdown in every scenario. Each scenario returns
// "" on success or what broke, so each mutation test can show that its
// contract's scenario then fails.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutation.h"
#include "engine/handshake.h"
#include "engine/owner.h"
#include "gtest/gtest.h"
#include "tests/engine/sim/two_engines.h"

namespace ferry::engine::testing {
namespace {

uint8_t Pattern(uint32_t who, uint64_t off) {
  return static_cast<uint8_t>((off * 131 + who * 17 + (off >> 8)) & 0xff);
}

// Submits one request from host `from` on segment `seg` and runs until it
// is terminal. Returns its status.
TaskStatus Transfer(TwoEngines& w, uint32_t from, SegmentHandle seg, OpKind op, uint64_t local_off,
                    uint64_t remote_off, uint64_t len) {
  SteppedEngine& e = *w.host(from).engine;
  const uint32_t to = 1 - from;
  auto batch = e.AllocateBatch(4);
  FERRY_CHECK(batch.ok());
  Request r;
  r.opcode = op;
  r.local_addr = reinterpret_cast<uint64_t>(w.host(from).buf.data()) + local_off;
  r.length_bytes = len;
  r.segment = seg;
  r.remote_addr = reinterpret_cast<uint64_t>(w.host(to).buf.data()) + remote_off;
  SubmitResult sr = w.Submit(from, *batch, {r});
  if (!sr.status.ok()) return TaskStatus::kInvalid;
  TaskStatus st = TaskStatus::kPending;
  w.RunUntil(
      [&] {
        st = *e.GetTaskStatus(sr.tasks[0]);
        return IsTerminal(st);
      },
      5'000'000'000);
  return st;
}

std::string KeyOf(TwoEngines& w, uint32_t peer) { return "sim0|" + w.host(peer).addr + "@sim0"; }

// ---------------------------------------------------------------- e2e
std::string EndToEnd(uint64_t seed, const base::Mutations& m) {
  TwoEngines w(seed, sim::NetPlan{}, m, ScenarioConfig());
  for (uint64_t i = 0; i < kBufBytes; ++i) w.host(0).buf[i] = Pattern(0, i);
  for (uint64_t i = 0; i < kBufBytes; ++i) w.host(1).buf[i] = Pattern(1, i);
  auto seg = w.Open(0, 1);
  if (!seg.ok()) return "open: " + seg.status().ToString();
  const uint64_t len = 200 * 1024 + 123;  // 13 slices, the last short
  if (TaskStatus s = Transfer(w, 0, *seg, OpKind::kWrite, 0, 4096, len);
      s != TaskStatus::kCompleted)
    return absl::StrCat("WRITE ended ", std::string(TaskStatusName(s)));
  for (uint64_t i = 0; i < len; ++i)
    if (w.host(1).buf[4096 + i] != Pattern(0, i)) return absl::StrCat("WRITE byte ", i, " wrong");
  if (TaskStatus s = Transfer(w, 0, *seg, OpKind::kRead, 512 * 1024, 600 * 1024, len);
      s != TaskStatus::kCompleted)
    return absl::StrCat("READ ended ", std::string(TaskStatusName(s)));
  for (uint64_t i = 0; i < len; ++i)
    if (w.host(0).buf[512 * 1024 + i] != Pattern(1, 600 * 1024 + i))
      return absl::StrCat("READ byte ", i, " wrong");
  // Trace order: A sent REQ, B answered, A ready before its first post; B
  // ready only after the RTU.
  const auto& a = w.host(0).obs->records();
  const auto& b = w.host(1).obs->records();
  const std::string ka = KeyOf(w, 1), kb = KeyOf(w, 0);
  const int64_t req = Find(a, "req_sent", ka), rep = Find(a, "rep_recv", ka),
                ready = Find(a, "ep_ready", ka), post = Find(a, "post", ka);
  if (!(req >= 0 && rep > req && ready > rep && post > ready))
    return absl::StrCat("A order req=", req, " rep=", rep, " ready=", ready, " post=", post);
  const int64_t breq = Find(b, "req_recv", kb), brep = Find(b, "rep_sent", kb),
                brtu = Find(b, "rtu_recv", kb), bready = Find(b, "ep_ready", kb);
  if (!(breq >= 0 && brep > breq && brtu > brep && bready > brtu))
    return absl::StrCat("B order req=", breq, " rep=", brep, " rtu=", brtu, " ready=", bready);
  if (std::string v = w.OracleAndViolations(); !v.empty()) return "oracle: " + v;
  if (std::string l = w.ShutdownAndCheckLeaks(); !l.empty()) return "leak: " + l;
  if (std::string v = w.Violations(); !v.empty()) return "violations at shutdown: " + v;
  return "";
}

TEST(EngineSim, EndToEndWriteReadBytesVerified) {
  EXPECT_EQ(EndToEnd(1, base::Mutations()), "");
  EXPECT_EQ(EndToEnd(2, base::Mutations()), "");
}

// ---------------------------------------------------------------- C5
sim::NetPlan LossyPlan() {
  sim::NetPlan p;
  p.delay_ns_min = 1'000;
  p.delay_ns_max = 200'000;
  p.loss = sim::Ratio{1, 5};
  p.duplicate = sim::Ratio{1, 4};
  p.reorder = sim::Ratio{1, 3};
  p.reorder_jitter_ns_max = 500'000;
  return p;
}

// Both sides open and write to each other at once. With `churn`, one
// modify_qp of ten fails too, so endpoints retire mid-handshake and the next
// generation reuses the QPNs of the one it replaces (the swarm's seed 13854
// needed that: without churn a REP never comes from another generation).
std::string SimultaneousOpen(uint64_t seed, const base::Mutations& m, bool churn = false) {
  sim::FabricConfig fc = TwoEngines::MakeFabricConfig();
  if (churn) fc.plan.Set(sim::FaultKind::kModifyQpFail, sim::Ratio{1, 5});
  TwoEngines w(seed, LossyPlan(), m, ScenarioConfig(), fc);
  auto s01 = w.Open(0, 1);
  auto s10 = w.Open(1, 0);
  if (!s01.ok() || !s10.ok())
    return absl::StrCat("open failed: ", s01.status().ToString(), "; ", s10.status().ToString());
  std::vector<std::pair<uint32_t, TaskId>> tasks;
  for (uint32_t h = 0; h < 2; ++h) {
    SteppedEngine& e = *w.host(h).engine;
    auto batch = e.AllocateBatch(4);
    Request r;
    r.opcode = OpKind::kWrite;
    r.local_addr = reinterpret_cast<uint64_t>(w.host(h).buf.data());
    r.length_bytes = 40 * 1024;
    r.segment = h == 0 ? *s01 : *s10;
    r.remote_addr = reinterpret_cast<uint64_t>(w.host(1 - h).buf.data()) + 64 * 1024 * (h + 1);
    for (uint64_t i = 0; i < r.length_bytes; ++i) w.host(h).buf[i] = Pattern(h, i);
    SubmitResult sr = w.Submit(h, *batch, {r});
    if (!sr.status.ok()) return "submit: " + sr.status.ToString();
    tasks.emplace_back(h, sr.tasks[0]);
  }
  const bool done = w.RunUntil(
      [&] {
        for (auto& [h, t] : tasks)
          if (!IsTerminal(*w.host(h).engine->GetTaskStatus(t))) return false;
        return true;
      },
      5'000'000'000);
  if (!done)
    return absl::StrCat("no progress: ", std::string(sim::RunOutcomeName(w.last_run().outcome)),
                        " ", w.last_run().detail);
  for (auto& [h, t] : tasks)
    if (*w.host(h).engine->GetTaskStatus(t) != TaskStatus::kCompleted) return "task not COMPLETED";
  for (uint32_t h = 0; h < 2; ++h)
    for (uint64_t i = 0; i < 40 * 1024; ++i)
      if (w.host(1 - h).buf[64 * 1024 * (h + 1) + i] != Pattern(h, i)) return "bytes wrong";
  // Exactly one READY endpoint per key on each side, each recording the
  // other's QPNs. Under churn a late REQ of a retired generation may still
  // start a new handshake after the tasks completed: let it settle first.
  auto both_ready = [&] {
    for (uint32_t h = 0; h < 2; ++h) {
      const std::string peer = w.host(1 - h).addr + "@sim0";
      const Endpoint* e =
          w.host(h).engine->FindEndpoint(OwnerForKey(EndpointKey{"sim0", peer}, 2), 0, peer);
      if (e == nullptr || e->state() != EndpointState::kReady) return false;
    }
    return true;
  };
  if (churn) (void)w.RunUntil(both_ready, 100'000'000);
  if (churn) {
    // The ground truth first: mispaired QPs are the failure churn can cause.
    if (std::string v = w.OracleAndViolations(); !v.empty()) return "oracle: " + v;
    // A side may legitimately be left without an endpoint (its last
    // handshake failed and nothing asks for a new one): then only the
    // transfer and the oracle are judged.
    if (!both_ready()) return Finish(w);
  }
  const Endpoint* ep[2] = {nullptr, nullptr};
  for (uint32_t h = 0; h < 2; ++h) {
    SteppedEngine& e = *w.host(h).engine;
    const std::string peer = w.host(1 - h).addr + "@sim0";
    const uint32_t owner = OwnerForKey(EndpointKey{"sim0", peer}, 2);
    for (uint32_t k = 0; k < 2; ++k)
      if (k != owner && e.FindEndpoint(k, 0, peer) != nullptr) return "endpoint on non-owner";
    ep[h] = e.FindEndpoint(owner, 0, peer);
    if (ep[h] == nullptr || ep[h]->state() != EndpointState::kReady)
      return absl::StrCat("host ", h, " has no READY endpoint");
  }
  // QPNs are no identity (a retired generation's are reused): each side
  // records the other's very endpoint, its generation and its send PSNs.
  for (uint32_t h = 0; h < 2; ++h) {
    const Endpoint& other = *ep[1 - h];
    std::vector<uint32_t> psns;
    for (const DataQp& q : other.qps()) psns.push_back(q.sq_psn);
    if (!ep[h]->peer() || ep[h]->peer()->qpns != other.qpns())
      return absl::StrCat("host ", h, " records wrong peer QPNs");
    if (ep[h]->peer()->generation != other.generation() || ep[h]->peer()->psns != psns)
      return absl::StrCat("host ", h, " records peer generation ", ep[h]->peer()->generation,
                          " (the peer's endpoint is generation ", other.generation(),
                          ") or other PSNs");
  }
  // Trace: on each side, no post before that side's ep_ready.
  for (uint32_t h = 0; h < 2; ++h) {
    const auto& r = w.host(h).obs->records();
    const std::string key = KeyOf(w, 1 - h);
    const int64_t post = Find(r, "post", key);
    const int64_t ready = Find(r, "ep_ready", key);
    if (post >= 0 && (ready < 0 || ready > post)) return "posted before READY";
  }
  if (std::string v = w.OracleAndViolations(); !v.empty()) return "oracle: " + v;
  if (std::string l = w.ShutdownAndCheckLeaks(); !l.empty()) return "leak: " + l;
  if (std::string v = w.Violations(); !v.empty()) return "violations at shutdown: " + v;
  return "";
}

TEST(EngineSim, C5SimultaneousOpenManySeeds) {
  const uint64_t seeds = 1000;
  for (uint64_t s = 1; s <= seeds; ++s) {
    std::string r = SimultaneousOpen(s, base::Mutations());
    ASSERT_EQ(r, "") << "seed " << s;
  }
  std::printf("C5: %llu seeds passed\n", static_cast<unsigned long long>(seeds));
}

constexpr uint64_t kChurnSeeds = 500;

TEST(EngineSim, C5SimultaneousOpenUnderHandshakeChurnManySeeds) {
  for (uint64_t s = 1; s <= kChurnSeeds; ++s) {
    std::string r = SimultaneousOpen(s, base::Mutations(), /*churn=*/true);
    // One loss in five both ways can exhaust a segment open's resends (a
    // clear DEADLINE_EXCEEDED to the caller, nothing to do with QPs).
    if (r.find("no descriptor from the peer in time") != std::string::npos) continue;
    ASSERT_EQ(r, "") << "seed " << s;
  }
}

// Churn seed 259 (found by this scenario once it checked generations and
// PSNs): a REQ of the peer's generation 1, delayed, reached a fresh
// CONNECTING endpoint after the peer had sent generation 2 and retired 1;
// accepting it paired our QPs with generation 1's QPNs, which generation 2
// had reused. A REQ older than a generation already seen is STALE now.
TEST(EngineSim, C6MutationAcceptOlderGenerationMispairsQps) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP();
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  EXPECT_EQ(SimultaneousOpen(259, base::Mutations(), /*churn=*/true), "");
  base::Mutations m;
  m.Enable(base::Mutation::kEngineC6AcceptOlderGeneration);
  const std::string r = SimultaneousOpen(259, m, /*churn=*/true);
  EXPECT_EQ(
      r.rfind("oracle:  violations: mispaired_qps: h0 qpn 17 sends from psn 772060 to h1 qpn 18",
              0),
      0u)
      << r;
#endif
}

// A REP applied onto QPs that were paired with another peer generation
// (the bug behind seed 13854): the ground truth sees mispaired QPs.
TEST(EngineSim, C5MutationRepAnyGenerationMispairsQps) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP();
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  base::Mutations m;
  m.Enable(base::Mutation::kEngineC5RepAnyGeneration);
  uint64_t caught = 0, first = 0, other = 0;
  std::string first_r;
  for (uint64_t s = 1; s <= kChurnSeeds; ++s) {
    const std::string r = SimultaneousOpen(s, m, /*churn=*/true);
    if (r.empty()) continue;
    if (r.find("mispaired_qps") == std::string::npos) ++other;
    if (caught++ == 0) {
      first = s;
      first_r = r;
    }
  }
  EXPECT_GE(caught, 1u);
  EXPECT_EQ(other, 0u) << "a failure other than mispaired_qps";
  EXPECT_NE(first_r.find("mispaired_qps"), std::string::npos)
      << "seed " << first << ": " << first_r;
  std::printf("C5 rep_any_generation: %llu of %llu seeds fail, first %llu: %.200s\n",
              static_cast<unsigned long long>(caught), static_cast<unsigned long long>(kChurnSeeds),
              static_cast<unsigned long long>(first), first_r.c_str());
#endif
}

TEST(EngineSim, C5MutationNonOwnerCallFailsTheRun) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP();
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  base::Mutations m;
  m.Enable(base::Mutation::kEngineC5NonOwnerCall);
  const std::string r = SimultaneousOpen(1, m);
  EXPECT_NE(r, "");
  EXPECT_NE(r.find("wrong_actor"), std::string::npos) << r;
  std::printf("C5 mutation result: %.300s\n", r.c_str());
#endif
}

// ---------------------------------------------------------------- C6
// Host 1 restarts (new incarnation; the RNIC reuses its freed QPNs) and
// writes to host 0: its first REQ must succeed. Then a stale REQ (same
// incarnation, lower generation) must not retire the healthy endpoint.
std::string PeerRestart(uint64_t seed, const base::Mutations& m) {
  TwoEngines w(seed, sim::NetPlan{}, m, ScenarioConfig());
  auto seg = w.Open(0, 1);
  if (!seg.ok()) return "open";
  if (Transfer(w, 0, *seg, OpKind::kWrite, 0, 0, 32 * 1024) != TaskStatus::kCompleted)
    return "first WRITE";
  const std::string key0 = KeyOf(w, 1);  // host 0's key for host 1
  const uint64_t old_inc = w.host(1).engine->incarnation();
  if (!w.Restart(1).ok()) return "restart";
  if (w.host(1).engine->incarnation() == old_inc) return "same incarnation";
  auto seg10 = w.Open(1, 0);
  if (!seg10.ok()) return "reopen: " + seg10.status().ToString();
  for (uint64_t i = 0; i < 48 * 1024; ++i) w.host(1).buf[i] = Pattern(7, i);
  const size_t a_before = w.host(0).obs->records().size();
  if (TaskStatus s = Transfer(w, 1, *seg10, OpKind::kWrite, 0, 256 * 1024, 48 * 1024);
      s != TaskStatus::kCompleted)
    return absl::StrCat("WRITE after restart ended ", std::string(TaskStatusName(s)));
  for (uint64_t i = 0; i < 48 * 1024; ++i)
    if (w.host(0).buf[256 * 1024 + i] != Pattern(7, i)) return "bytes after restart";
  // The restarted peer's first REQ succeeded: exactly one REQ sent.
  int reqs = 0;
  for (const auto& r : w.host(1).obs->records())
    if (r.kind == "req_sent" && r.key == KeyOf(w, 0)) ++reqs;
  if (reqs != 1) return absl::StrCat("restarted peer sent ", reqs, " REQs");
  // Host 0: the stale READY endpoint retired (superseded), then the fresh
  // one served the same REQ.
  const auto& a = w.host(0).obs->records();
  const int64_t recv = Find(a, "req_recv", key0, a_before);
  const int64_t retire = Find(a, "ep_retire", key0, a_before);
  const int64_t rep = Find(a, "rep_sent", key0, a_before);
  const int64_t ready = Find(a, "ep_ready", key0, a_before);
  if (!(recv >= 0 && retire > recv && rep > retire && ready > rep))
    return absl::StrCat("order recv=", recv, " retire=", retire, " rep=", rep, " ready=", ready);
  // A delayed stale REQ (same incarnation, lower generation) changes nothing.
  const Endpoint* ep = w.host(0).engine->FindEndpoint(
      OwnerForKey(EndpointKey{"sim0", w.host(1).addr + "@sim0"}, 2), 0, w.host(1).addr + "@sim0");
  if (ep == nullptr || ep->state() != EndpointState::kReady || !ep->peer()) return "no READY";
  // A REQ delayed from the peer's PREVIOUS incarnation (the C6 hole: a
  // random incarnation looks "new") must be STALE too.
  HandshakeMessage stale;
  stale.type = HandshakeType::kReq;
  stale.incarnation = old_inc;
  stale.generation = 1;
  stale.src_nic_path = w.host(1).addr + "@sim0";
  stale.dst_nic = "sim0";
  stale.qps = {HandshakeQp{0x999, 1}, HandshakeQp{0x998, 2}};
  stale.mtu = hal::Mtu::k1024;
  const size_t before = w.host(0).obs->records().size();
  (void)w.host(1).net->Send(w.host(0).addr, *EncodeHandshake(stale));
  w.RunUntil([] { return false; }, 5'000'000);
  if (Find(w.host(0).obs->records(), "ep_retire", key0, before) >= 0)
    return "stale REQ retired a healthy endpoint";
  if (Find(w.host(0).obs->records(), "stale_req", key0, before) < 0) return "stale not seen";
  if (std::string v = w.OracleAndViolations(); !v.empty()) return "oracle: " + v;
  if (std::string l = w.ShutdownAndCheckLeaks(); !l.empty()) return "leak: " + l;
  return "";
}

TEST(EngineSim, C6PeerRestartFirstReqSucceedsAndStaleReqChangesNothing) {
  for (uint64_t s = 1; s <= 5; ++s) ASSERT_EQ(PeerRestart(s, base::Mutations()), "") << s;
}

TEST(EngineSim, C6MutationAcceptStaleFails) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP();
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  base::Mutations m;
  m.Enable(base::Mutation::kEngineC6AcceptStale);
  const std::string r = PeerRestart(1, m);
  EXPECT_NE(r.find("stale REQ retired a healthy endpoint"), std::string::npos) << r;
#endif
}

// ---------------------------------------------------------------- C9
TEST(EngineSim, C9MutationLeakAtShutdownIsReported) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP();
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  base::Mutations m;
  m.Enable(base::Mutation::kEngineC9LeakAtShutdown);
  const std::string r = EndToEnd(1, m);
  EXPECT_NE(r.find("leak"), std::string::npos) << r;
  std::printf("C9 mutation result: %s\n", r.c_str());
#endif
}

}  // namespace
}  // namespace ferry::engine::testing
