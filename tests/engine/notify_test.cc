// tests/engine/notify_test.cc: the notification parts of engine/notify.h on
// their own (suite 'unit'): the slot pools, the sender's window of 64 per
// receiver, the Submit gate (dispatch once after every COMPLETED, never
// after another status; N2), the receiver's inbox (N3), and the config
// rules notifications add (N4, the RNR bound).
#include "engine/notify.h"

#include <memory>
#include <string>
#include <vector>

#include "engine/worker.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::engine {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<Task> PendingTask(uint64_t bytes = 100) {
  TaskGeometry g;
  g.length_bytes = bytes;
  g.slice_size_bytes = kNotifySlotBytes;
  g.submit_ns = 0;
  g.deadline_ns = 1'000'000;
  return std::make_shared<Task>(g, nullptr);
}

// Publishes a one-slice task COMPLETED (posted, then its success CQE).
void Complete(Task& t) {
  ASSERT_TRUE(t.BeginPost(0));
  t.PostAccepted(0);
  t.Resolve(0, SliceOutcome::kSuccess);
  ASSERT_EQ(t.status(), TaskStatus::kCompleted);
}
void CancelQueued(Task& t) {
  ASSERT_TRUE(t.TryLatch(TaskStatus::kCanceled));
  t.WithdrawQueued(nullptr);
  ASSERT_EQ(t.status(), TaskStatus::kCanceled);
}

TEST(NotifySlots, PoolsAreSeparateAndEachSlotReturnsOnce) {
  NotifySlots s(2, 3);
  EXPECT_EQ(s.free(NotifySlots::Pool::kSend), 2u);
  EXPECT_EQ(s.free(NotifySlots::Pool::kRecv), 3u);
  auto a = s.Take(NotifySlots::Pool::kSend), b = s.Take(NotifySlots::Pool::kSend);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(s.Take(NotifySlots::Pool::kSend).has_value());  // send pool empty
  EXPECT_TRUE(s.Take(NotifySlots::Pool::kRecv).has_value());   // receive pool untouched
  EXPECT_NE(s.Addr(*a), s.Addr(*b));
  EXPECT_EQ(s.Addr(*b) - s.Addr(*a) + 0, kNotifySlotBytes * (*b - *a));
  s.Give(*a);
  EXPECT_EQ(s.Take(NotifySlots::Pool::kSend), a);
  EXPECT_GE(kNotifySlotBytes, kNotifyWireBytesMax);
  EXPECT_EQ(kNotifySlotBytes % 64, 0u);
}

TEST(NotifySeqs, AtMost64NotTerminalPerReceiverThenTheWindowMoves) {
  NotifySeqs seqs;
  std::vector<std::shared_ptr<Task>> held;
  for (uint64_t i = 1; i <= kNotifyWindow; ++i) {
    held.push_back(PendingTask());
    auto s = seqs.Next(7, held.back());
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(*s, i);
  }
  auto refused = seqs.Next(7, PendingTask());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("64 to this peer"));
  // Another receiver has its own sequence space.
  EXPECT_EQ(*seqs.Next(8, PendingTask()), 1u);
  // The first one terminal: seq 65 may go.
  CancelQueued(*held[0]);
  EXPECT_EQ(*seqs.Next(7, PendingTask()), kNotifyWindow + 1);
  EXPECT_EQ(seqs.Next(7, PendingTask()).status().code(), absl::StatusCode::kResourceExhausted);
}

struct GateRig {
  std::vector<std::shared_ptr<Task>> data;
  std::shared_ptr<TaskRoute> note = std::make_shared<TaskRoute>();
  int dispatched = 0;
  std::shared_ptr<NotifyGate> gate;
  explicit GateRig(uint32_t n, const base::Mutations* m = nullptr) {
    note->HoldTask(PendingTask());
    note->send = true;
    gate = std::make_shared<NotifyGate>(
        n, note, [this](const std::shared_ptr<TaskRoute>&) { ++dispatched; }, m);
    for (uint32_t i = 0; i < n; ++i) {
      data.push_back(PendingTask());
      data.back()->set_publish_hook(gate);
    }
  }
};

TEST(NotifyGate, DispatchesOnceAfterTheLastCompleted) {
  GateRig r(3);
  Complete(*r.data[0]);
  Complete(*r.data[2]);
  EXPECT_EQ(r.dispatched, 0);
  Complete(*r.data[1]);
  EXPECT_EQ(r.dispatched, 1);
  EXPECT_EQ(r.note->task->status(), TaskStatus::kPending);  // its owner posts it
}

TEST(NotifyGate, AnyOtherStatusWithdrawsTheNotificationFailedUnsent) {
  GateRig r(3);
  Complete(*r.data[0]);
  CancelQueued(*r.data[1]);
  EXPECT_EQ(r.note->task->status(), TaskStatus::kFailed);
  Complete(*r.data[2]);  // the rest completing changes nothing
  EXPECT_EQ(r.dispatched, 0);
}

