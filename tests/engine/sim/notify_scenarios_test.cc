// tests/engine/sim/notify_scenarios_test.cc: notifications through two
// engines on the simulated RNIC, both profiles, the oracle on after every
// step (contracts N1-N5, docs/contract.md): a Submit's notification is
// delivered once, after its data; a Submit with a task that does not
// COMPLETE sends none; a resend after a lost ACK is not delivered twice;
// receive WRs hold CQ quota; an RNR storm ends FAILED or COMPLETED, never
// a false COMPLETED. Each contract's mutation fails its scenario with the
// oracle's own message.
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/sim/scenario.h"

namespace ferry::engine::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kBlockBytes = 48 * 1024;  // 3 slices, over both QPs
constexpr uint32_t kBlocks = 4;

ScenarioSpec Spec(sim::RnicProfile p, uint64_t seed) {
  ScenarioSpec s;
  s.profile = p;
  s.seed = seed;
  s.config.notify_recv_slots = 4;
  s.config.qp_rnr_retries = 3;
  s.config.cqe_limit = 2048;  // (16 + 4) x 2 QPs x 32 endpoints per CQ
  return s;
}

// The receiver's notifications, polled within the run (h1).
struct Inbox {
  std::vector<Notification> got;
  void Poll(Scenario& sc) {
    for (Notification& n : sc.w().host(1).engine->PollNotifies(16)) got.push_back(std::move(n));
  }
};

// Index of h1's first record of `kind` from `from`, or -1.
int64_t H1At(Scenario& sc, std::string_view kind, size_t from = 0) {
  const auto& r = sc.w().host(1).obs->records();
  for (size_t i = from; i < r.size(); ++i)
    if (r[i].kind == kind) return static_cast<int64_t>(i);
  return -1;
}

// Sends a notification alone from h0 and runs until its task is terminal,
// then 5 ms more (a notification sent would be delivered by then),
// polling h1's notifications into `in` all along.
SubmitResult SendAloneAndSettle(Scenario& sc, BatchId batch, std::string_view message, Inbox& in) {
  SubmitResult sr = sc.w().SubmitNotify(0, batch, {}, 1, sc.seg(), message);
  if (!sr.status.ok()) return sr;
  sc.RunUntil([&] { return IsTerminal(sc.Status(*sr.notify_task)); }, 3'000'000'000,
              [&] { in.Poll(sc); });
  sc.RunFor(5'000'000, [&] { in.Poll(sc); });
  return sr;
}

// kBlocks WRITEs of kBlockBytes with one notification; returns the result.
SubmitResult SubmitBlocks(Scenario& sc, BatchId batch, uint64_t tag0, std::string_view msg) {
  std::vector<Request> reqs;
  for (uint32_t i = 0; i < kBlocks; ++i) {
    const uint64_t off = (1 + i) * kBlockBytes;
    Fill(sc.w(), 0, off, kBlockBytes, tag0 + i);
    reqs.push_back(MakeReq(sc.w(), 0, sc.seg(), OpKind::kWrite, off, off, kBlockBytes));
  }
  return sc.w().SubmitNotify(0, batch, reqs, 1, sc.seg(), msg);
}

