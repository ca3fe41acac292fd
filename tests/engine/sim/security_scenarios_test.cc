// tests/engine/sim/security_scenarios_test.cc: the rejection matrix of
// docs/security.md on the simulated RNIC and control network, with the
// oracle on at every step and the C9 leak check at the end of each.
//
// Each row: who tries, what it tries, and what must hold afterwards.
//   authenticated peer      opens, WRITEs              completes, bytes land
//   unauthenticated peer    opens                      DEADLINE_EXCEEDED; the
//                                                      target delivered nothing,
//                                                      sent no descriptor
//   wrong secret            opens                      the same; the client
//                                                      refuses the server proof
//   forged PROOF (attacker) opens a session            no session, no delivery
//   replayed DATA (dup net) every message twice        each delivered once
//   outside the allowlist   opens                      dropped before decoding
//   outside a peer set      opens                      PERMISSION_DENIED, no rkey
//   outside it after a      refetches on REM_ACCESS    refused: given up, in the
//   re-registration                                    order error, start, refused
//   WRITE into read-only    Submit WRITE               PERMISSION_DENIED at
//                                                      Submit, nothing enqueued,
//                                                      bytes unchanged; with
//                                                      the check removed the
//                                                      RNIC refuses it
//                                                      (REM_ACCESS_ERR)
// Each row's guard has a mutation switch; the *Caught tests turn it on and
// assert the row's own failure message. Scenarios return "" or what broke.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/mutation.h"
#include "engine/auth/auth_wire.h"
#include "engine/auth/hmac_sha256.h"
#include "engine/descriptor_wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/types.h"
#include "tests/engine/sim/two_engines.h"

