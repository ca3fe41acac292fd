// tests/engine/sim/refetch_scenarios_test.cc: segment descriptors refetched
// on REM_ACCESS_ERR (docs/design.md section 4, "Errors, retries, rails"), on the
// simulated RNIC and control network with the oracle on at every step and
// the C9 leak check at the end of each scenario.
//
// Every scenario starts like EngineContracts.DeviceFatal...: host 0's
// device context dies and is re-enabled (new rkeys, descriptor version
// bumped, C7) while host 1 keeps the SegmentHandle it opened before. Then:
// - the first READ on the old handle ends FAILED (REM_ACCESS_ERR), the
//   owner reports it, one refetch runs, the new descriptor is applied, and
//   the SAME handle's next READ completes with verified bytes;
// - an answer with the same version changes nothing (the next READ fails
//   again and starts a second refetch, which applies the real one);
// - control-network loss during the refetch: resent every
//   handshake_timeout_ns (recovers when the link heals), and given up after
//   handshake_retries resends (a later REM_ACCESS_ERR starts a new one);
// - several errors at once start one refetch; an answer from a restarted
//   peer (another incarnation) changes nothing; CloseSegment ends a refetch.
// Each asserts the order of the events it is about. Scenarios return "" on
// success or what broke.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutation.h"
#include "engine/descriptor_wire.h"
#include "gtest/gtest.h"
#include "hal/types.h"
#include "tests/engine/sim/two_engines.h"

