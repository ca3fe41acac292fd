// Tests of engine/pending_queue.h: every entry a queue holds is counted in
// its route's owner_refs (what keeps the owner from dropping the route,
// Worker::PruneFinishedTasks), whichever end it entered by, and the order
// is the ring's (a push_front leaves first).
#include "engine/pending_queue.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
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
  std::vector<std::pair<TaskRoute*, uint32_t>> order;
  while (!q.empty()) {
    order.emplace_back(q.front().route, q.front().slice);
    q.pop_front();
  }
  EXPECT_EQ(order, (std::vector<std::pair<TaskRoute*, uint32_t>>{{&a, 0}, {&b, 0}, {&a, 1}}));
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

TEST(PendingQueue, RunsKeepTheOrderOfSingleEntries) {
  // A task's slices as one run, a slice returned to the front of its run,
  // a slice of another route between, and a back push that continues a run.
  TaskRoute a, b;
  PendingQueue q;
  q.PushAll(&a, 4);
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(a.owner_refs, 4u);
  q.pop_front();                 // a0
  q.pop_front();                 // a1
  q.push_front(Pending{&a, 1});  // joins the run: a1 a2 a3
  q.push_front(Pending{&b, 7});  // a run of its own: b7 a1 a2 a3
  q.push_back(Pending{&a, 5});   // not next to a3: a run of its own
  q.push_back(Pending{&a, 6});   // continues a5
  q.push_back(Pending{&b, 0});
  EXPECT_EQ(q.size(), 7u);
  EXPECT_EQ(a.owner_refs, 5u);
  EXPECT_EQ(b.owner_refs, 2u);
  std::vector<std::pair<TaskRoute*, uint32_t>> order;
  while (!q.empty()) {
    order.emplace_back(q.front().route, q.front().slice);
    q.pop_front();
  }
  EXPECT_EQ(order, (std::vector<std::pair<TaskRoute*, uint32_t>>{
                       {&b, 7}, {&a, 1}, {&a, 2}, {&a, 3}, {&a, 5}, {&a, 6}, {&b, 0}}));
  EXPECT_EQ(a.owner_refs, 0u);
  EXPECT_EQ(b.owner_refs, 0u);
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