// N1, N5: delivered once, after every byte of its Submit; COMPLETED.
std::string DeliveredAfterData(ScenarioSpec spec) {
  Scenario sc(std::move(spec));
  if (!sc.setup().empty()) return sc.setup();
  auto batch = sc.e().AllocateBatch(kBlocks + 2);
  if (!batch.ok()) return std::string(batch.status().message());
  const SubmitResult sr = SubmitBlocks(sc, *batch, 100, "blocks 1-4 landed");
  if (!sr.status.ok()) return "submit: " + std::string(sr.status.message());
  if (!sr.notify_task.has_value() || sr.notify_seq != 1) return "no notification task or seq 1";
  Inbox in;
  sc.RunUntil([&] { return !in.got.empty() && IsTerminal(sc.Status(*sr.notify_task)); },
              200'000'000, [&] { in.Poll(sc); });
  FERRY_SCENARIO_CHECK(sc);
  if (sc.Status(*sr.notify_task) != TaskStatus::kCompleted)
    return absl::StrCat("notification ended ",
                        std::string(TaskStatusName(sc.Status(*sr.notify_task))));
  if (in.got.size() != 1) return absl::StrCat(in.got.size(), " notifications delivered");
  const Notification& n = in.got[0];
  if (n.message != "blocks 1-4 landed" || n.seq != 1 || n.batch != batch->id ||
      n.from != sc.w().host(0).addr || n.incarnation != sc.e().incarnation())
    return absl::StrCat("notification: from ", n.from, " seq ", n.seq, " batch ", n.batch, " '",
                        n.message, "'");
  for (uint32_t i = 0; i < kBlocks; ++i)
    if (!Holds(sc.w(), 1, (1 + i) * kBlockBytes, kBlockBytes, 100 + i))
      return absl::StrCat("block ", i, " did not land");
  // Order: every data task published at h0 before the notification's
  // post and publish; h1 delivered it after the last data publish.
  std::vector<Ev> order;
  for (TaskId t : sr.tasks) order.push_back(Scenario::Publish(sc.Label(t)));
  order.push_back(Scenario::Publish(sc.Label(*sr.notify_task)));
  if (std::string o = sc.InOrder(order); !o.empty()) return o;
  const int64_t d = H1At(sc, "notify_delivered");
  if (d < 0) return "h1 recorded no notify_delivered";
  uint64_t last_data_ns = 0;
  for (TaskId t : sr.tasks) last_data_ns = std::max(last_data_ns, sc.PublishNs(t));
  if (sc.w().host(1).obs->records()[d].time_ns < last_data_ns)
    return "delivered before the last data task published";
  // Receive WRs were re-posted: a second one arrives too (SendNotify).
  const SubmitResult s2 = sc.w().SubmitNotify(0, *batch, {}, 1, sc.seg(), "");
  if (!s2.status.ok()) return "SendNotify: " + std::string(s2.status.message());
  sc.RunUntil([&] { return in.got.size() == 2 && IsTerminal(sc.Status(*s2.notify_task)); },
              200'000'000, [&] { in.Poll(sc); });
  FERRY_SCENARIO_CHECK(sc);
  if (in.got.size() != 2 || in.got[1].seq != 2 || !in.got[1].message.empty())
    return "the SendNotify was not delivered as seq 2";
  return sc.Finish();
}

// N2: a data task CANCELED: nothing is sent, the notification FAILED.
std::string FailedBatchSendsNone(ScenarioSpec spec) {
  Scenario sc(std::move(spec));
  if (!sc.setup().empty()) return sc.setup();
  auto batch = sc.e().AllocateBatch(kBlocks + 1);
  if (!batch.ok()) return std::string(batch.status().message());
  // The canceled task's bytes are at h1 already: N1's byte check passes,
  // so a notification sent anyway shows as N2's violation.
  Fill(sc.w(), 1, 3 * kBlockBytes, kBlockBytes, 202);
  const SubmitResult sr = SubmitBlocks(sc, *batch, 200, "never");
  if (!sr.status.ok()) return "submit: " + std::string(sr.status.message());
  if (absl::Status c = sc.w().Cancel(0, sr.tasks[2]); !c.ok()) return "cancel failed";
  Inbox in;
  sc.RunUntil(
      [&] {
        for (TaskId t : sr.tasks)
          if (!IsTerminal(sc.Status(t))) return false;
        return IsTerminal(sc.Status(*sr.notify_task));
      },
      200'000'000, [&] { in.Poll(sc); });
  sc.RunFor(5'000'000, [&] { in.Poll(sc); });  // a notification sent would arrive by now
  FERRY_SCENARIO_CHECK(sc);
  if (sc.Status(sr.tasks[2]) != TaskStatus::kCanceled) return "task 2 was not CANCELED";
  if (sc.Status(*sr.notify_task) != TaskStatus::kFailed)
    return absl::StrCat("notification ended ",
                        std::string(TaskStatusName(sc.Status(*sr.notify_task))));
  if (!in.got.empty()) return "a notification was delivered";
  // Order: the cancel, then the notification's FAILED publish.
  if (std::string o = sc.InOrder(
          {Scenario::Cancel(sc.Label(sr.tasks[2])), Scenario::Publish(sc.Label(*sr.notify_task))});
      !o.empty())
    return o;
  return sc.Finish();
}

