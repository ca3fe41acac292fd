// Tests of sim::VirtualClock: timers fire in (deadline, creation) order,
// never early; cancel works before firing only; timers added while firing
// run in the same FireDue when due; time never moves backwards.
#include "sim/virtual_clock.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry::sim {
namespace {

TEST(VirtualClock, TimersFireInDeadlineThenCreationOrderAndNeverEarly) {
  VirtualClock clock(100);
  std::vector<std::string> fired;
  clock.AddTimer(300, [&] { fired.push_back("c300"); });
  clock.AddTimer(200, [&] { fired.push_back("a200"); });
  clock.AddTimer(200, [&] { fired.push_back("b200"); });
  clock.AddTimer(50, [&] { fired.push_back("past"); });
  EXPECT_EQ(clock.NextDeadlineNs(), 50U);
  EXPECT_EQ(clock.FireDue(), 1U);
  EXPECT_EQ(fired, (std::vector<std::string>{"past"}));
  clock.Advance(99);  // now 199
  EXPECT_EQ(clock.FireDue(), 0U);
  clock.Advance(1);  // now 200
  EXPECT_EQ(clock.FireDue(), 2U);
  EXPECT_EQ(fired, (std::vector<std::string>{"past", "a200", "b200"}));
  EXPECT_EQ(clock.NextDeadlineNs(), 300U);
  clock.AdvanceTo(1000);
  EXPECT_EQ(clock.FireDue(), 1U);
  EXPECT_EQ(fired.back(), "c300");
  EXPECT_EQ(clock.NextDeadlineNs(), std::nullopt);
  EXPECT_EQ(clock.pending_timers(), 0U);
}

TEST(VirtualClock, CancelBeforeFiringOnly) {
  VirtualClock clock;
  int fired = 0;
  const VirtualClock::TimerId a = clock.AddTimer(10, [&] { ++fired; });
  const VirtualClock::TimerId b = clock.AddTimer(20, [&] { ++fired; });
  EXPECT_NE(a, b);
  EXPECT_TRUE(clock.CancelTimer(a));
  EXPECT_FALSE(clock.CancelTimer(a));
  EXPECT_FALSE(clock.CancelTimer(12345));
  EXPECT_EQ(clock.NextDeadlineNs(), 20U);
  clock.AdvanceTo(30);
  EXPECT_EQ(clock.FireDue(), 1U);
  EXPECT_EQ(fired, 1);
  EXPECT_FALSE(clock.CancelTimer(b));  // already fired
}

TEST(VirtualClock, TimersAddedWhileFiringRunWhenDue) {
  VirtualClock clock(50);
  std::vector<int> order;
  VirtualClock::TimerId later = 0;
  clock.AddTimer(10, [&] {
    order.push_back(1);
    clock.AddTimer(40, [&] { order.push_back(2); });  // due: same FireDue
    later = clock.AddTimer(60, [&] { order.push_back(3); });
  });
  clock.AddTimer(30, [&] {
    order.push_back(4);
    EXPECT_TRUE(clock.CancelTimer(later));  // a timer may cancel another
  });
  EXPECT_EQ(clock.FireDue(), 3U);
  EXPECT_EQ(order, (std::vector<int>{1, 4, 2}));
  clock.AdvanceTo(100);
  EXPECT_EQ(clock.FireDue(), 0U);
}

TEST(VirtualClock, TimeNeverMovesBackwards) {
  VirtualClock clock(500);
  clock.AdvanceTo(100);
  EXPECT_EQ(clock.NowNs(), 500U);
  clock.Advance(0);
  EXPECT_EQ(clock.NowNs(), 500U);
  clock.AdvanceTo(501);
  EXPECT_EQ(clock.NowNs(), 501U);
  hal::Clock* port = &clock;
  EXPECT_EQ(port->NowNs(), 501U);
}

}  // namespace
}  // namespace ferry::sim