namespace ferry::engine::testing {
namespace {

int Count(const std::vector<LifecycleRecord>& r, std::string_view kind, size_t from = 0) {
  int n = 0;
  for (size_t i = from; i < r.size(); ++i) n += r[i].kind == kind;
  return n;
}

SegmentInfo Info(TwoEngines& w, uint32_t h, SegmentHandle seg) {
  auto i = w.host(h).engine->GetSegmentInfo(seg);
  FERRY_CHECK(i.ok());
  return *i;
}

// The READ of the scenarios: host 1 pulls host 0's [400 KiB, +16 KiB).
constexpr uint64_t kOff = 400 * 1024;
constexpr uint64_t kLen = 16 * 1024;

// Both segments open, a warm-up WRITE, then host 0's DEVICE_FATAL and
// re-enable (version bumped). Returns "" and host 1's old handle.
std::string Prologue(TwoEngines& w, SegmentHandle* seg10) {
  auto seg = w.Open(0, 1);
  auto back = w.Open(1, 0);
  if (!seg.ok() || !back.ok()) return "open";
  *seg10 = *back;
  if (Run1(w, 0, MakeReq(w, 0, *seg, OpKind::kWrite, 0, 0, 16 * 1024)).first !=
      TaskStatus::kCompleted)
    return "warm-up";
  SteppedEngine& e0 = *w.host(0).engine;
  const uint64_t v0 = e0.LocalSegment().version;
  if (Info(w, 1, *seg10).version != v0) return "host 1 holds another version";
  const size_t from = w.host(0).obs->records().size();
  if (absl::Status s = InjectDeviceFatal(w, 0, "sim0"); !s.ok()) return "inject: " + s.ToString();
  w.RunUntil([&] { return Find(w.host(0).obs->records(), "ctx_resumed", "", from) >= 0; },
             1'000'000'000);
  if (Find(w.host(0).obs->records(), "ctx_resumed", "", from) < 0) return "not resumed";
  if (e0.LocalSegment().version <= v0) return "descriptor version not bumped";
  const SegmentInfo i = Info(w, 1, *seg10);
  if (i.version != v0 || i.stale || i.refetch_in_flight || i.refetches_started != 0)
    return "host 1's handle changed before any error";
  Fill(w, 0, kOff, kLen, 82);
  return "";
}

// The READ on the old handle: FAILED, the cqe_error (REM_ACCESS_ERR) before
// refetch_start, and the refetch in flight with the segment stale.
std::string FailFirstRead(TwoEngines& w, SegmentHandle seg10, size_t from) {
  const TaskStatus old = Run1(w, 1, MakeReq(w, 1, seg10, OpKind::kRead, kOff, kOff, kLen)).first;
  if (old != TaskStatus::kFailed)
    return absl::StrCat("READ with old rkeys ended ", std::string(TaskStatusName(old)));
  const auto& r = w.host(1).obs->records();
  int64_t err = -1;
  for (size_t i = from; i < r.size() && err < 0; ++i)
    if (r[i].kind == "cqe_error" && r[i].a == static_cast<uint64_t>(hal::WcStatus::kRemAccessErr))
      err = static_cast<int64_t>(i);
  const int64_t start = Find(r, "refetch_start", w.host(0).addr, from);
  if (!(err >= 0 && start > err)) return absl::StrCat("order rem_access=", err, " start=", start);
  if (r[start].a != seg10.id) return "refetch_start names another segment";
  const SegmentInfo i = Info(w, 1, seg10);
  if (!i.stale || !i.refetch_in_flight) return "not stale / no refetch in flight after the error";
  bool listed = false;
  for (const PendingItem& p : w.host(1).engine->Pending().items)
    listed = listed || (p.kind == PendingItem::Kind::kSegment && p.id == seg10.id);
  if (!listed) return "refetch not listed by Pending()";
  return "";
}

// The same handle's READ completes with host 0's bytes.
std::string ReadCompletes(TwoEngines& w, SegmentHandle seg10) {
  Fill(w, 1, kOff, kLen, 7);  // overwritten only by a READ that moved bytes
  const TaskStatus st = Run1(w, 1, MakeReq(w, 1, seg10, OpKind::kRead, kOff, kOff, kLen)).first;
  if (st != TaskStatus::kCompleted)
    return absl::StrCat("READ on the refreshed handle ended ", std::string(TaskStatusName(st)));
  if (!Holds(w, 1, kOff, kLen, 82)) return "READ bytes wrong";
  return "";
}

// ---------------------------------------------------------------- refetch
std::string RefetchAfterDeviceFatal(uint64_t seed) {
  TwoEngines w(seed, sim::NetPlan{}, base::Mutations(), ScenarioConfig());
  SegmentHandle seg10;
  if (std::string p = Prologue(w, &seg10); !p.empty()) return p;
  const uint64_t v_new = w.host(0).engine->LocalSegment().version;
  const size_t from = w.host(1).obs->records().size();
  if (std::string f = FailFirstRead(w, seg10, from); !f.empty()) return f;
  w.RunUntil([&] { return !Info(w, 1, seg10).refetch_in_flight; }, 100'000'000);
  const SegmentInfo i = Info(w, 1, seg10);
  if (i.version != v_new || i.stale || i.refetches_started != 1 || i.refetches_applied != 1)
    return absl::StrCat("after refetch: version ", i.version, " (want ", v_new, ") stale ", i.stale,
                        " started ", i.refetches_started, " applied ", i.refetches_applied);
  const auto& r = w.host(1).obs->records();
  const int64_t start = Find(r, "refetch_start", "", from),
                applied = Find(r, "refetch_applied", "", from);
  if (!(start >= 0 && applied > start)) return "order start/applied";
  if (r[applied].b != v_new) return "refetch_applied names another version";
  for (const PendingItem& p : w.host(1).engine->Pending().items)
    if (p.kind == PendingItem::Kind::kSegment) return "refetch still listed by Pending()";
  const size_t before_read = r.size();
  if (std::string c = ReadCompletes(w, seg10); !c.empty()) return c;
  if (Find(r, "post", "", before_read) < 0) return "no post after the refetch";
  if (Count(r, "refetch_start", from) != 1) return "refetched more than once";
  return Finish(w);
}

TEST(Refetch, RemAccessErrRefetchesAndTheSameHandleResumes) {
  for (uint64_t s = 1; s <= 4; ++s) ASSERT_EQ(RefetchAfterDeviceFatal(s), "") << "seed " << s;
}

// Fails host 1's first READ on the old rkeys (a refetch starts), cuts h1 ->
// h0 so the real DESC_REQ is dropped, and fills `rep` with an answer to the
// refetch in flight in host 0's name (its current descriptor) for the test
// to send. "" or what went wrong.
std::string CutRefetchAndForgeAnswer(TwoEngines& w, SegmentHandle seg10, size_t from,
                                     DescMessage* rep) {
  if (std::string f = FailFirstRead(w, seg10, from); !f.empty()) return f;
  // The request is on the wire: cut h1 -> h0 so it is dropped.
  if (!w.net().Partition(w.host(1).addr, w.host(0).addr, sim::PartitionDir::kOneWay).ok())
    return "partition";
  rep->type = DescType::kRep;
  rep->token = w.host(1).engine->RefetchTokenOf(seg10);
  if (rep->token == 0) return "no refetch token";
  rep->descriptor = w.host(0).engine->LocalSegment();
  return "";
}

// The peer answers the refetch with the version host 1 already holds (the
// test answers in host 0's name, with host 0's new rkeys but the old
// version; the real request is cut): nothing changes. The next READ fails
// again and starts a second refetch, which applies host 0's real answer.
std::string SameVersionAnswer(uint64_t seed, const base::Mutations& m = base::Mutations(),
                              std::string* oracle = nullptr) {
  TwoEngines w(seed, sim::NetPlan{}, m, ScenarioConfig());
  SegmentHandle seg10;
  if (std::string p = Prologue(w, &seg10); !p.empty()) return p;
  const std::string a0 = w.host(0).addr, a1 = w.host(1).addr;
  const uint64_t v_old = Info(w, 1, seg10).version;
  const uint64_t v_new = w.host(0).engine->LocalSegment().version;
  const size_t from = w.host(1).obs->records().size();
  DescMessage rep;
  if (std::string f = CutRefetchAndForgeAnswer(w, seg10, from, &rep); !f.empty()) return f;
  rep.descriptor.version = v_old;
  if (!w.host(0).net->Send(a1, EncodeDesc(rep)).ok()) return "send";
  w.RunUntil([&] { return !Info(w, 1, seg10).refetch_in_flight; }, 100'000'000);
  SegmentInfo i = Info(w, 1, seg10);
  if (oracle != nullptr) *oracle = w.OracleAndViolations();
  if (i.version != v_old || !i.stale || i.refetches_unchanged != 1 || i.refetches_applied != 0)
    return absl::StrCat("same-version answer changed something: version ", i.version, " stale ",
                        i.stale, " unchanged ", i.refetches_unchanged);
  const auto& r = w.host(1).obs->records();
  const int64_t start = Find(r, "refetch_start", "", from),
                unchanged = Find(r, "refetch_unchanged", "", from);
  if (!(start >= 0 && unchanged > start)) return "order start/unchanged";
  if (Find(r, "refetch_applied", "", from) >= 0) return "applied a same-version answer";
  if (!w.net().Heal(a1, a0).ok()) return "heal";
  // Still the old rkeys: FAILED again, a second refetch, now applied.
  const size_t second = r.size();
  if (std::string f = FailFirstRead(w, seg10, second); !f.empty()) return "second: " + f;
  w.RunUntil([&] { return !Info(w, 1, seg10).refetch_in_flight; }, 100'000'000);
  i = Info(w, 1, seg10);
  if (i.version != v_new || i.refetches_started != 2 || i.refetches_applied != 1)
    return absl::StrCat("second refetch: version ", i.version, " started ", i.refetches_started);
  if (Find(r, "refetch_applied", "", second) < 0) return "second refetch not applied";
  if (std::string c = ReadCompletes(w, seg10); !c.empty()) return c;
  return Finish(w);
}

TEST(Refetch, SameVersionAnswerChangesNothing) {
  for (uint64_t s = 1; s <= 3; ++s) ASSERT_EQ(SameVersionAnswer(s), "") << "seed " << s;
}

#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
// engine_refetch_any_version: the same-version answer is applied, and the
// oracle's refetch_not_newer names it (the scenario's own check fires too).
TEST(Refetch, SameVersionAnswerAppliedIsCaughtByTheOracle) {
  base::Mutations m;
  m.Enable(base::Mutation::kEngineRefetchAnyVersion);
  std::string oracle;
  EXPECT_EQ(SameVersionAnswer(1, m, &oracle).substr(0, 41),
            "same-version answer changed something: ve");
  EXPECT_NE(oracle.find("refetch_not_newer: h1 applied version "), std::string::npos) << oracle;
  EXPECT_NE(oracle.find(", not newer than version "), std::string::npos) << oracle;
}
#endif

// Two answers to one refetch, the older overtaken (the test answers in host
// 0's name; the real request is cut): the newer applies and ends the
// refetch; the older one, arriving after, finds no refetch, changes
// nothing and is counted (late_refetch_answers, the campaign's probe
// world.refetch_answers_late).
std::string OvertakenAnswer(uint64_t seed) {
  TwoEngines w(seed, sim::NetPlan{}, base::Mutations(), ScenarioConfig());
  SegmentHandle seg10;
  if (std::string p = Prologue(w, &seg10); !p.empty()) return p;
  const std::string a0 = w.host(0).addr, a1 = w.host(1).addr;
  const uint64_t v_old = Info(w, 1, seg10).version;
  const uint64_t v_new = w.host(0).engine->LocalSegment().version;
  if (v_new <= v_old) return "no newer version to answer with";
  const size_t from = w.host(1).obs->records().size();
  DescMessage rep;
  if (std::string f = CutRefetchAndForgeAnswer(w, seg10, from, &rep); !f.empty()) return f;
  if (!w.host(0).net->Send(a1, EncodeDesc(rep)).ok()) return "send newer";
  w.RunUntil([&] { return !Info(w, 1, seg10).refetch_in_flight; }, 100'000'000);
  if (w.host(1).engine->late_refetch_answers() != 0) return "late answer counted early";
  rep.descriptor.version = v_old;
  if (!w.host(0).net->Send(a1, EncodeDesc(rep)).ok()) return "send older";
  w.RunUntil([&] { return w.host(1).engine->late_refetch_answers() != 0; }, 100'000'000);
  const SegmentInfo i = Info(w, 1, seg10);
  if (w.host(1).engine->late_refetch_answers() != 1)
    return absl::StrCat("late answers ", w.host(1).engine->late_refetch_answers(), ", want 1");
  if (i.version != v_new || i.stale || i.refetches_applied != 1 || i.refetches_unchanged != 0)
    return absl::StrCat("the overtaken answer changed something: version ", i.version, " applied ",
                        i.refetches_applied, " unchanged ", i.refetches_unchanged);
  const auto& r = w.host(1).obs->records();
  const int64_t start = Find(r, "refetch_start", "", from),
                applied = Find(r, "refetch_applied", "", from);
  if (!(start >= 0 && applied > start)) return "order start/applied";
  if (Find(r, "refetch_unchanged", "", from) >= 0) return "the late answer was judged";
  if (!w.net().Heal(a1, a0).ok()) return "heal";
  if (std::string c = ReadCompletes(w, seg10); !c.empty()) return c;
  return Finish(w);
}

TEST(Refetch, AnOvertakenAnswerChangesNothingAndIsCounted) {
  for (uint64_t s = 1; s <= 3; ++s) ASSERT_EQ(OvertakenAnswer(s), "") << "seed " << s;
}

// Control-network loss during the refetch. heal_after_ns > 0: h1 -> h0 is
// cut from the first request until then; the refetch resends every
// handshake_timeout_ns and the first resend after the heal gets through.
// heal_after_ns == 0: the cut lasts; exactly handshake_retries resends,
// then refetch_give_up; the handle keeps its old version, stale, and after
// the heal a new REM_ACCESS_ERR starts a new refetch that applies.
std::string LossDuringRefetch(uint64_t seed, uint64_t heal_after_ns) {
  EngineConfig c = ScenarioConfig();
  TwoEngines w(seed, sim::NetPlan{}, base::Mutations(), c);
  SegmentHandle seg10;
  if (std::string p = Prologue(w, &seg10); !p.empty()) return p;
  const std::string a0 = w.host(0).addr, a1 = w.host(1).addr;
  const uint64_t v_old = Info(w, 1, seg10).version;
  const uint64_t v_new = w.host(0).engine->LocalSegment().version;
  const size_t from = w.host(1).obs->records().size();
  if (std::string f = FailFirstRead(w, seg10, from); !f.empty()) return f;
  if (!w.net().Partition(a1, a0, sim::PartitionDir::kOneWay).ok()) return "partition";
  const uint64_t t0 = w.clock().NowNs();
  const auto& r = w.host(1).obs->records();
  if (heal_after_ns > 0) {
    w.RunUntil([&] { return w.clock().NowNs() >= t0 + heal_after_ns; }, heal_after_ns + 1'000'000);
    if (!w.net().Heal(a1, a0).ok()) return "heal";
    w.RunUntil([&] { return !Info(w, 1, seg10).refetch_in_flight; }, 100'000'000);
    const SegmentInfo i = Info(w, 1, seg10);
    if (i.version != v_new || i.refetches_applied != 1 || i.refetches_given_up != 0)
      return absl::StrCat("after heal: version ", i.version, " applied ", i.refetches_applied);
    const int resends = Count(r, "refetch_resend", from);
    const uint64_t expect = heal_after_ns / c.handshake_timeout_ns;
    if (resends < 1 || static_cast<uint64_t>(resends) > expect + 1)
      return absl::StrCat("resends ", resends, " for a ", heal_after_ns, " ns cut");
    const int64_t last_resend = [&] {
      int64_t k = -1;
      for (size_t j = from; j < r.size(); ++j)
        if (r[j].kind == "refetch_resend") k = static_cast<int64_t>(j);
      return k;
    }();
    const int64_t applied = Find(r, "refetch_applied", "", from);
    if (!(last_resend >= 0 && applied > last_resend)) return "order resend/applied";
    if (std::string rc = ReadCompletes(w, seg10); !rc.empty()) return rc;
    return Finish(w);
  }
  const uint64_t budget_ns = c.handshake_timeout_ns * (uint64_t{c.handshake_retries} + 1);
  w.RunUntil([&] { return !Info(w, 1, seg10).refetch_in_flight; }, 10 * budget_ns);
  SegmentInfo i = Info(w, 1, seg10);
  if (i.refetch_in_flight) return "refetch not bounded";
  if (i.version != v_old || !i.stale || i.refetches_given_up != 1 || i.refetches_applied != 0)
    return absl::StrCat("after give-up: version ", i.version, " stale ", i.stale, " given up ",
                        i.refetches_given_up);
  if (w.clock().NowNs() < t0 + budget_ns - c.handshake_timeout_ns) return "gave up early";
  if (Count(r, "refetch_resend", from) != static_cast<int>(c.handshake_retries))
    return absl::StrCat("resends ", Count(r, "refetch_resend", from), " want ",
                        c.handshake_retries);
  const int64_t give_up = Find(r, "refetch_give_up", "", from);
  for (size_t j = from; j < r.size(); ++j)
    if (r[j].kind == "refetch_resend" && static_cast<int64_t>(j) > give_up)
      return "resend after give-up";
  if (give_up < 0) return "no refetch_give_up";
  if (!w.net().Heal(a1, a0).ok()) return "heal";
  const size_t second = r.size();
  if (std::string f = FailFirstRead(w, seg10, second); !f.empty()) return "after heal: " + f;
  w.RunUntil([&] { return !Info(w, 1, seg10).refetch_in_flight; }, 100'000'000);
  i = Info(w, 1, seg10);
  if (i.version != v_new || i.refetches_started != 2 || i.refetches_applied != 1)
    return absl::StrCat("new refetch: version ", i.version, " started ", i.refetches_started);
  if (std::string rc = ReadCompletes(w, seg10); !rc.empty()) return rc;
  return Finish(w);
}

TEST(Refetch, ControlNetLossIsResent) {
  for (uint64_t s = 1; s <= 3; ++s) ASSERT_EQ(LossDuringRefetch(s, 2'500'000), "") << "seed " << s;
}

TEST(Refetch, ControlNetLossIsBounded) {
  for (uint64_t s = 1; s <= 3; ++s) ASSERT_EQ(LossDuringRefetch(s, 0), "") << "seed " << s;
}

// Several requests fail on the old rkeys at about the same time (a batch
// of READs; the flushed ones are reposted on a fresh endpoint and fail
// again): more than one REM_ACCESS_ERR, exactly one refetch.
std::string ConcurrentErrors(uint64_t seed) {
  TwoEngines w(seed, sim::NetPlan{}, base::Mutations(), ScenarioConfig());
  SegmentHandle seg10;
  if (std::string p = Prologue(w, &seg10); !p.empty()) return p;
  const size_t from = w.host(1).obs->records().size();
  SteppedEngine& e1 = *w.host(1).engine;
  auto batch = e1.AllocateBatch(4);
  if (!batch.ok()) return "batch";
  std::vector<Request> reqs;
  for (uint64_t k = 0; k < 4; ++k)
    reqs.push_back(MakeReq(w, 1, seg10, OpKind::kRead, kOff + k * 4096, kOff + k * 4096, 4096));
  SubmitResult sr = w.Submit(1, *batch, reqs);
  if (!sr.status.ok()) return "submit";
  w.RunUntil([&] { return e1.GetBatchStatus(*batch)->overall != TaskStatus::kPending; },
             5'000'000'000);
  const BatchStatus bs = *e1.GetBatchStatus(*batch);
  if (bs.count_by_status[static_cast<size_t>(TaskStatus::kFailed)] != 4)
    return absl::StrCat("batch ended ", std::string(TaskStatusName(bs.overall)));
  w.RunUntil([&] { return !Info(w, 1, seg10).refetch_in_flight; }, 100'000'000);
  const auto& r = w.host(1).obs->records();
  int errors = 0;
  for (size_t i = from; i < r.size(); ++i)
    errors +=
        r[i].kind == "cqe_error" && r[i].a == static_cast<uint64_t>(hal::WcStatus::kRemAccessErr);
  if (errors < 2) return absl::StrCat("only ", errors, " REM_ACCESS_ERR: dedupe not exercised");
  if (Count(r, "refetch_start", from) != 1)
    return absl::StrCat(Count(r, "refetch_start", from), " refetches for ", errors, " errors");
  const SegmentInfo i = Info(w, 1, seg10);
  if (i.refetches_started != 1 || i.refetches_applied != 1 || i.stale)
    return "refetch not applied once";
  if (std::string c = ReadCompletes(w, seg10); !c.empty()) return c;
  return Finish(w);
}

TEST(Refetch, ConcurrentErrorsStartOneRefetch) {
  for (uint64_t s = 1; s <= 3; ++s) ASSERT_EQ(ConcurrentErrors(s), "") << "seed " << s;
}

// The peer process restarted (new incarnation, memory registered again):
// the old handle's READ fails, the refetch's answer comes from another
// incarnation and changes nothing; a re-opened handle works.
std::string PeerRestarted(uint64_t seed) {
  TwoEngines w(seed, sim::NetPlan{}, base::Mutations(), ScenarioConfig());
  auto seg10 = w.Open(1, 0);
  if (!seg10.ok()) return "open";
  const SegmentInfo before = Info(w, 1, *seg10);
  if (!w.Restart(0).ok()) return "restart";
  Fill(w, 0, kOff, kLen, 83);
  const size_t from = w.host(1).obs->records().size();
  const TaskStatus st = Run1(w, 1, MakeReq(w, 1, *seg10, OpKind::kRead, kOff, kOff, kLen)).first;
  if (st != TaskStatus::kFailed)
    return absl::StrCat("READ on the old incarnation's handle ended ",
                        std::string(TaskStatusName(st)));
  w.RunUntil([&] { return !Info(w, 1, *seg10).refetch_in_flight; }, 100'000'000);
  const auto& r = w.host(1).obs->records();
  const int64_t start = Find(r, "refetch_start", "", from),
                other = Find(r, "refetch_other_incarnation", "", from);
  if (!(start >= 0 && other > start))
    return absl::StrCat("order start=", start, " other_incarnation=", other);
  const SegmentInfo i = Info(w, 1, *seg10);
  if (i.incarnation != before.incarnation || i.version != before.version ||
      i.refetches_applied != 0 || i.refetches_unchanged != 1 || !i.stale)
    return "another incarnation's answer changed the handle";
  auto fresh = w.Open(1, 0);
  if (!fresh.ok()) return "re-open";
  Fill(w, 1, kOff, kLen, 7);
  if (Run1(w, 1, MakeReq(w, 1, *fresh, OpKind::kRead, kOff, kOff, kLen)).first !=
          TaskStatus::kCompleted ||
      !Holds(w, 1, kOff, kLen, 83))
    return "READ on the re-opened handle";
  return Finish(w);
}

TEST(Refetch, AnotherIncarnationsAnswerChangesNothing) { ASSERT_EQ(PeerRestarted(1), ""); }

// A closed handle forgets its refetch: nothing is resent, nothing listed.
std::string CloseDuringRefetch(uint64_t seed) {
  TwoEngines w(seed, sim::NetPlan{}, base::Mutations(), ScenarioConfig());
  SegmentHandle seg10;
  if (std::string p = Prologue(w, &seg10); !p.empty()) return p;
  const size_t from = w.host(1).obs->records().size();
  if (std::string f = FailFirstRead(w, seg10, from); !f.empty()) return f;
  if (!w.net().Partition(w.host(1).addr, w.host(0).addr, sim::PartitionDir::kOneWay).ok())
    return "partition";
  if (!w.host(1).engine->CloseSegment(seg10).ok()) return "close";
  if (w.host(1).engine->GetSegmentInfo(seg10).ok()) return "closed handle still known";
  w.RunUntil([] { return false; }, 20'000'000);
  const auto& r = w.host(1).obs->records();
  if (Count(r, "refetch_resend", from) != 0 || Count(r, "refetch_give_up", from) != 0)
    return "refetch of a closed segment still ran";
  for (const PendingItem& p : w.host(1).engine->Pending().items)
    if (p.kind == PendingItem::Kind::kSegment) return "closed segment listed";
  if (!w.net().Heal(w.host(1).addr, w.host(0).addr).ok()) return "heal";
  return Finish(w);
}

TEST(Refetch, CloseSegmentEndsTheRefetch) { ASSERT_EQ(CloseDuringRefetch(1), ""); }

}  // namespace
}  // namespace ferry::engine::testing
