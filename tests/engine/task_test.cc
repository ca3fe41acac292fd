// Tests of engine/slice and engine/task: the attempt state machine, the one
// publish, the terminal status rule, C2's latch/withdraw handshake, WR ids,
// and a multi-threaded CAS race (owner vs cancel vs timeout).
#include "engine/task.h"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "base/mutation.h"
#include "engine/slice.h"
#include "engine/wr_id.h"

namespace ferry::engine {
namespace {

TaskGeometry Geo(uint64_t len, uint64_t slice = 4096) {
  return TaskGeometry{len, slice, /*submit_ns=*/100, /*deadline_ns=*/1100};
}

// Posts and resolves slice i with `outcome` on the owner.
Task::Step PostAndResolve(Task& t, uint32_t i, SliceOutcome outcome) {
  EXPECT_TRUE(t.BeginPost(i));
  t.PostAccepted(i);
  return t.Resolve(i, outcome);
}

TEST(WrId, RoundTripsAndRecognisesStaleIds) {
  const uint64_t raw = EncodeWrId(WrId{42, 7});
  EXPECT_TRUE(WrIdMatches(raw, 42, 7));
  EXPECT_FALSE(WrIdMatches(raw, 42, 8));  // the slot was re-armed: stale CQE
  EXPECT_FALSE(WrIdMatches(raw, 41, 7));  // another slot
  EXPECT_FALSE(WrIdMatches(0, 0, 0));     // never armed
  EXPECT_EQ(DecodeWrId(EncodeWrId(WrId{UINT32_MAX, UINT32_MAX})), (WrId{UINT32_MAX, UINT32_MAX}));
  EXPECT_EQ(NextGeneration(5), 6u);
  EXPECT_EQ(NextGeneration(UINT32_MAX), 1u);
}

TEST(SliceWord, PacksAndUnpacks) {
  const SliceWord w{SliceState::kWithdrawn, SliceOutcome::kTimeout, 65535};
  EXPECT_EQ(SliceWord::Unpack(SliceWord::Pack(w)), w);
  EXPECT_TRUE(w.final());
  EXPECT_FALSE((SliceWord{SliceState::kPosted, SliceOutcome::kNone, 0}).final());
}

TEST(Slice, WithdrawOnlyFromQueued) {
  Slice s;
  ASSERT_TRUE(s.TryBeginPost(0));
  EXPECT_FALSE(s.TryWithdraw(SliceOutcome::kCanceled));  // POSTING belongs to the owner
  s.PostRejected();
  EXPECT_EQ(s.Load().state, SliceState::kQueued);
  EXPECT_FALSE(s.TryBeginPost(1));  // wrong attempt
  ASSERT_TRUE(s.TryBeginPost(0));
  s.PostAccepted();
  EXPECT_FALSE(s.TryWithdraw(SliceOutcome::kTimeout));
  s.Requeue();
  EXPECT_EQ(s.Load(), (SliceWord{SliceState::kQueued, SliceOutcome::kNone, 1}));
  EXPECT_TRUE(s.TryWithdraw(SliceOutcome::kTimeout));
  EXPECT_FALSE(s.TryWithdraw(SliceOutcome::kCanceled));  // final: never again
  EXPECT_EQ(s.Load(), (SliceWord{SliceState::kWithdrawn, SliceOutcome::kTimeout, 1}));
}

TEST(SliceDeath, OwnerTransitionsFromWrongStateAbort) {
  EXPECT_DEATH(
      {
        Slice s;
        s.PostAccepted();  // QUEUED, not POSTING
      },
      "FERRY_CHECK failed");
  EXPECT_DEATH(
      {
        Slice s;
        s.Resolve(SliceOutcome::kSuccess);
      },
      "FERRY_CHECK failed");
}

TEST(Task, GeometryCutsSlices) {
  Task t(Geo(10000, 4096), nullptr);
  ASSERT_EQ(t.slice_count(), 3u);
  EXPECT_EQ(t.SliceOffsetBytes(2), 8192u);
  EXPECT_EQ(t.SliceLengthBytes(0), 4096u);
  EXPECT_EQ(t.SliceLengthBytes(2), 10000u - 8192u);
  EXPECT_FALSE(t.Expired(1099));
  EXPECT_TRUE(t.Expired(1100));
}

TEST(Task, CompletesOnlyWhenEverySliceResolved) {
  Task t(Geo(3 * 4096), nullptr);
  EXPECT_FALSE(PostAndResolve(t, 0, SliceOutcome::kSuccess).published.has_value());
  EXPECT_FALSE(PostAndResolve(t, 1, SliceOutcome::kSuccess).published.has_value());
  EXPECT_EQ(t.status(), TaskStatus::kPending);
  const Task::Step last = PostAndResolve(t, 2, SliceOutcome::kSuccess);
  ASSERT_TRUE(last.published.has_value());
  EXPECT_EQ(*last.published, TaskStatus::kCompleted);
  EXPECT_EQ(t.status(), TaskStatus::kCompleted);
}

TEST(Task, AnyFailedSliceFailsTheTask) {
  Task t(Geo(2 * 4096), nullptr);
  PostAndResolve(t, 0, SliceOutcome::kFailed);
  EXPECT_EQ(t.status(), TaskStatus::kPending);  // evidence for slice 1 still missing
  EXPECT_EQ(PostAndResolve(t, 1, SliceOutcome::kSuccess).published, TaskStatus::kFailed);
}

TEST(Task, RetryKeepsTheTaskPendingAndCountsAttempts) {
  Task t(Geo(4096), nullptr);
  ASSERT_TRUE(t.BeginPost(0));
  t.PostAccepted(0);
  EXPECT_FALSE(t.Requeue(0).moved);  // not latched: stays QUEUED for the retry
  EXPECT_EQ(t.slice(0).Load().attempt, 1);
  EXPECT_EQ(t.status(), TaskStatus::kPending);
  EXPECT_EQ(PostAndResolve(t, 0, SliceOutcome::kSuccess).published, TaskStatus::kCompleted);
}

TEST(Task, CancelWithdrawsQueuedSlicesAndWaitsForPostedOnes) {
  Task t(Geo(3 * 4096), nullptr);
  ASSERT_TRUE(t.BeginPost(0));
  t.PostAccepted(0);  // slice 0 is on the wire
  ASSERT_TRUE(t.TryLatch(TaskStatus::kCanceled));
  std::optional<TaskStatus> published;
  EXPECT_EQ(t.WithdrawQueued(&published), 2u);
  EXPECT_FALSE(published.has_value());  // C1: slice 0 has no evidence yet
  EXPECT_EQ(t.status(), TaskStatus::kPending);
  EXPECT_FALSE(t.BeginPost(1));  // latched: nothing is posted again
  // A late success of the posted slice does not change the latched status.
  const Task::Step last = t.Resolve(0, SliceOutcome::kSuccess);
  EXPECT_EQ(last.published, TaskStatus::kCanceled);
  EXPECT_EQ(t.status(), TaskStatus::kCanceled);
}

TEST(Task, FirstLatchWinsAndTerminalTasksIgnoreLatches) {
  Task t(Geo(4096), nullptr);
  ASSERT_TRUE(t.TryLatch(TaskStatus::kTimeout));
  EXPECT_FALSE(t.TryLatch(TaskStatus::kCanceled));
  EXPECT_EQ(t.latched(), TaskStatus::kTimeout);
  std::optional<TaskStatus> published;
  EXPECT_EQ(t.WithdrawQueued(&published), 1u);
  EXPECT_EQ(published, TaskStatus::kTimeout);

  Task done(Geo(4096), nullptr);
  PostAndResolve(done, 0, SliceOutcome::kSuccess);
  EXPECT_FALSE(done.TryLatch(TaskStatus::kCanceled));
  EXPECT_EQ(done.status(), TaskStatus::kCompleted);
}

TEST(Task, TimeoutBeatsAFailureThatComesLater) {
  Task t(Geo(4096), nullptr);
  ASSERT_TRUE(t.BeginPost(0));
  t.PostAccepted(0);
  ASSERT_TRUE(t.TryLatch(TaskStatus::kTimeout));
  EXPECT_EQ(t.Resolve(0, SliceOutcome::kFailed).published, TaskStatus::kTimeout);
}

TEST(Task, RejectedOrRequeuedSliceOfALatchedTaskIsWithdrawnByTheOwner) {
  Task t(Geo(2 * 4096), nullptr);
  ASSERT_TRUE(t.BeginPost(0));
  ASSERT_TRUE(t.BeginPost(1));
  t.PostAccepted(1);
  ASSERT_TRUE(t.TryLatch(TaskStatus::kCanceled));
  EXPECT_EQ(t.WithdrawQueued(nullptr), 0u);  // both are in the owner's hands
  const Task::Step rejected = t.PostRejected(0);
  EXPECT_TRUE(rejected.moved);
  EXPECT_EQ(t.slice(0).Load().state, SliceState::kWithdrawn);
  const Task::Step requeued = t.Requeue(1);  // flushed: never resubmitted (C2)
  EXPECT_TRUE(requeued.moved);
  EXPECT_EQ(requeued.published, TaskStatus::kCanceled);
}

TEST(Task, UnpostableSliceIsWithdrawnAsFailed) {
  Task t(Geo(4096), nullptr);
  EXPECT_EQ(t.TryWithdrawSlice(0, SliceOutcome::kFailed).published, TaskStatus::kFailed);
}

TEST(Task, InvalidTaskIsPublishedFromTheStart) {
  auto t = Task::MakeInvalid();
  EXPECT_EQ(t->status(), TaskStatus::kInvalid);
  EXPECT_EQ(t->slice_count(), 0u);
  EXPECT_FALSE(t->TryLatch(TaskStatus::kCanceled));
}

TEST(TaskWord, PacksAndComputesTerminalStatus) {
  TaskWord w{7, true, TaskStatus::kPending, TaskStatus::kPending};
  const TaskWord back = TaskWord::Unpack(TaskWord::Pack(w));
  EXPECT_EQ(back.unresolved, 7u);
  EXPECT_TRUE(back.failed);
  EXPECT_EQ(TerminalStatusOf(w), TaskStatus::kFailed);
  w.latch = TaskStatus::kCanceled;
  EXPECT_EQ(TerminalStatusOf(w), TaskStatus::kCanceled);
  w.latch = TaskStatus::kPending;
  w.failed = false;
  EXPECT_EQ(TerminalStatusOf(w), TaskStatus::kCompleted);
}

TEST(TaskMutation, EarlyPublishIsObservable) {
  base::Mutations m;
  if (!base::Mutations::kCompiledIn) GTEST_SKIP() << "mutations not compiled in";
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  m.Enable(base::Mutation::kEngineC1EarlyPublish);
#endif
  Task t(Geo(4096), &m);
  ASSERT_TRUE(t.BeginPost(0));
  t.PostAccepted(0);
  ASSERT_TRUE(t.TryLatch(TaskStatus::kTimeout));
  // The bug C1 forbids: terminal while slice 0 is still POSTED.
  EXPECT_EQ(t.status(), TaskStatus::kTimeout);
  EXPECT_EQ(t.slice(0).Load().state, SliceState::kPosted);
}

// Owner thread posts/resolves/requeues/rejects; two other threads latch
// (cancel, timeout) and withdraw. Every round: exactly one publish, every
// slice final exactly once, status consistent with the latch.
TEST(TaskRace, OwnerVersusCancelAndTimeout) {
  constexpr int kRounds = 500;
  constexpr uint32_t kSlices = 16;
  for (int round = 0; round < kRounds; ++round) {
    Task t(Geo(uint64_t{kSlices} * 4096), nullptr);
    std::atomic<int> publishes{0};
    std::atomic<bool> go{false};
    auto note = [&](const std::optional<TaskStatus>& p) {
      if (p.has_value()) publishes.fetch_add(1);
    };
    std::thread owner([&] {
      while (!go.load()) {
      }
      for (int pass = 0; pass < 64 && t.status() == TaskStatus::kPending; ++pass) {
        for (uint32_t i = 0; i < kSlices; ++i) {
          const SliceWord w = t.slice(i).Load();
          if (w.state != SliceState::kQueued) continue;
          if (!t.BeginPost(i)) {
            if (t.latched().has_value()) {
              note(t.TryWithdrawSlice(i, *t.latched() == TaskStatus::kCanceled
                                             ? SliceOutcome::kCanceled
                                             : SliceOutcome::kTimeout)
                       .published);
            }
            continue;
          }
          switch ((i + static_cast<uint32_t>(round) + w.attempt) % 4) {
            case 0:
              note(t.PostRejected(i).published);
              break;
            case 1:
              t.PostAccepted(i);
              if (w.attempt < 2) {
                note(t.Requeue(i).published);
              } else {
                note(t.Resolve(i, SliceOutcome::kFailed).published);
              }
              break;
            default:
              t.PostAccepted(i);
              note(t.Resolve(i, SliceOutcome::kSuccess).published);
              break;
          }
        }
      }
    });
    auto latcher = [&](TaskStatus why) {
      while (!go.load()) {
      }
      if (t.TryLatch(why)) {
        std::optional<TaskStatus> p;
        t.WithdrawQueued(&p);
        note(p);
      }
    };
    std::thread cancel(latcher, TaskStatus::kCanceled);
    std::thread timeout(latcher, TaskStatus::kTimeout);
    go.store(true);
    owner.join();
    cancel.join();
    timeout.join();

    const TaskWord w = t.LoadWord();
    ASSERT_EQ(publishes.load(), 1) << "round " << round;
    ASSERT_EQ(w.unresolved, 0u) << "round " << round;
    for (uint32_t i = 0; i < kSlices; ++i) ASSERT_TRUE(t.slice(i).Load().final());
    if (w.latch != TaskStatus::kPending) {
      ASSERT_EQ(t.status(), w.latch) << "round " << round;
    } else {
      ASSERT_EQ(t.status(), w.failed ? TaskStatus::kFailed : TaskStatus::kCompleted);
    }
  }
}

}  // namespace
}  // namespace ferry::engine
