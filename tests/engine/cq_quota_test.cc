// Tests of engine/cq_quota (C4): reserve before post, release on CQE,
// release of a destroyed QP only after an empty poll that started after
// destroy returned, failed destroys keep their quota, zombie cap, nothing
// released twice; and the C4 mutation caught by the ledger's own checks.
#include "engine/cq_quota.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/mutation.h"

namespace ferry::engine {
namespace {

constexpr hal::QpHandle kA{11};
constexpr hal::QpHandle kB{12};

// A switch set with `m` on (when compiled in).
base::Mutations With(base::Mutation m) {
  base::Mutations set;
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  set.Enable(m);
#else
  (void)m;
#endif
  return set;
}

CqQuota MakeLedger(uint32_t capacity = 8, uint32_t zombie_max = 4,
                   const base::Mutations* m = nullptr) {
  return CqQuota(capacity, zombie_max, m, /*check_every_op=*/true);
}

// An empty poll of the CQ, bracketed as the owner does it.
std::vector<hal::QpHandle> EmptyPoll(CqQuota& q) {
  const uint64_t ticket = q.PollStarted();
  auto released = q.PollFinished(ticket, 0);
  EXPECT_TRUE(released.ok());
  return *released;
}

TEST(CqQuota, NeverAdmitsAPostPastTheCqSize) {
  CqQuota q = MakeLedger(8);
  ASSERT_TRUE(q.AddQp(kA).ok());
  ASSERT_TRUE(q.AddQp(kB).ok());
  ASSERT_TRUE(q.Reserve(kA, 5).ok());
  EXPECT_EQ(q.Reserve(kB, 4).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(q.reserved(), 5);  // the refused reservation changed nothing
  EXPECT_EQ(q.held(kB), 0);
  ASSERT_TRUE(q.Reserve(kB, 3).ok());
  EXPECT_EQ(q.free(), 0);
  EXPECT_EQ(q.Reserve(kA, 1).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(q.CheckInvariants().ok());
}

TEST(CqQuota, BadCallsChangeNothing) {
  CqQuota q = MakeLedger();
  EXPECT_EQ(q.AddQp(hal::QpHandle{}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(q.Reserve(kA, 1).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(q.AddQp(kA).ok());
  EXPECT_EQ(q.AddQp(kA).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(q.Reserve(kA, 2).ok());
  EXPECT_EQ(q.Unreserve(kA, 3).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q.held(kA), 2);
  EXPECT_EQ(q.PollFinished(999, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(q.Reserve(kA, 0).ok());
  EXPECT_EQ(q.reserved(), 2);
}

TEST(CqQuota, CqeAndRejectedPostReturnQuota) {
  CqQuota q = MakeLedger();
  ASSERT_TRUE(q.AddQp(kA).ok());
  ASSERT_TRUE(q.Reserve(kA, 4).ok());
  ASSERT_TRUE(q.Unreserve(kA, 1).ok());  // post_send rejected the last WR
  ASSERT_TRUE(q.ReleaseOnCqe(kA).ok());
  ASSERT_TRUE(q.ReleaseOnCqe(kA).ok());
  ASSERT_TRUE(q.ReleaseOnCqe(kA).ok());
  EXPECT_EQ(q.reserved(), 0);
  // A CQE beyond what was reserved is stray: counted, never negative.
  EXPECT_EQ(q.ReleaseOnCqe(kA).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q.stray_cqes(), 1u);
  EXPECT_EQ(q.reserved(), 0);
}

TEST(CqQuota, ABatchOfCqesReturnsTheirQuotaAtOnceOrNothing) {
  CqQuota q = MakeLedger(8, 8);
  ASSERT_TRUE(q.AddQp(kA).ok());
  ASSERT_TRUE(q.AddQp(kB).ok());
  ASSERT_TRUE(q.Reserve(kA, 5).ok());
  ASSERT_TRUE(q.Reserve(kB, 2).ok());
  CqQuota::QpHint hint;
  ASSERT_TRUE(q.ReleaseOnCqes(kA, 3, &hint).ok());
  EXPECT_EQ(q.reserved(), 4);
  // More than the QP holds: refused whole, one stray, nothing returned.
  EXPECT_EQ(q.ReleaseOnCqes(kA, 3, &hint).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q.stray_cqes(), 1u);
  EXPECT_EQ(q.reserved(), 4);
  // A retiring QP's batch is zombie quota returned.
  ASSERT_TRUE(q.MarkRetiring(kB).ok());
  EXPECT_EQ(q.zombie_held(), 2);
  ASSERT_TRUE(q.ReleaseOnCqes(kB, 2).ok());
  EXPECT_EQ(q.zombie_held(), 0);
  EXPECT_EQ(q.reserved(), 2);
  EXPECT_EQ(q.ReleaseOnCqes(hal::QpHandle{99}, 1).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(q.CheckInvariants().ok());
}

TEST(CqQuota, AHintFollowsItsQpAcrossAddsAndForgets) {
  CqQuota q = MakeLedger(8);
  ASSERT_TRUE(q.AddQp(kA).ok());
  CqQuota::QpHint hint_a, hint_b;
  ASSERT_TRUE(q.Reserve(kA, 2, &hint_a).ok());
  ASSERT_TRUE(q.AddQp(kB).ok());  // entries may move: the hint is refreshed
  ASSERT_TRUE(q.Reserve(kB, 1, &hint_b).ok());
  ASSERT_TRUE(q.ReleaseOnCqe(kA, &hint_a).ok());
  ASSERT_TRUE(q.ReleaseOnCqe(kB, &hint_b).ok());
  EXPECT_EQ(q.held(kA), 1);
  EXPECT_EQ(q.held(kB), 0);
  // A hint filled for one QP is not taken for another.
  EXPECT_EQ(q.ReleaseOnCqe(kB, &hint_a).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q.held(kA), 1);
  // Nor by another ledger.
  CqQuota other = MakeLedger(8);
  EXPECT_EQ(other.Reserve(kA, 1, &hint_a).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(q.CheckInvariants().ok());
}

TEST(CqQuota, RetiringQpCannotReserveAndCountsAsZombie) {
  CqQuota q = MakeLedger(8, 2);
  ASSERT_TRUE(q.AddQp(kA).ok());
  ASSERT_TRUE(q.Reserve(kA, 3).ok());
  ASSERT_TRUE(q.MarkRetiring(kA).ok());
  ASSERT_TRUE(q.MarkRetiring(kA).ok());  // idempotent
  EXPECT_EQ(q.zombie_held(), 3);
  EXPECT_TRUE(q.ZombieOverCap());
  EXPECT_EQ(q.Reserve(kA, 1).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(q.ReleaseOnCqe(kA).ok());  // a flush CQE
  EXPECT_EQ(q.zombie_held(), 2);
  EXPECT_FALSE(q.ZombieOverCap());
}

TEST(CqQuota, DestroyedQpReleasesOnlyAfterAnEmptyPollStartedAfterDestroy) {
  CqQuota q = MakeLedger();
  ASSERT_TRUE(q.AddQp(kA).ok());
  ASSERT_TRUE(q.AddQp(kB).ok());
  ASSERT_TRUE(q.Reserve(kA, 3).ok());
  ASSERT_TRUE(q.Reserve(kB, 1).ok());
  ASSERT_TRUE(q.MarkRetiring(kA).ok());

  const uint64_t early_ticket = q.PollStarted();  // a poll that began before destroy
  ASSERT_TRUE(q.OnDestroyResult(kA, /*destroyed=*/true).ok());
  auto early = q.PollFinished(early_ticket, 0);
  ASSERT_TRUE(early.ok());
  EXPECT_TRUE(early->empty());
  EXPECT_EQ(q.held(kA), 3);

  // rxe left a CQE of the destroyed QP behind: a non-empty poll releases
  // that one CQE but is not evidence for the rest.
  const uint64_t t = q.PollStarted();
  ASSERT_TRUE(q.ReleaseOnCqe(kA).ok());
  auto nonempty = q.PollFinished(t, 1);
  ASSERT_TRUE(nonempty.ok());
  EXPECT_TRUE(nonempty->empty());
  EXPECT_EQ(q.held(kA), 2);

  const std::vector<hal::QpHandle> released = EmptyPoll(q);
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0], kA);
  EXPECT_FALSE(q.tracked(kA));
  EXPECT_EQ(q.reserved(), 1);  // B's untouched
  EXPECT_EQ(q.zombie_held(), 0);

  // Repeated polls, late CQEs and repeated destroy reports change nothing.
  EXPECT_TRUE(EmptyPoll(q).empty());
  EXPECT_EQ(q.ReleaseOnCqe(kA).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(q.OnDestroyResult(kA, true).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(q.reserved(), 1);
}

TEST(CqQuota, FailedDestroyKeepsQuotaUntilADestroySucceeds) {
  CqQuota q = MakeLedger();
  ASSERT_TRUE(q.AddQp(kA).ok());
  ASSERT_TRUE(q.Reserve(kA, 2).ok());
  ASSERT_TRUE(q.OnDestroyResult(kA, /*destroyed=*/false).ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(EmptyPoll(q).empty());
  EXPECT_EQ(q.held(kA), 2);
  EXPECT_EQ(q.zombie_held(), 2);
  ASSERT_TRUE(q.OnDestroyResult(kA, /*destroyed=*/true).ok());
  EXPECT_EQ(q.OnDestroyResult(kA, true).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(EmptyPoll(q).size(), 1u);
  EXPECT_EQ(q.reserved(), 0);
  EXPECT_EQ(q.tracked_qps(), 0u);
}

TEST(CqQuota, ResetAfterCqRecreateNeedsEveryQpDestroyed) {
  CqQuota q = MakeLedger(8, 4);
  ASSERT_TRUE(q.AddQp(kA).ok());
  ASSERT_TRUE(q.AddQp(kB).ok());
  ASSERT_TRUE(q.Reserve(kA, 2).ok());
  ASSERT_TRUE(q.Reserve(kB, 3).ok());
  ASSERT_TRUE(q.OnDestroyResult(kA, true).ok());
  ASSERT_TRUE(q.OnDestroyResult(kB, false).ok());  // B may still produce CQEs
  auto refused = q.ResetForRecreatedCq(16);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q.reserved(), 5);  // nothing changed
  EXPECT_EQ(q.capacity(), 8u);
  ASSERT_TRUE(q.OnDestroyResult(kB, true).ok());
  EXPECT_EQ(q.ResetForRecreatedCq(2).status().code(), absl::StatusCode::kInvalidArgument);
  auto released = q.ResetForRecreatedCq(16);
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(*released, (std::vector<hal::QpHandle>{kA, kB}));
  EXPECT_EQ(q.reserved(), 0);
  EXPECT_EQ(q.capacity(), 16u);
  EXPECT_EQ(q.tracked_qps(), 0u);
}

TEST(CqQuota, RandomOperationSequencesKeepTheInvariants) {
  // A deterministic LCG drives many interleavings; the ledger checks itself
  // after every op (check_every_op) and against a simple model here.
  uint64_t x = 12345;
  auto next = [&x](uint64_t n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return (x >> 33) % n;
  };
  CqQuota q = MakeLedger(32, 16);
  std::vector<hal::QpHandle> qps;
  uint64_t next_id = 1;
  for (int step = 0; step < 5000; ++step) {
    if (qps.empty() || next(8) == 0) {
      const hal::QpHandle qp{next_id++};
      ASSERT_TRUE(q.AddQp(qp).ok());
      qps.push_back(qp);
      continue;
    }
    const hal::QpHandle qp = qps[next(qps.size())];
    switch (next(6)) {
      case 0:
        (void)q.Reserve(qp, static_cast<uint32_t>(next(4)));
        break;
      case 1:
        (void)q.ReleaseOnCqe(qp);
        break;
      case 2:
        (void)q.MarkRetiring(qp);
        break;
      case 3:
        (void)q.OnDestroyResult(qp, next(3) != 0);
        break;
      case 4:
        (void)EmptyPoll(q);
        break;
      default:
        (void)q.Unreserve(qp, static_cast<uint32_t>(next(2)));
        break;
    }
    ASSERT_GE(q.reserved(), 0);
    ASSERT_LE(q.reserved(), 32);
  }
  EXPECT_TRUE(q.CheckInvariants().ok());
}

TEST(CqQuotaMutation, DoubleReleaseIsCaughtByTheLedgerChecks) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP() << "mutations not compiled in";
  const base::Mutations m = With(base::Mutation::kEngineC4DoubleRelease);
  // Without per-op checks, so the test can observe the broken state.
  CqQuota q(8, 8, &m, /*check_every_op=*/false);
  ASSERT_TRUE(q.AddQp(kA).ok());
  ASSERT_TRUE(q.AddQp(kB).ok());
  ASSERT_TRUE(q.Reserve(kA, 3).ok());
  ASSERT_TRUE(q.Reserve(kB, 2).ok());
  ASSERT_TRUE(q.OnDestroyResult(kA, true).ok());
  EmptyPoll(q);  // returns A's 3
  EmptyPoll(q);  // the mutation returns them again
  EXPECT_EQ(q.reserved(), -1);
  const absl::Status s = q.CheckInvariants();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("reserved -1 < 0"), std::string::npos) << s;
}

TEST(CqQuotaMutationDeath, PerOpChecksAbortOnTheDoubleRelease) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP() << "mutations not compiled in";
  EXPECT_DEATH(
      {
        const base::Mutations m = With(base::Mutation::kEngineC4DoubleRelease);
        CqQuota q(8, 8, &m, /*check_every_op=*/true);
        (void)q.AddQp(kA);
        (void)q.AddQp(kB);
        (void)q.Reserve(kA, 1);
        (void)q.Reserve(kB, 2);
        (void)q.OnDestroyResult(kA, true);
        EmptyPoll(q);
      },
      "returned twice or lost");
}

TEST(CqQuotaMutation, WithoutTheMutationTheSameSequenceIsClean) {
  CqQuota q = MakeLedger();
  ASSERT_TRUE(q.AddQp(kA).ok());
  ASSERT_TRUE(q.AddQp(kB).ok());
  ASSERT_TRUE(q.Reserve(kA, 3).ok());
  ASSERT_TRUE(q.Reserve(kB, 2).ok());
  ASSERT_TRUE(q.OnDestroyResult(kA, true).ok());
  EmptyPoll(q);
  EmptyPoll(q);
  EXPECT_EQ(q.reserved(), 2);
  EXPECT_TRUE(q.CheckInvariants().ok());
}

}  // namespace
}  // namespace ferry::engine
