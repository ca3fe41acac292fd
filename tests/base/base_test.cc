// Tests of base/: status macros evaluate once and propagate errors; checks abort.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <memory>

#include "base/check.h"
#include "base/fnv1a.h"
#include "base/ring_queue.h"
#include "base/status_macros.h"

namespace ferry::base {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x, int* evaluations) {
  ++*evaluations;
  FERRY_ASSIGN_OR_RETURN(int h, Half(x));
  FERRY_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status Validate(int x) {
  FERRY_RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPropagatesTheFirstError) {
  int evaluations = 0;
  EXPECT_EQ(*Quarter(8, &evaluations), 2);
  absl::StatusOr<int> bad = Quarter(6, &evaluations);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(evaluations, 2);
}

TEST(StatusMacros, ReturnIfError) {
  EXPECT_TRUE(Validate(4).ok());
  EXPECT_EQ(Validate(3).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Fnv1a, KnownVectorsAndIncrementalAgree) {
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
  const std::string_view s = "foobar";
  EXPECT_EQ(
      Fnv1a64Update(kFnv1a64Offset, reinterpret_cast<const unsigned char*>(s.data()), s.size()),
      Fnv1a64(s));
}

TEST(RingQueue, FifoAcrossWrapAndGrowth) {
  RingQueue<std::unique_ptr<int>> q;
  int next_in = 0, next_out = 0;
  // Pushes and pops interleaved so the head wraps, then a burst that grows
  // the ring while it is wrapped: the order never changes.
  for (int round = 0; round < 50; ++round) {
    const int push = round % 7 == 0 ? 20 : 3;
    for (int i = 0; i < push; ++i) q.push_back(std::make_unique<int>(next_in++));
    const int pop = std::min<int>(static_cast<int>(q.size()), round % 7 == 0 ? 2 : 4);
    for (int i = 0; i < pop; ++i) {
      ASSERT_EQ(*q.front(), next_out++);
      q.pop_front();
    }
  }
  EXPECT_EQ(q.size(), static_cast<size_t>(next_in - next_out));
  while (!q.empty()) {
    ASSERT_EQ(*q.front(), next_out++);
    q.pop_front();
  }
  EXPECT_EQ(next_out, next_in);
  EXPECT_EQ(q.capacity() & (q.capacity() - 1), 0u);  // a power of two
}

TEST(RingQueue, SteadyFillAndDrainKeepsItsCapacity) {
  RingQueue<int> q;
  for (int i = 0; i < 5; ++i) q.push_back(i);
  const size_t cap = q.capacity();
  for (int round = 0; round < 1000; ++round) {
    q.pop_front();
    q.push_back(round);
  }
  EXPECT_EQ(q.capacity(), cap);
  EXPECT_EQ(q.size(), 5u);
}

TEST(RingQueue, PushFrontAndIndexMatchADeque) {
  // A fixed pattern of push_back / push_front / pop_front against
  // std::deque as the model, across wraps and growth in both directions.
  RingQueue<int> q;
  std::deque<int> model;
  int next = 0;
  for (int round = 0; round < 400; ++round) {
    switch ((round * 7 + round / 13) % 5) {
      case 0:
      case 1:
        q.push_back(next);
        model.push_back(next++);
        break;
      case 2:
        q.push_front(next);
        model.push_front(next++);
        break;
      default:
        if (!model.empty()) {
          ASSERT_EQ(q.front(), model.front());
          q.pop_front();
          model.pop_front();
        }
    }
    ASSERT_EQ(q.size(), model.size());
    for (size_t i = 0; i < model.size(); ++i) ASSERT_EQ(q[i], model[i]) << "round " << round;
  }
  EXPECT_GT(model.size(), 8u);  // it grew past its first capacity
}

TEST(RingQueueDeathTest, IndexPastTheEndAborts) {
  RingQueue<int> q;
  q.push_back(1);
  EXPECT_DEATH((void)q[1], "i < size_");
}

TEST(CheckDeathTest, FailedCheckAbortsWithOperands) {
  EXPECT_DEATH(FERRY_CHECK_EQ(1 + 1, 3), "1 \\+ 1 == 3 \\(2 vs 3\\)");
  EXPECT_DEATH(FERRY_CHECK(false), "FERRY_CHECK failed");
}

}  // namespace
}  // namespace ferry::base