namespace ferry::engine::testing {
namespace {

using ::testing::HasSubstr;

const std::string kSecret = "0123456789abcdef0123456789abcdef-shared";
const std::string kOtherSecret = "fedcba9876543210fedcba9876543210-other";
constexpr uint64_t kLen = 16 * 1024;

AuthConfig Auth(std::string identity, std::string secret) {
  AuthConfig a;
  a.mode = AuthConfig::Mode::kSharedSecret;
  a.identity = std::move(identity);
  a.secret = std::move(secret);
  return a;
}

struct World {
  simworld::WorldOptions options;
  sim::NetPlan plan;
  base::Mutations mutations;
  uint64_t seed = 1;
  std::unique_ptr<TwoEngines> Make() const {
    return std::make_unique<TwoEngines>(seed, plan, mutations, ScenarioConfig(),
                                        TwoEngines::MakeFabricConfig(), options);
  }
};

// h1 WRITEs 16 KiB into h0 and the bytes land.
std::string WriteLands(TwoEngines& w, SegmentHandle seg, uint64_t tag) {
  Fill(w, 1, 0, kLen, tag);
  const TaskStatus st = Run1(w, 1, MakeReq(w, 1, seg, OpKind::kWrite, 0, 0, kLen)).first;
  if (st != TaskStatus::kCompleted)
    return absl::StrCat("WRITE ended ", std::string(TaskStatusName(st)));
  if (!Holds(w, 0, 0, kLen, tag)) return "WRITE bytes did not land";
  return "";
}

// Nothing reached host 0's engine and host 0 answered nothing: no session,
// nothing delivered, host 1 read nothing from it, and no QP exists.
std::string NothingCrossed(TwoEngines& w) {
  const AuthStats s0 = w.host(0).engine->GetAuthStats();
  const AuthStats s1 = w.host(1).engine->GetAuthStats();
  if (s0.sessions_established != 0 || s0.delivered != 0)
    return absl::StrCat("target opened ", s0.sessions_established, " sessions, delivered ",
                        s0.delivered, " messages");
  if (s1.delivered != 0) return absl::StrCat("the target's answers reached h1: ", s1.delivered);
  // No descriptor crossed, so no side connected: no QP exists anywhere.
  for (const std::string& o : w.fabric().LiveObjects())
    if (absl::StartsWith(o, "qp ")) return "a QP exists: " + o;
  return "";
}

// --------------------------------------------------------------- rows
std::string AuthenticatedTransfer(const World& cfg) {
  World c = cfg;
  c.options.host_auth = {{0, Auth("node-0", kSecret)}, {1, Auth("node-1", kSecret)}};
  auto w = c.Make();
  if (!w->start_failure().empty()) return w->start_failure();
  auto seg = w->Open(1, 0);
  if (!seg.ok()) return "open: " + seg.status().ToString();
  if (std::string e = WriteLands(*w, *seg, 41); !e.empty()) return e;
  const AuthStats s0 = w->host(0).engine->GetAuthStats();
  if (s0.sessions_established != 1 || s0.delivered == 0 || s0.dropped_bad_proof != 0 ||
      s0.dropped_bad_tag != 0 || s0.dropped_unauthenticated != 0)
    return absl::StrCat("target stats: sessions ", s0.sessions_established, " delivered ",
                        s0.delivered);
  return Finish(*w);
}

// h1 opens h0 in a world where it must not get in: the open ends
// DEADLINE_EXCEEDED (the target never answers), `counted` (the refusal's
// counter, read from host `counter_host`) moved, and nothing crossed.
std::string OpenGetsNothing(const World& c, const std::string& who, uint64_t AuthStats::*counted,
                            uint32_t counter_host, const std::string& not_counted) {
  auto w = c.Make();
  if (!w->start_failure().empty()) return w->start_failure();
  auto seg = w->Open(1, 0);
  if (seg.ok() || seg.status().code() != absl::StatusCode::kDeadlineExceeded)
    return who + "'s open ended " + seg.status().ToString();
  if (w->host(counter_host).engine->GetAuthStats().*counted == 0) return not_counted;
  if (std::string n = NothingCrossed(*w); !n.empty()) return n;
  return Finish(*w);
}

std::string Unauthenticated(const World& cfg) {
  World c = cfg;
  c.options.host_auth = {{0, Auth("node-0", kSecret)}};
  return OpenGetsNothing(c, "an unauthenticated peer", &AuthStats::dropped_unauthenticated, 0,
                         "no unauthenticated message counted");
}

// The client checks the server's proof first, and refuses it.
std::string WrongSecret(const World& cfg) {
  World c = cfg;
  c.options.host_auth = {{0, Auth("node-0", kSecret)}, {1, Auth("node-1", kOtherSecret)}};
  return OpenGetsNothing(c, "a wrong-secret peer", &AuthStats::dropped_bad_proof, 1,
                         "the client did not refuse a proof under another key");
}

// An attacker endpoint on the network (h9) answers the server's CHALLENGE
// with a PROOF and a DATA under a key it guessed.
std::string ForgedProof(const World& cfg) {
  World c = cfg;
  c.options.host_auth = {{0, Auth("node-0", kSecret)}, {1, Auth("node-1", kSecret)}};
  auto w = c.Make();
  if (!w->start_failure().empty()) return w->start_failure();
  auto attacker = w->net().Bind("h9:1000");
  if (!attacker.ok()) return "bind: " + attacker.status().ToString();
  auth::AuthMessage hello;
  hello.type = auth::AuthType::kHello;
  hello.identity = "node-1";  // claims a known identity
  hello.client_nonce.fill(7);
  (void)(*attacker)->Send(w->host(0).addr, *auth::EncodeAuth(hello));
  std::optional<auth::AuthMessage> challenge;
  w->RunUntil(
      [&] {
        auto m = (*attacker)->Poll(0);
        if (m.ok() && m->has_value()) {
          auto d = auth::DecodeAuth((*m)->bytes);
          if (d.ok() && d->type == auth::AuthType::kChallenge) challenge = *d;
        }
        return challenge.has_value();
      },
      1'000'000'000);
  if (!challenge) return "no CHALLENGE for the attacker's HELLO";
  auth::AuthMessage proof;
  proof.type = auth::AuthType::kProof;
  proof.session = challenge->session;
  proof.proof.fill(0x5a);  // what a party without the key can send
  (void)(*attacker)->Send(w->host(0).addr, *auth::EncodeAuth(proof));
  DescMessage req;
  req.type = DescType::kReq;
  req.token = 77;
  auth::AuthMessage data;
  data.type = auth::AuthType::kData;
  data.session = challenge->session;
  data.seq = 1;
  data.payload = EncodeDesc(req);
  data.tag.fill(0x33);
  (void)(*attacker)->Send(w->host(0).addr, *auth::EncodeAuth(data));
  w->RunUntil([] { return false; }, 50'000'000);
  const AuthStats s0 = w->host(0).engine->GetAuthStats();
  if (s0.sessions_established != 0) return "a PROOF under a wrong key opened a session";
  if (s0.dropped_bad_proof != 1) return absl::StrCat("bad proofs counted: ", s0.dropped_bad_proof);
  if (s0.delivered != 0) return "the attacker's DATA was delivered";
  auto got = (*attacker)->Poll(0);
  if (got.ok() && got->has_value() && IsDescriptorMessage((*got)->bytes))
    return "the attacker received a descriptor";
  return Finish(*w);
}

// The network delivers every message twice: each second copy is a replay
// of an authenticated DATA, and must not reach the engine again.
std::string Replayed(const World& cfg) {
  World c = cfg;
  c.plan.duplicate = sim::kAlways;
  c.options.host_auth = {{0, Auth("node-0", kSecret)}, {1, Auth("node-1", kSecret)}};
  auto w = c.Make();
  if (!w->start_failure().empty()) return w->start_failure();
  auto seg = w->Open(1, 0);
  if (!seg.ok()) return "open: " + seg.status().ToString();
  if (std::string e = WriteLands(*w, *seg, 43); !e.empty()) return e;
  w->RunUntil([] { return false; }, 20'000'000);  // let the last copies arrive
  const AuthStats s0 = w->host(0).engine->GetAuthStats();
  if (s0.dropped_replayed == 0)
    return absl::StrCat("a duplicated DATA was delivered twice (", s0.delivered, " delivered)");
  return Finish(*w);
}

std::string OutsideAllowlist(const World& cfg) {
  World c = cfg;
  AuthConfig a0;  // authentication off: the allowlist alone
  a0.allowlist = {"h7"};
  c.options.host_auth = {{0, a0}};
  const std::string r = OpenGetsNothing(c, "a host outside the allowlist",
                                        &AuthStats::dropped_allowlist, 0, "no drop counted");
  if (absl::StartsWith(r, "a host outside the allowlist's open ended OK"))
    return "a host outside the allowlist opened the segment";
  return r;
}

std::string OutsidePeerSet(const World& cfg) {
  World c = cfg;
  c.options.host_auth = {{0, Auth("node-0", kSecret)}, {1, Auth("node-1", kSecret)}};
  MemoryOptions only7;
  only7.peers = {"node-7"};
  c.options.host_memory = {{0, only7}};
  auto w = c.Make();
  if (!w->start_failure().empty()) return w->start_failure();
  auto seg = w->Open(1, 0);
  if (seg.ok()) return "a peer outside the set got the segment";
  if (seg.status().code() != absl::StatusCode::kPermissionDenied ||
      !absl::StrContains(seg.status().message(), "node-1"))
    return "open ended " + seg.status().ToString();
  if (w->host(0).engine->GetAuthStats().descriptor_refusals != 1) return "refusal not counted";
  return Finish(*w);
}

std::string InsidePeerSet(const World& cfg) {
  World c = cfg;
  c.options.host_auth = {{0, Auth("node-0", kSecret)}, {1, Auth("node-1", kSecret)}};
  MemoryOptions only1;
  only1.peers = {"node-1"};
  c.options.host_memory = {{0, only1}};
  auto w = c.Make();
  if (!w->start_failure().empty()) return w->start_failure();
  auto seg = w->Open(1, 0);
  if (!seg.ok()) return "open: " + seg.status().ToString();
  if (std::string e = WriteLands(*w, *seg, 44); !e.empty()) return e;
  return Finish(*w);
}

// h1 holds h0's segment; h0 then re-registers its buffer for node-7 only.
// h1's next READ fails REM_ACCESS_ERR (the old rkey is gone), the refetch
// it starts is refused, and is counted as given up: in this order.
std::string RefetchRefused(const World& cfg) {
  World c = cfg;
  c.options.host_auth = {{0, Auth("node-0", kSecret)}, {1, Auth("node-1", kSecret)}};
  auto w = c.Make();
  if (!w->start_failure().empty()) return w->start_failure();
  auto seg = w->Open(1, 0);
  if (!seg.ok()) return "open: " + seg.status().ToString();
  if (std::string e = WriteLands(*w, *seg, 45); !e.empty()) return e;
  SteppedEngine& e0 = *w->host(0).engine;
  if (!e0.UnregisterMemory(w->host(0).buf.data()).ok()) return "unregister";
  MemoryOptions only7;
  only7.peers = {"node-7"};
  if (!e0.RegisterMemory(w->host(0).buf.data(), w->host(0).buf.size(), only7).ok())
    return "re-register";
  const size_t from = w->host(1).obs->records().size();
  const TaskStatus st = Run1(*w, 1, MakeReq(*w, 1, *seg, OpKind::kRead, 0, 0, kLen)).first;
  if (st != TaskStatus::kFailed)
    return absl::StrCat("READ on the old rkey ended ", std::string(TaskStatusName(st)));
  w->RunUntil([&] { return !w->host(1).engine->GetSegmentInfo(*seg)->refetch_in_flight; },
              100'000'000);
  const auto& r = w->host(1).obs->records();
  int64_t err = -1;
  for (size_t i = from; i < r.size() && err < 0; ++i)
    if (r[i].kind == "cqe_error" && r[i].a == static_cast<uint64_t>(hal::WcStatus::kRemAccessErr))
      err = static_cast<int64_t>(i);
  const int64_t start = Find(r, "refetch_start", "", from);
  const int64_t refused = Find(r, "refetch_refused", "", from);
  if (!(err >= 0 && start > err && refused > start))
    return absl::StrCat("order rem_access=", err, " start=", start, " refused=", refused);
  const SegmentInfo i = *w->host(1).engine->GetSegmentInfo(*seg);
  if (i.refetches_given_up != 1 || i.refetches_applied != 0)
    return absl::StrCat("given up ", i.refetches_given_up, " applied ", i.refetches_applied);
  if (e0.GetAuthStats().descriptor_refusals != 1) return "refusal not counted at h0";
  return Finish(*w);
}

// h0's buffer is read-only: h1's WRITE is refused at Submit (C8) and
// h0's bytes stay; a READ completes. Without the Submit check the RNIC
// refuses it (REM_ACCESS_ERR at h1, bytes unchanged), which the message
// then says.
std::string WriteIntoReadOnly(const World& cfg) {
  World c = cfg;
  MemoryOptions ro;
  ro.access = RemoteAccess::kRead;
  c.options.host_memory = {{0, ro}};
  auto w = c.Make();
  if (!w->start_failure().empty()) return w->start_failure();
  auto seg = w->Open(1, 0);
  if (!seg.ok()) return "open: " + seg.status().ToString();
  Fill(*w, 0, 0, kLen, 5);
  Fill(*w, 1, 0, kLen, 6);
  auto batch = w->host(1).engine->AllocateBatch(4);
  const size_t tracked = w->tracked().size();
  SubmitResult sr = w->Submit(1, *batch, {MakeReq(*w, 1, *seg, OpKind::kWrite, 0, 0, kLen)});
  if (sr.status.ok()) {
    TaskStatus st = TaskStatus::kPending;
    w->RunUntil(
        [&] {
          st = *w->host(1).engine->GetTaskStatus(sr.tasks[0]);
          return IsTerminal(st);
        },
        5'000'000'000);
    const auto& r = w->host(1).obs->records();
    bool rem_access = false;
    for (const LifecycleRecord& rec : r)
      rem_access = rem_access || (rec.kind == "cqe_error" &&
                                  rec.a == static_cast<uint64_t>(hal::WcStatus::kRemAccessErr));
    return absl::StrCat("Submit accepted a WRITE into a read-only range; the RNIC ",
                        rem_access ? "refused it (REM_ACCESS_ERR)" : "did not refuse it", ", task ",
                        std::string(TaskStatusName(st)), ", bytes ",
                        Holds(*w, 0, 0, kLen, 5) ? "unchanged" : "CHANGED");
  }
  if (sr.per_request.size() != 1 || sr.per_request[0].code() != absl::StatusCode::kPermissionDenied)
    return "Submit refused with " +
           (sr.per_request.empty() ? sr.status : sr.per_request[0]).ToString();
  if (w->tracked().size() != tracked || !sr.tasks.empty()) return "something was enqueued";
  if (!Holds(*w, 0, 0, kLen, 5)) return "read-only bytes changed";
  const TaskStatus rd = Run1(*w, 1, MakeReq(*w, 1, *seg, OpKind::kRead, 0, 0, kLen)).first;
  if (rd != TaskStatus::kCompleted)
    return absl::StrCat("READ of a read-only range ended ", std::string(TaskStatusName(rd)));
  if (!Holds(*w, 1, 0, kLen, 5)) return "READ bytes wrong";
  return Finish(*w);
}

// --------------------------------------------------------------- tests
World Seeded(uint64_t seed) {
  World c;
  c.seed = seed;
  return c;
}

TEST(Security, AuthenticatedPeerTransfers) {
  for (uint64_t s = 1; s <= 3; ++s) ASSERT_EQ(AuthenticatedTransfer(Seeded(s)), "") << s;
}
TEST(Security, UnauthenticatedPeerGetsNothing) {
  for (uint64_t s = 1; s <= 2; ++s) ASSERT_EQ(Unauthenticated(Seeded(s)), "") << s;
}
TEST(Security, WrongSecretGetsNothing) {
  for (uint64_t s = 1; s <= 2; ++s) ASSERT_EQ(WrongSecret(Seeded(s)), "") << s;
}
TEST(Security, ForgedProofOpensNoSession) { ASSERT_EQ(ForgedProof(Seeded(1)), ""); }
TEST(Security, ReplayedDataIsDeliveredOnce) {
  for (uint64_t s = 1; s <= 3; ++s) ASSERT_EQ(Replayed(Seeded(s)), "") << s;
}
TEST(Security, OutsideAllowlistIsDropped) { ASSERT_EQ(OutsideAllowlist(Seeded(1)), ""); }
TEST(Security, OutsidePeerSetIsRefused) { ASSERT_EQ(OutsidePeerSet(Seeded(1)), ""); }
TEST(Security, InsidePeerSetTransfers) { ASSERT_EQ(InsidePeerSet(Seeded(1)), ""); }
TEST(Security, ARefusedRefetchIsGivenUp) {
  for (uint64_t s = 1; s <= 2; ++s) ASSERT_EQ(RefetchRefused(Seeded(s)), "") << s;
}
TEST(Security, WriteIntoReadOnlyIsRefusedAtSubmit) {
  for (uint64_t s = 1; s <= 2; ++s) ASSERT_EQ(WriteIntoReadOnly(Seeded(s)), "") << s;
}

// Each guard's mutation fails its row with the row's own message.
World Mutated(base::Mutation m) {
  World c;
  c.mutations.Enable(m);
  return c;
}
TEST(SecurityMutations, AcceptBadProofIsCaught) {
  EXPECT_THAT(ForgedProof(Mutated(base::Mutation::kEngineAuthAcceptBadProof)),
              HasSubstr("a PROOF under a wrong key opened a session"));
}
TEST(SecurityMutations, NoReplayWindowIsCaught) {
  EXPECT_THAT(Replayed(Mutated(base::Mutation::kEngineAuthNoReplayWindow)),
              HasSubstr("a duplicated DATA was delivered twice"));
}
TEST(SecurityMutations, IgnoreAllowlistIsCaught) {
  EXPECT_THAT(OutsideAllowlist(Mutated(base::Mutation::kEngineAuthIgnoreAllowlist)),
              HasSubstr("a host outside the allowlist opened the segment"));
}
TEST(SecurityMutations, ExposeToAllIsCaught) {
  EXPECT_THAT(OutsidePeerSet(Mutated(base::Mutation::kEngineExposeToAllPeers)),
              HasSubstr("a peer outside the set got the segment"));
}
// Without the Submit check the RNIC itself refuses the WRITE: the
// registration carries exactly the access asked for.
TEST(SecurityMutations, NoRemoteAccessCheckIsCaughtAndTheRnicRefuses) {
  EXPECT_EQ(WriteIntoReadOnly(Mutated(base::Mutation::kEngineC8NoRemoteAccessCheck)),
            "Submit accepted a WRITE into a read-only range; the RNIC refused it "
            "(REM_ACCESS_ERR), task FAILED, bytes unchanged");
}

}  // namespace
}  // namespace ferry::engine::testing