// N3: the SEND lands but the sender's QP fails before its ACK arrives; the
// notification is resent on a new endpoint and the receiver delivers it
// once (its duplicate counted).
std::string ResendNotDeliveredTwice(ScenarioSpec spec) {
  Scenario sc(std::move(spec));
  if (!sc.setup().empty()) return sc.setup();
  auto batch = sc.e().AllocateBatch(1);
  if (!batch.ok()) return std::string(batch.status().message());
  const uint64_t recvs = sc.w().fabric().stats().recv_cqes;
  const SubmitResult sr = sc.w().SubmitNotify(0, *batch, {}, 1, sc.seg(), "once");
  if (!sr.status.ok()) return "submit: " + std::string(sr.status.message());
  // The step the SEND is placed at h1 (its ACK on the wire), h0's QPs go
  // to ERR (a QP_FATAL): the SEND's WR flushes, the ACK finds no QP, and
  // h0 sends the notification again on a new endpoint.
  bool cut = false;
  sc.RunUntil([&] { return cut; }, 50'000'000,
              [&] {
                if (cut || sc.w().fabric().stats().recv_cqes == recvs) return;
                cut = true;
                if (std::string f = sc.ArmAll(sim::FaultKind::kWrFlush); !f.empty()) sc.Flag(f);
              });
  if (!cut) return "the SEND never reached h1";
  Inbox in;
  sc.RunUntil([&] { return IsTerminal(sc.Status(*sr.notify_task)) && !in.got.empty(); },
              2'000'000'000, [&] { in.Poll(sc); });
  sc.RunFor(5'000'000, [&] { in.Poll(sc); });
  FERRY_SCENARIO_CHECK(sc);
  if (sc.Status(*sr.notify_task) != TaskStatus::kCompleted)
    return absl::StrCat("notification ended ",
                        std::string(TaskStatusName(sc.Status(*sr.notify_task))));
  if (in.got.size() != 1) return absl::StrCat(in.got.size(), " deliveries");
  if (sc.w().host(1).engine->notify_duplicates() == 0) return "no resend reached h1";
  // Order at h1: delivered, then the resend refused.
  const int64_t d = H1At(sc, "notify_delivered");
  if (d < 0 || H1At(sc, "notify_duplicate", static_cast<size_t>(d)) < 0)
    return "order at h1: notify_delivered then notify_duplicate not found";
  return sc.Finish();
}

// N4: each receive WR holds one CQE of its CQ's quota (the oracle checks
// the ground truth after every step); quota returns at the retire.
std::string RecvHoldsQuota(ScenarioSpec spec) {
  const uint32_t per_ep = spec.config.notify_recv_slots * spec.config.qps_per_endpoint;
  Scenario sc(std::move(spec));
  if (!sc.setup().empty()) return sc.setup();
  sc.RunFor(1'000'000);
  FERRY_SCENARIO_CHECK(sc);
  int64_t h1_quota = 0;
  sc.w().host(1).engine->ForEachQuota([&](const QuotaView& q) { h1_quota += q.reserved; });
  if (h1_quota != per_ep)
    return absl::StrCat("h1 holds ", h1_quota, " CQEs of quota, expected ", per_ep);
  return sc.Finish();
}

// N5 under RNR: h1's QPs answer every SEND with RNR NAKs for a while. The
// notification ends COMPLETED (delivered once) or FAILED (not delivered),
// never COMPLETED undelivered.
std::string RnrStorm(ScenarioSpec spec, uint64_t storm_ns, bool expect_completed) {
  Scenario sc(std::move(spec));
  if (!sc.setup().empty()) return sc.setup();
  auto batch = sc.e().AllocateBatch(1);
  if (!batch.ok()) return std::string(batch.status().message());
  SteppedEngine& h1 = *sc.w().host(1).engine;
  const std::string back = sc.w().host(0).addr + "@sim0";
  const Endpoint* ep = h1.FindEndpoint(h1.OwnerOf(0, back), 0, back);
  if (ep == nullptr) return "h1 has no endpoint toward h0";
  for (uint32_t qpn : ep->qpns()) {
    sim::ScriptedFault f;
    f.at_ns = sc.w().clock().NowNs();
    f.kind = sim::FaultKind::kRnrStorm;
    f.target.kind = sim::TargetKind::kQp;
    f.target.host = 1;
    f.target.device = "sim0";
    f.target.number = qpn;
    f.duration_ns = storm_ns;
    if (absl::Status s = sc.w().fabric().Inject(f); !s.ok()) return "inject: " + s.ToString();
  }
  Inbox in;
  const SubmitResult sr = SendAloneAndSettle(sc, *batch, "storm", in);
  if (!sr.status.ok()) return "submit: " + std::string(sr.status.message());
  FERRY_SCENARIO_CHECK(sc);
  const TaskStatus st = sc.Status(*sr.notify_task);
  if (st == TaskStatus::kCompleted && in.got.size() != 1)
    return absl::StrCat("COMPLETED with ", in.got.size(), " deliveries");
  if (st != TaskStatus::kCompleted && !in.got.empty())
    return absl::StrCat(std::string(TaskStatusName(st)), " but delivered");
  if ((st == TaskStatus::kCompleted) != expect_completed)
    return absl::StrCat("notification ended ", std::string(TaskStatusName(st)));
  if (sc.w().fabric().stats().rnr_naks == 0) return "no RNR NAK was sent";
  // Without retries left, the RNR exhaustion is what ended it.
  if (!expect_completed &&
      sc.At(Ev{"cqe_error", static_cast<uint64_t>(hal::WcStatus::kRnrRetryExcErr)}) < 0)
    return "no RNR_RETRY_EXC_ERR completion at h0";
  return sc.Finish();
}

// N5 across a restart: h1's process exits and a new one starts; h0 sends
// on the segment it opened before. The notification's SEND goes to QPs
// that are gone and its rkeys' process is gone: it ends FAILED (or
// TIMEOUT), never COMPLETED, and the new process is delivered nothing.
std::string RestartedReceiver(ScenarioSpec spec, TaskStatus expect) {
  Scenario sc(std::move(spec));
  if (!sc.setup().empty()) return sc.setup();
  if (absl::Status s = sc.w().Restart(1); !s.ok()) return "restart: " + s.ToString();
  auto batch = sc.e().AllocateBatch(1);
  if (!batch.ok()) return std::string(batch.status().message());
  Inbox in;
  const SubmitResult sr = SendAloneAndSettle(sc, *batch, "to the old h1", in);
  if (!sr.status.ok()) return "submit: " + std::string(sr.status.message());
  FERRY_SCENARIO_CHECK(sc);
  const TaskStatus st = sc.Status(*sr.notify_task);
  if (st != expect)
    return absl::StrCat("notification to a restarted peer ended ", std::string(TaskStatusName(st)));
  if (!in.got.empty()) return "the restarted process was delivered a notification";
  // Order: the SEND's post, then the notification's publish.
  if (std::string o =
          sc.InOrder({Ev{"post", std::nullopt}, Scenario::Publish(sc.Label(*sr.notify_task))});
      !o.empty())
    return o;
  return sc.Finish();
}

class Notify : public ::testing::TestWithParam<sim::RnicProfile> {
 protected:
  ScenarioSpec Seeded(uint64_t seed) const { return Spec(GetParam(), seed); }
  ScenarioSpec Mutated(base::Mutation m) const {
    ScenarioSpec s = Seeded(1);
    s.mutations.Enable(m);
    return s;
  }
};

TEST_P(Notify, DeliveredOnceAfterItsData) {
  for (uint64_t s = 1; s <= 3; ++s) ASSERT_EQ(DeliveredAfterData(Seeded(s)), "") << s;
}
TEST_P(Notify, ABatchThatDidNotCompleteSendsNone) {
  for (uint64_t s = 1; s <= 3; ++s) ASSERT_EQ(FailedBatchSendsNone(Seeded(s)), "") << s;
}
// Transport retries that end (rxe retries forever at qp_retries 7).
ScenarioSpec FastRetries(ScenarioSpec s) {
  s.config.qp_timeout_exp = 10;
  s.config.qp_retries = 3;
  return s;
}
TEST_P(Notify, AResendAfterALostAckIsDeliveredOnce) {
  ASSERT_EQ(ResendNotDeliveredTwice(FastRetries(Seeded(1))), "");
}
TEST_P(Notify, ReceiveWrsHoldCqQuota) { ASSERT_EQ(RecvHoldsQuota(Seeded(1)), ""); }
TEST_P(Notify, AShortRnrStormEndsCompleted) { ASSERT_EQ(RnrStorm(Seeded(1), 2'000'000, true), ""); }
// No transport retry left (slice_retries 0): the first RNR exhaustion
// ends it FAILED, never COMPLETED, nothing delivered.
TEST_P(Notify, AnRnrExhaustionEndsFailedNeverCompleted) {
  ScenarioSpec s = Seeded(1);
  s.config.slice_retries = 0;
  ASSERT_EQ(RnrStorm(s, 10'000'000'000, false), "");
}

TEST_P(Notify, ARestartedReceiverGetsNothingAndTheSenderNoCompleted) {
  // Transport retries end within ~32 ms (qp_timeout_exp 10), so the
  // reconnect, the restarted peer's refusal of a REQ naming its old
  // process and the FAILED come before the task's deadline.
  ASSERT_EQ(RestartedReceiver(FastRetries(Seeded(1)), TaskStatus::kFailed), "");
  // The deadline before the transport gives up: TIMEOUT, never COMPLETED.
  ScenarioSpec s = Seeded(1);
  s.config.slice_timeout_ns = 100'000'000;
  ASSERT_EQ(RestartedReceiver(s, TaskStatus::kTimeout), "");
}

// Each contract's mutation fails its scenario with the oracle's message.
TEST_P(Notify, SendingAtSubmitIsCaught) {
  EXPECT_THAT(DeliveredAfterData(Mutated(base::Mutation::kEngineNotifyBeforeData)),
              HasSubstr("notify_before_data: h1 delivered notification seq 1 of h0"));
}
TEST_P(Notify, SendingAfterAFailedBatchIsCaught) {
  EXPECT_THAT(FailedBatchSendsNone(Mutated(base::Mutation::kEngineNotifyOnFailedBatch)),
              HasSubstr("notify_on_failed_batch: h1 delivered notification seq 1 of h0"));
}
TEST_P(Notify, DeliveringAResendIsCaught) {
  EXPECT_THAT(ResendNotDeliveredTwice(FastRetries(Mutated(base::Mutation::kEngineNotifyNoDedup))),
              HasSubstr("notify_delivered_twice: h1 delivered notification seq 1 of h0"));
}
TEST_P(Notify, ReceivesWithoutQuotaAreCaught) {
  EXPECT_THAT(RecvHoldsQuota(Mutated(base::Mutation::kEngineNotifyRecvNoQuota)),
              HasSubstr("present=0 producible=8 reserved=0"));
}

INSTANTIATE_TEST_SUITE_P(Profiles, Notify,
                         ::testing::Values(sim::RnicProfile::kMlx5, sim::RnicProfile::kRxe),
                         [](const auto& info) {
                           return std::string(info.param == sim::RnicProfile::kMlx5 ? "mlx5"
                                                                                    : "rxe");
                         });

}  // namespace
}  // namespace ferry::engine::testing