#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
TEST(NotifyGate, TheN2MutationSendsAfterAFailedTask) {
  base::Mutations m;
  m.Enable(base::Mutation::kEngineNotifyOnFailedBatch);
  GateRig r(2, &m);
  CancelQueued(*r.data[0]);
  Complete(*r.data[1]);
  EXPECT_EQ(r.dispatched, 1);
  EXPECT_EQ(r.note->task->status(), TaskStatus::kPending);
}
#endif

TEST(SendSlotRelease, TheSlotReturnsWhenTheTaskPublishes) {
  NotifySlots s(1, 0);
  auto slot = s.Take(NotifySlots::Pool::kSend);
  ASSERT_TRUE(slot.has_value());
  auto t = PendingTask();
  t->set_publish_hook(std::make_shared<SendSlotRelease>(&s, *slot));
  EXPECT_EQ(s.free(NotifySlots::Pool::kSend), 0u);
  Complete(*t);
  EXPECT_EQ(s.free(NotifySlots::Pool::kSend), 1u);
}

Notification N(uint64_t inc, uint64_t seq) {
  Notification n;
  n.from = "h0:1000";
  n.incarnation = inc;
  n.seq = seq;
  n.message = std::to_string(seq);
  return n;
}

TEST(NotifyInbox, DeliversEachSenderSeqOnceInArrivalOrder) {
  NotifyInbox in(nullptr);
  EXPECT_EQ(in.Deliver(N(5, 2)), NotifyInbox::Verdict::kDelivered);
  EXPECT_EQ(in.Deliver(N(5, 1)), NotifyInbox::Verdict::kDelivered);
  EXPECT_EQ(in.Deliver(N(5, 2)), NotifyInbox::Verdict::kDuplicate);
  EXPECT_EQ(in.Deliver(N(6, 2)), NotifyInbox::Verdict::kDelivered);  // another sender process
  Notification other = N(5, 2);
  other.from = "h9:1000";  // another sender naming the same incarnation: its own space
  EXPECT_EQ(in.Deliver(other), NotifyInbox::Verdict::kDelivered);
  EXPECT_EQ(in.Deliver(N(5, 200)), NotifyInbox::Verdict::kDelivered);
  EXPECT_EQ(in.Deliver(N(5, 3)), NotifyInbox::Verdict::kTooOld);  // out of the 64 window
  const std::vector<Notification> got = in.Poll(10);
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0].seq, 2u);
  EXPECT_EQ(got[1].seq, 1u);
  EXPECT_EQ(got[2].incarnation, 6u);
  EXPECT_EQ(got[3].from, "h9:1000");
  EXPECT_EQ(in.queued(), 0u);
  EXPECT_EQ(in.stats().delivered, 5u);
  EXPECT_EQ(in.stats().duplicates, 1u);
  EXPECT_EQ(in.stats().too_old, 1u);
}

#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
TEST(NotifyInbox, TheN3MutationDeliversADuplicate) {
  base::Mutations m;
  m.Enable(base::Mutation::kEngineNotifyNoDedup);
  NotifyInbox in(&m);
  EXPECT_EQ(in.Deliver(N(5, 2)), NotifyInbox::Verdict::kDelivered);
  EXPECT_EQ(in.Deliver(N(5, 2)), NotifyInbox::Verdict::kDelivered);
}
#endif

TEST(NotifyInbox, AFullQueueDropsAndCounts) {
  NotifyInbox in(nullptr);
  for (uint64_t i = 1; i <= NotifyInbox::kQueueMax; ++i)
    ASSERT_EQ(in.Deliver(N(1 + i / 60, i)), NotifyInbox::Verdict::kDelivered);
  EXPECT_EQ(in.Deliver(N(999999, 1)), NotifyInbox::Verdict::kQueueFull);
  EXPECT_EQ(in.stats().queue_full, 1u);
  EXPECT_EQ(in.Poll(1).size(), 1u);
  EXPECT_EQ(in.Deliver(N(999998, 1)), NotifyInbox::Verdict::kDelivered);
}

TEST(NotifyConfig, TheRulesNotificationsAdd) {
  EngineConfig c;
  c.notify_recv_slots = 4;
  // (64 + 4) x 2 QPs x 32 endpoints per CQ = 4352 > 4096.
  EXPECT_THAT(c.Validate().ToString(),
              HasSubstr("(wr_depth (64) + notify_recv_slots (4)) x qps_per_endpoint (2)"));
  c.cqe_limit = 8192;
  EXPECT_THAT(c.Validate().ToString(), HasSubstr("needs qp_rnr_retries < 7"));
  c.qp_rnr_retries = 6;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.notify_recv_slots = kNotifyRecvSlotsMax + 1;
  EXPECT_THAT(c.Validate().ToString(), HasSubstr("notify_recv_slots = 65: at most 64"));
  c.notify_recv_slots = 0;
  c.qp_rnr_retries = 7;
  c.cqe_limit = 4096;
  EXPECT_TRUE(c.Validate().ok());  // off: the defaults as before
}

}  // namespace
}  // namespace ferry::engine
