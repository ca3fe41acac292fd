// Tests of engine/pending_queue.h: every entry a queue holds is counted in
// its route's owner_refs (what keeps the owner from dropping the route,
// Worker::PruneFinishedTasks), whichever end it entered by, and the order
// is the ring's (a push_front leaves first).
#include "engine/pending_queue.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace ferry::engine {
namespace {

TEST(PendingQueue, CountsEveryEntryPerRoute) {
  TaskRoute a, b;
  PendingQueue q;
  q.push_back(Pending{&a, 0});
  q.push_back(Pending{&b, 0});
  q.push_back(Pending{&a, 1});
  EXPECT_EQ(a.owner_refs, 2u);
  EXPECT_EQ(b.owner_refs, 1u);
  q.pop_front();  // a's slice 0
  EXPECT_EQ(a.owner_refs, 1u);
  q.push_front(Pending{&a, 0});  // returned unposted: leaves first again
  EXPECT_EQ(a.owner_refs, 2u);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q.front().route, &a);
  EXPECT_EQ(q.front().slice, 0u);
  EXPECT_EQ(q[1].route, &b);
  EXPECT_EQ(q[2].slice, 1u);
  while (!q.empty()) q.pop_front();
  EXPECT_EQ(a.owner_refs, 0u);
  EXPECT_EQ(b.owner_refs, 0u);
}

TEST(PendingQueue, CountsSurviveGrowth) {
  // Past the ring's first capacity (8) from both ends: the moves of a
  // growth neither add nor drop a count.
  TaskRoute r;
  PendingQueue q;
  for (uint32_t i = 0; i < 20; ++i) q.push_back(Pending{&r, i});
  for (uint32_t i = 0; i < 20; ++i) q.push_front(Pending{&r, 100 + i});
  EXPECT_EQ(r.owner_refs, 40u);
  std::vector<uint32_t> order;
  while (!q.empty()) {
    order.push_back(q.front().slice);
    q.pop_front();
  }
  ASSERT_EQ(order.size(), 40u);
  EXPECT_EQ(order.front(), 119u);  // the last push_front
  EXPECT_EQ(order[19], 100u);
  EXPECT_EQ(order[20], 0u);
  EXPECT_EQ(order.back(), 19u);
  EXPECT_EQ(r.owner_refs, 0u);
}

TEST(PendingQueueDeathTest, NullRouteIsRefused) {
  EXPECT_DEATH(
      {
        PendingQueue q;
        q.push_back(Pending{nullptr, 0});
      },
      "FERRY_CHECK failed.*r != nullptr");
}

}  // namespace
}  // namespace ferry::engine
