// tests/sim/rnic/event_queue_test.cc: the simulated RNIC's event queue
// (sim/rnic/event_queue.h) pops every event once, in (t_ns, seq) order,
// wherever it waited: lane, channel FIFO or alone.
#include "sim/rnic/event_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "sim/prng.h"

namespace ferry::sim {
namespace {

struct Ev {
  uint64_t t_ns = 0;
  uint64_t seq = 0;
  uint32_t chan = 0;
};
using Queue = EventQueue<Ev>;

// Pops everything due up to `until_ns` and checks the order.
void PopUntil(Queue& q, uint64_t until_ns, std::tuple<uint64_t, uint64_t>* last,
              std::vector<uint64_t>* popped) {
  for (int guard = 0; guard < 1'000'000 && !q.empty() && q.top_t_ns() <= until_ns; ++guard) {
    const Ev e = q.PopNext();
    const std::tuple<uint64_t, uint64_t> key{e.t_ns, e.seq};
    ASSERT_LT(*last, key) << "popped out of (t_ns, seq) order at seq " << e.seq;
    *last = key;
    popped->push_back(e.seq);
  }
}

TEST(EventQueue, PopsEveryEventOnceInTimeThenSequenceOrderWhereverItWaits) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    Prng prng(seed);
    Queue q;
    constexpr uint32_t kChans = 6, kLanes = 3;
    std::vector<uint64_t> chan_last_t(kChans, 0);
    uint64_t now = 0, seq = 0, pushed = 0;
    std::tuple<uint64_t, uint64_t> last{0, 0};
    std::vector<uint64_t> popped;
    for (int step = 0; step < 400; ++step) {
      const uint32_t pushes = static_cast<uint32_t>(prng.Below(6));
      for (uint32_t k = 0; k < pushes; ++k) {
        Ev e;
        e.seq = ++seq;
        // Near times (ties on purpose), with now and then a far one.
        e.t_ns = now + (prng.Below(8) == 0 ? 1000 + prng.Below(1000) : prng.Below(4));
        const uint64_t where = prng.Below(kChans + 1);
        if (where == kChans) {
          e.chan = Queue::kNoChannel;
        } else {
          e.chan = static_cast<uint32_t>(where);
          // A channel is FIFO in time (the fabric guarantees it).
          e.t_ns = std::max(e.t_ns, chan_last_t[e.chan]);
          chan_last_t[e.chan] = e.t_ns;
        }
        const uint64_t lane = prng.Below(kLanes + 1);
        q.Push(e, lane == kLanes ? Queue::kNoLane : static_cast<uint32_t>(lane));
        ++pushed;
      }
      now += prng.Below(3);
      PopUntil(q, now, &last, &popped);
      if (HasFatalFailure()) return;
    }
    PopUntil(q, ~uint64_t{0}, &last, &popped);
    if (HasFatalFailure()) return;
    ASSERT_TRUE(q.empty());
    ASSERT_EQ(popped.size(), pushed) << "seed " << seed;
    std::vector<bool> seen(seq + 1, false);
    for (uint64_t s : popped) {
      ASSERT_FALSE(seen[s]) << "seq " << s << " popped twice, seed " << seed;
      seen[s] = true;
    }
  }
}

TEST(EventQueue, SortedLaneHoldsOneHeapEntry) {
  Queue q;
  for (uint64_t i = 1; i <= 100; ++i) q.Push(Ev{i, i, static_cast<uint32_t>(i % 7)}, 0);
  EXPECT_EQ(q.size(), 1u);  // every event in lane 0: only its head in the heap
  // One earlier than the lane's last: it waits in its channel instead.
  q.Push(Ev{50, 101, 7}, 0);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.PopNext().seq, 1u);
  uint64_t prev_t = 0;
  for (int i = 0; i < 100; ++i) {
    const Ev e = q.PopNext();
    EXPECT_LE(prev_t, e.t_ns);
    prev_t = e.t_ns;
    if (e.t_ns == 50) {
      // Ties on time go by sequence: the lane's seq 50 before channel 7's 101.
      EXPECT_EQ(e.seq, 50u);
      EXPECT_EQ(q.PopNext().seq, 101u);
      ++i;
    }
  }
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace ferry::sim
