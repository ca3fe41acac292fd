// tests/sim/net/sim_network_test.cc: the simulated control network
// (sim/net/sim_network.h): delivery in virtual time, rated and scripted
// faults, partition/heal, pause/resume, restart, bounds, determinism.
//
// What must stay true: every test drives virtual time explicitly (no wall
// clock), and every rate assertion uses integer bounds wide enough to hold
// for any seed yet narrow enough to catch a wrong rate (about 6 sigma).
#include "sim/net/sim_network.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/prng.h"
#include "sim/scheduler.h"
#include "sim/trace.h"
#include "sim/virtual_clock.h"

namespace ferry::sim {
namespace {

using ::testing::HasSubstr;

constexpr char kA[] = "hostA:7000";
constexpr char kB[] = "hostB:7000";
constexpr char kC[] = "hostC:7000";

std::vector<uint8_t> Payload(uint32_t n) {
  return {static_cast<uint8_t>(n), static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n >> 16),
          static_cast<uint8_t>(n >> 24)};
}
uint32_t PayloadId(const std::vector<uint8_t>& b) {
  EXPECT_EQ(b.size(), 4u);
  if (b.size() != 4) return 0;
  return b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
}

NetPlan FixedDelayPlan(uint64_t delay_ns) {
  NetPlan p;
  p.delay_ns_min = delay_ns;
  p.delay_ns_max = delay_ns;
  return p;
}

// A world of one network and a few endpoints.
struct World {
  explicit World(NetPlan plan, uint64_t seed = 1)
      : trace(0), net(Prng(seed), &clock, &trace, std::move(plan)) {}

  std::unique_ptr<SimControlNet> Bind(std::string_view address) {
    auto ep = net.Bind(address);
    EXPECT_TRUE(ep.ok()) << ep.status();
    return ep.ok() ? std::move(*ep) : nullptr;
  }

  // Jumps virtual time event by event until nothing is in flight, handing
  // each delivered message of `rx` to `on_msg` with its delivery time.
  template <typename Fn>
  void DrainTo(SimControlNet& rx, Fn on_msg, size_t event_max = 1'000'000) {
    for (size_t i = 0; i < event_max; ++i) {
      PollAll(rx, on_msg);
      std::optional<uint64_t> wake = net.NextWakeNs();
      if (!wake) return;
      clock.AdvanceTo(*wake);
      net.DeliverDue();
    }
    ADD_FAILURE() << "DrainTo did not finish";
  }
  template <typename Fn>
  void PollAll(SimControlNet& rx, Fn on_msg) {
    for (size_t i = 0; i < 1'000'000; ++i) {
      auto m = rx.Poll(0);
      ASSERT_TRUE(m.ok()) << m.status();
      if (!m->has_value()) return;
      on_msg(**m, clock.NowNs());
    }
  }

  VirtualClock clock;
  Trace trace;
  SimNetwork net;
};

// ------------------------------------------------------------------ delay

TEST(SimNetworkTest, DeliversAfterExactDelayInVirtualTime) {
  World w(FixedDelayPlan(5'000));
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  EXPECT_EQ(a->LocalAddress(), kA);
  ASSERT_TRUE(a->Send(kB, Payload(42)).ok());
  EXPECT_EQ(w.net.in_flight(), 1u);
  EXPECT_EQ(w.net.NextWakeNs(), std::optional<uint64_t>(5'000));
  EXPECT_TRUE(w.net.HasWork());

  w.clock.AdvanceTo(4'999);
  EXPECT_FALSE(w.net.Runnable());
  EXPECT_EQ(w.net.DeliverDue(), 0u);
  auto none = b->Poll(1'000'000'000);  // the timeout never makes Poll wait
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  w.clock.AdvanceTo(5'000);
  EXPECT_TRUE(w.net.Runnable());
  w.net.Step();
  EXPECT_FALSE(w.net.HasWork());
  auto got = b->Poll(0);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->from, kA);
  EXPECT_EQ(PayloadId((*got)->bytes), 42u);
  EXPECT_EQ(w.net.counters().delivered, 1u);
  EXPECT_EQ(w.net.counters().polled, 1u);
}

TEST(SimNetworkTest, DelayStaysInPlanRangeAndSpreads) {
  NetPlan p;
  p.delay_ns_min = 1'000;
  p.delay_ns_max = 3'000;
  p.inbound_max = 1 << 16;
  World w(p, 7);
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  constexpr uint32_t kN = 2'000;
  for (uint32_t i = 0; i < kN; ++i) ASSERT_TRUE(a->Send(kB, Payload(i)).ok());
  std::map<uint64_t, uint32_t> at_ns;
  uint32_t n = 0;
  w.DrainTo(*b, [&](const hal::Message&, uint64_t now_ns) {
    ++at_ns[now_ns];
    ++n;
  });
  EXPECT_EQ(n, kN);
  ASSERT_FALSE(at_ns.empty());
  EXPECT_GE(at_ns.begin()->first, 1'000u);
  EXPECT_LE(at_ns.rbegin()->first, 3'000u);
  EXPECT_GT(at_ns.size(), 500u);  // 2001 possible values, 2000 draws
}

// ------------------------------------------------------------------ rates

TEST(SimNetworkTest, LossRateWithinBounds) {
  NetPlan p = FixedDelayPlan(100);
  p.loss = Ratio{1, 10};
  p.inbound_max = 1 << 16;  // all arrive at once
  World w(p, 11);
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  constexpr uint32_t kN = 10'000;
  for (uint32_t i = 0; i < kN; ++i) ASSERT_TRUE(a->Send(kB, Payload(i)).ok());
  uint32_t n = 0;
  w.DrainTo(*b, [&](const hal::Message&, uint64_t) { ++n; });
  const uint64_t lost = w.net.counters().Dropped(NetDrop::kLoss);
  EXPECT_GE(lost, 800u);
  EXPECT_LE(lost, 1'200u);
  EXPECT_EQ(n + lost, kN);
  EXPECT_EQ(w.net.counters().sent, kN);
}

TEST(SimNetworkTest, DuplicateRateWithinBounds) {
  NetPlan p = FixedDelayPlan(100);
  p.duplicate = Ratio{1, 5};
  p.inbound_max = 1 << 16;  // all arrive at once
  World w(p, 12);
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  constexpr uint32_t kN = 10'000;
  for (uint32_t i = 0; i < kN; ++i) ASSERT_TRUE(a->Send(kB, Payload(i)).ok());
  std::map<uint32_t, uint32_t> seen;
  w.DrainTo(*b, [&](const hal::Message& m, uint64_t) { ++seen[PayloadId(m.bytes)]; });
  const uint64_t dup = w.net.counters().duplicated;
  EXPECT_GE(dup, 1'700u);
  EXPECT_LE(dup, 2'300u);
  EXPECT_EQ(seen.size(), kN);  // nothing lost
  uint64_t twice = 0;
  for (const auto& [id, count] : seen) {
    EXPECT_TRUE(count == 1 || count == 2) << id;
    if (count == 2) ++twice;
  }
  EXPECT_EQ(twice, dup);
}

// Sends one message every 100 ns with a fixed 1000 ns delay, so without
// jitter the order is FIFO; returns how many arrivals were out of order.
uint64_t CountInversions(World& w, SimControlNet& a, SimControlNet& b, uint32_t n) {
  uint32_t highest = 0;
  bool any = false;
  uint64_t inversions = 0;
  auto on_msg = [&](const hal::Message& m, uint64_t) {
    const uint32_t id = PayloadId(m.bytes);
    if (any && id < highest) ++inversions;
    if (!any || id > highest) highest = id;
    any = true;
  };
  for (uint32_t i = 0; i < n; ++i) {
    EXPECT_TRUE(a.Send(kB, Payload(i)).ok());
    w.clock.Advance(100);
    w.net.DeliverDue();
    w.PollAll(b, on_msg);
  }
  w.DrainTo(b, on_msg);
  return inversions;
}

TEST(SimNetworkTest, ReorderRateWithinBoundsAndReorders) {
  NetPlan p = FixedDelayPlan(1'000);
  p.reorder = Ratio{1, 4};
  p.reorder_jitter_ns_max = 10'000;
  World w(p, 13);
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  constexpr uint32_t kN = 10'000;
  const uint64_t inversions = CountInversions(w, *a, *b, kN);
  const uint64_t reordered = w.net.counters().reordered;
  EXPECT_GE(reordered, 2'200u);
  EXPECT_LE(reordered, 2'800u);
  EXPECT_GT(inversions, 1'000u);
  EXPECT_EQ(w.net.counters().delivered, kN);
}

TEST(SimNetworkTest, NoReorderRateKeepsFifo) {
  World w(FixedDelayPlan(1'000), 13);
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  EXPECT_EQ(CountInversions(w, *a, *b, 1'000), 0u);
  EXPECT_EQ(w.net.counters().reordered, 0u);
}

// ------------------------------------------------------------------ partition

TEST(SimNetworkTest, OneWayPartitionThenHeal) {
  World w(FixedDelayPlan(10));
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  ASSERT_TRUE(w.net.Partition(kA, kB, PartitionDir::kOneWay).ok());
  ASSERT_TRUE(a->Send(kB, Payload(1)).ok());  // cut
  ASSERT_TRUE(b->Send(kA, Payload(2)).ok());  // flows
  w.clock.Advance(10);
  w.net.DeliverDue();
  EXPECT_FALSE(b->Poll(0)->has_value());
  auto back = a->Poll(0);
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ(PayloadId((*back)->bytes), 2u);
  EXPECT_EQ(w.net.counters().Dropped(NetDrop::kPartition), 1u);

  ASSERT_TRUE(w.net.Heal(kB, kA).ok());  // heal is symmetric in its arguments
  ASSERT_TRUE(a->Send(kB, Payload(3)).ok());
  w.clock.Advance(10);
  w.net.DeliverDue();
  auto healed = b->Poll(0);
  ASSERT_TRUE(healed->has_value());
  EXPECT_EQ(PayloadId((*healed)->bytes), 3u);
}

TEST(SimNetworkTest, BothWaysPartitionCutsInFlightAndSparesOthers) {
  World w(FixedDelayPlan(10));
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  auto c = w.Bind(kC);
  ASSERT_TRUE(a->Send(kB, Payload(1)).ok());  // in flight when the cut happens
  ASSERT_TRUE(w.net.Partition(kA, kB, PartitionDir::kBoth).ok());
  ASSERT_TRUE(b->Send(kA, Payload(2)).ok());
  ASSERT_TRUE(a->Send(kC, Payload(3)).ok());
  w.clock.Advance(10);
  w.net.DeliverDue();
  EXPECT_FALSE(a->Poll(0)->has_value());
  EXPECT_FALSE(b->Poll(0)->has_value());
  EXPECT_TRUE(c->Poll(0)->has_value());
  EXPECT_EQ(w.net.counters().Dropped(NetDrop::kPartition), 2u);

  w.net.HealAll();
  ASSERT_TRUE(b->Send(kA, Payload(4)).ok());
  w.clock.Advance(10);
  w.net.DeliverDue();
  EXPECT_TRUE(a->Poll(0)->has_value());
  EXPECT_FALSE(w.net.Partition(kA, kA, PartitionDir::kBoth).ok());
  EXPECT_EQ(w.net.Partition("bad", kA, PartitionDir::kBoth).code(),
            absl::StatusCode::kInvalidArgument);
}

// ------------------------------------------------------------------ pause

TEST(SimNetworkTest, PausedPeerQueuesInboundSendsNothingResumeDelivers) {
  World w(FixedDelayPlan(10));
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  ASSERT_TRUE(w.net.Pause(kB).ok());
  EXPECT_TRUE(w.net.paused(kB));
  for (uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(a->Send(kB, Payload(i)).ok());
  ASSERT_TRUE(b->Send(kA, Payload(99)).ok());  // silently dropped
  w.clock.Advance(10);
  w.net.DeliverDue();
  EXPECT_EQ(w.net.queued(kB), 3u);
  EXPECT_FALSE(b->Poll(0)->has_value());
  EXPECT_FALSE(a->Poll(0)->has_value());
  EXPECT_EQ(w.net.counters().Dropped(NetDrop::kSenderPaused), 1u);

  ASSERT_TRUE(w.net.Resume(kB).ok());
  for (uint32_t i = 0; i < 3; ++i) {
    auto m = b->Poll(0);
    ASSERT_TRUE(m.ok());
    ASSERT_TRUE(m->has_value());
    EXPECT_EQ(PayloadId((*m)->bytes), i);
  }
  EXPECT_FALSE(b->Poll(0)->has_value());
  EXPECT_EQ(w.net.Pause("hostZ:1").code(), absl::StatusCode::kNotFound);
}

// ------------------------------------------------------------------ restart

TEST(SimNetworkTest, RestartDropsQueuedAndAllowsRebind) {
  World w(FixedDelayPlan(10));
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  EXPECT_EQ(w.net.Bind(kB).status().code(), absl::StatusCode::kAlreadyExists);
  for (uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(a->Send(kB, Payload(i)).ok());
  w.clock.Advance(10);
  w.net.DeliverDue();
  ASSERT_TRUE(a->Send(kB, Payload(7)).ok());  // still in flight at restart
  EXPECT_EQ(w.net.queued(kB), 3u);
  const uint64_t old_incarnation = b->incarnation();

  ASSERT_TRUE(w.net.Restart(kB).ok());
  EXPECT_EQ(w.net.queued(kB), 0u);
  EXPECT_EQ(w.net.counters().Dropped(NetDrop::kRestart), 3u);
  EXPECT_EQ(b->Poll(0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(b->Send(kA, Payload(0)).code(), absl::StatusCode::kFailedPrecondition);

  // Not bound yet when the in-flight copy arrives: a network drop.
  w.clock.Advance(10);
  w.net.DeliverDue();
  EXPECT_EQ(w.net.counters().Dropped(NetDrop::kDestinationDown), 1u);

  auto b2 = w.Bind(kB);
  EXPECT_GT(b2->incarnation(), old_incarnation);
  EXPECT_FALSE(b2->Poll(0)->has_value());
  ASSERT_TRUE(a->Send(kB, Payload(8)).ok());
  w.clock.Advance(10);
  w.net.DeliverDue();
  auto m = b2->Poll(0);
  ASSERT_TRUE(m->has_value());
  EXPECT_EQ(PayloadId((*m)->bytes), 8u);
  b.reset();  // the stale handle's destructor must not unbind the new one
  ASSERT_TRUE(a->Send(kB, Payload(9)).ok());
  w.clock.Advance(10);
  w.net.DeliverDue();
  EXPECT_TRUE(b2->Poll(0)->has_value());
  EXPECT_EQ(w.net.Restart("hostZ:1").code(), absl::StatusCode::kNotFound);
}

TEST(SimNetworkTest, ClosingEndpointDropsQueuedAndFreesAddress) {
  World w(FixedDelayPlan(10));
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  ASSERT_TRUE(a->Send(kB, Payload(1)).ok());
  w.clock.Advance(10);
  w.net.DeliverDue();
  b.reset();
  EXPECT_EQ(w.net.counters().Dropped(NetDrop::kUnbind), 1u);
  auto b2 = w.Bind(kB);
  EXPECT_FALSE(b2->Poll(0)->has_value());
}

// ------------------------------------------------------------------ input

TEST(SimNetworkTest, OversizeRejectedExactMaxDelivered) {
  World w(FixedDelayPlan(10));
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  std::vector<uint8_t> big(hal::kMaxMessageBytes + 1, 0xab);
  absl::Status s = a->Send(kB, big);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("kMaxMessageBytes"));
  EXPECT_EQ(w.net.counters().oversize_rejected, 1u);
  EXPECT_EQ(w.net.counters().sent, 0u);
  EXPECT_EQ(w.net.in_flight(), 0u);

  big.pop_back();
  ASSERT_TRUE(a->Send(kB, big).ok());
  w.clock.Advance(10);
  w.net.DeliverDue();
  auto m = b->Poll(0);
  ASSERT_TRUE(m->has_value());
  EXPECT_EQ((*m)->bytes.size(), hal::kMaxMessageBytes);
}

TEST(SimNetworkTest, UnknownDestinationIsCountedDropMalformedIsError) {
  World w(FixedDelayPlan(10));
  auto a = w.Bind(kA);
  EXPECT_TRUE(a->Send("nowhere:1", Payload(1)).ok());
  EXPECT_EQ(w.net.counters().Dropped(NetDrop::kUnknownAddress), 1u);
  EXPECT_EQ(w.net.in_flight(), 0u);
  for (std::string_view bad : {"nohost", ":80", "h:", "h:0", "h:65536", "h:8x", "h:-1"}) {
    EXPECT_EQ(a->Send(bad, Payload(1)).code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(w.net.Bind(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(ValidateNetAddress("h:65535").ok());
  EXPECT_EQ(w.net.counters().malformed_rejected, 7u);
}

// ------------------------------------------------------------------ bounds

TEST(SimNetworkTest, InboundQueueIsBoundedOverflowCounted) {
  NetPlan p = FixedDelayPlan(10);
  p.inbound_max = 4;
  World w(p);
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  for (uint32_t i = 0; i < 10; ++i) ASSERT_TRUE(a->Send(kB, Payload(i)).ok());
  w.clock.Advance(10);
  w.net.DeliverDue();
  EXPECT_EQ(w.net.queued(kB), 4u);
  EXPECT_EQ(w.net.counters().Dropped(NetDrop::kInboundOverflow), 6u);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(PayloadId((*b->Poll(0))->bytes), i);
}

TEST(SimNetworkTest, InFlightQueueIsBoundedOverflowCounted) {
  NetPlan p = FixedDelayPlan(10);
  p.in_flight_max = 5;
  World w(p);
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  for (uint32_t i = 0; i < 8; ++i) ASSERT_TRUE(a->Send(kB, Payload(i)).ok());
  EXPECT_EQ(w.net.in_flight(), 5u);
  EXPECT_EQ(w.net.counters().Dropped(NetDrop::kInFlightOverflow), 3u);
}

// ------------------------------------------------------------------ scripting

TEST(SimNetworkTest, ScriptedActionsApplyToNextMessagesOnTheLinkOnly) {
  World w(FixedDelayPlan(10));
  auto a = w.Bind(kA);
  auto b = w.Bind(kB);
  auto c = w.Bind(kC);
  using K = ScriptedNetAction::Kind;
  ASSERT_TRUE(w.net.ScriptNext(kA, kB, {K::kDrop, 0}).ok());
  ASSERT_TRUE(w.net.ScriptNext(kA, kB, {K::kDuplicate, 0}).ok());
  ASSERT_TRUE(w.net.ScriptNext(kA, kB, {K::kDelay, 1'000}).ok());
  ASSERT_TRUE(a->Send(kC, Payload(100)).ok());  // other link: unaffected
  for (uint32_t i = 1; i <= 4; ++i) ASSERT_TRUE(a->Send(kB, Payload(i)).ok());
  std::vector<std::pair<uint32_t, uint64_t>> got;
  w.DrainTo(*b,
            [&](const hal::Message& m, uint64_t t) { got.emplace_back(PayloadId(m.bytes), t); });
  // 1 dropped, 2 twice at 10, 3 at 1000, 4 rated (10).
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], std::make_pair(2u, uint64_t{10}));
  EXPECT_EQ(got[1], std::make_pair(2u, uint64_t{10}));
  EXPECT_EQ(got[2], std::make_pair(4u, uint64_t{10}));
  EXPECT_EQ(got[3], std::make_pair(3u, uint64_t{1'000}));
  EXPECT_TRUE(c->Poll(0)->has_value());
  EXPECT_EQ(w.net.counters().scripted, 3u);
  EXPECT_EQ(w.net.counters().Dropped(NetDrop::kLoss), 1u);
}

// ------------------------------------------------------------------ plan

TEST(SimNetworkTest, PlanDrawnPerSeedPrintsAndValidates) {
  std::map<std::string, int> distinct;
  for (uint64_t seed = 1; seed <= 64; ++seed) {
    Prng prng(seed);
    NetPlan p = NetPlan::Draw(prng);
    EXPECT_TRUE(p.Validate().ok());
    ++distinct[p.ToString()];
    Prng again(seed);
    EXPECT_EQ(NetPlan::Draw(again).ToString(), p.ToString());
  }
  EXPECT_GT(distinct.size(), 32u);
  const std::string text = NetPlan{}.ToString();
  for (const char* field : {"delay_ns=", "loss=", "duplicate=", "reorder=", "inbound_max="}) {
    EXPECT_THAT(text, HasSubstr(field));
  }
  NetPlan bad;
  bad.loss = Ratio{2, 1};
  EXPECT_EQ(bad.Validate().code(), absl::StatusCode::kInvalidArgument);
  bad = NetPlan{};
  bad.delay_ns_min = 2;
  bad.delay_ns_max = 1;
  EXPECT_FALSE(bad.Validate().ok());
  bad = NetPlan{};
  bad.reorder = Ratio{1, 2};
  EXPECT_FALSE(bad.Validate().ok());  // reorder without jitter
  World w(FixedDelayPlan(1));
  EXPECT_FALSE(w.net.SetPlan(bad).ok());
}

// ------------------------------------------------------------------ determinism

struct RunDigest {
  std::vector<std::pair<std::string, uint32_t>> order;  // (receiver, payload)
  uint64_t trace_hash = 0;
  std::string counters;
  friend bool operator==(const RunDigest&, const RunDigest&) = default;
};

// Three hosts chatter with every fault kind on (drawn plan plus forced rates).
RunDigest RunChatter(uint64_t seed) {
  Prng root(seed);
  Prng plan_prng = root.Fork();
  NetPlan plan = NetPlan::Draw(plan_prng);
  plan.loss = Ratio{1, 20};
  plan.duplicate = Ratio{1, 20};
  plan.reorder = Ratio{1, 5};
  plan.reorder_jitter_ns_max = 50'000;
  VirtualClock clock;
  Trace trace(0);
  SimNetwork net(root.Fork(), &clock, &trace, plan);
  Prng driver = root.Fork();
  const std::vector<std::string> hosts = {kA, kB, kC};
  std::vector<std::unique_ptr<SimControlNet>> eps;
  for (const auto& h : hosts) eps.push_back(std::move(net.Bind(h)).value());
  RunDigest d;
  for (uint32_t i = 0; i < 3'000; ++i) {
    const size_t from = driver.Below(3);
    const size_t to = (from + 1 + driver.Below(2)) % 3;
    EXPECT_TRUE(eps[from]->Send(hosts[to], Payload(i)).ok());
    if (i == 1'000) {
      EXPECT_TRUE(net.Partition(kA, kB, PartitionDir::kOneWay).ok());
    }
    if (i == 1'500) {
      EXPECT_TRUE(net.Pause(kC).ok());
    }
    if (i == 2'000) {
      net.HealAll();
      EXPECT_TRUE(net.Resume(kC).ok());
    }
    clock.Advance(driver.Range(0, 20'000));
    while (net.Runnable()) net.Step();
    for (size_t e = 0; e < 3; ++e) {
      for (;;) {
        auto m = eps[e]->Poll(0);
        if (!m.ok() || !m->has_value()) break;
        d.order.emplace_back(hosts[e], PayloadId((*m)->bytes));
      }
    }
  }
  d.trace_hash = trace.hash();
  d.counters = net.counters().ToString();
  return d;
}

TEST(SimNetworkTest, SameSeedSameDeliveryOrderAndTraceHash) {
  const RunDigest first = RunChatter(2024);
  const RunDigest other = RunChatter(77);  // in between: no hidden state
  const RunDigest second = RunChatter(2024);
  EXPECT_GT(first.order.size(), 2'000u);
  EXPECT_TRUE(first == second) << first.counters << "\n" << second.counters;
  EXPECT_NE(first.trace_hash, other.trace_hash);
  EXPECT_NE(first.order, other.order);
}

// ------------------------------------------------------------------ scheduler

// A client that pings until it has kPongs answers, resending on a virtual
// timeout; it waits on its deadline through NextWakeNs.
class PingClient final : public Actor {
 public:
  static constexpr uint32_t kPongs = 200;
  static constexpr uint64_t kResendNs = 200'000;
  PingClient(SimControlNet* ep, VirtualClock* clock) : ep_(ep), clock_(clock) {}
  std::string_view name() const override { return "client"; }
  bool Runnable() override {
    return ep_->pollable() > 0 || (next_ < kPongs && (!waiting_ || Due()));
  }
  uint64_t Step() override {
    auto m = ep_->Poll(0);
    EXPECT_TRUE(m.ok());
    if (m.ok() && m->has_value()) {
      if (waiting_ && PayloadId((*m)->bytes) == next_) {
        ++next_;
        waiting_ = false;
      }
      return 100;
    }
    if (next_ < kPongs && (!waiting_ || Due())) {
      if (waiting_) ++resends_;
      EXPECT_TRUE(ep_->Send(kB, Payload(next_)).ok());
      waiting_ = true;
      deadline_ns_ = clock_->NowNs() + kResendNs;
    }
    return 100;
  }
  std::optional<uint64_t> NextWakeNs() override {
    if (next_ < kPongs && waiting_) return deadline_ns_;
    return std::nullopt;
  }
  bool HasWork() override { return next_ < kPongs; }
  uint32_t pongs() const { return next_; }
  uint32_t resends() const { return resends_; }

 private:
  bool Due() const { return clock_->NowNs() >= deadline_ns_; }
  SimControlNet* ep_;
  VirtualClock* clock_;
  uint32_t next_ = 0;
  uint32_t resends_ = 0;
  bool waiting_ = false;
  uint64_t deadline_ns_ = 0;
};

// Echoes every message back to its sender.
class EchoServer final : public Actor {
 public:
  explicit EchoServer(SimControlNet* ep) : ep_(ep) {}
  std::string_view name() const override { return "server"; }
  bool Runnable() override { return ep_->pollable() > 0; }
  uint64_t Step() override {
    auto m = ep_->Poll(0);
    EXPECT_TRUE(m.ok() && m->has_value());
    if (m.ok() && m->has_value()) {
      EXPECT_TRUE(ep_->Send((*m)->from, (*m)->bytes).ok());
    }
    return 100;
  }

 private:
  SimControlNet* ep_;
};

struct PingResult {
  RunOutcome outcome = RunOutcome::kDeadlock;
  uint32_t pongs = 0;
  uint32_t resends = 0;
  uint64_t end_time_ns = 0;
  uint64_t trace_hash = 0;
};

PingResult RunPingPong(uint64_t seed) {
  Prng root(seed);
  VirtualClock clock;
  Trace trace(0);
  NetPlan plan;
  plan.delay_ns_min = 5'000;
  plan.delay_ns_max = 50'000;
  plan.loss = Ratio{1, 5};
  plan.duplicate = Ratio{1, 10};
  plan.reorder = Ratio{1, 10};
  plan.reorder_jitter_ns_max = 100'000;
  SimNetwork net(root.Fork(), &clock, &trace, plan);
  auto a = std::move(net.Bind(kA)).value();
  auto b = std::move(net.Bind(kB)).value();
  PingClient client(a.get(), &clock);
  EchoServer server(b.get());
  Scheduler sched(root.Fork(), &clock, &trace);
  sched.AddActor(&client);
  sched.AddActor(&server);
  sched.AddActor(&net);
  sched.MakePlan();
  RunResult r = sched.Run([&] { return client.pongs() == PingClient::kPongs; }, 1'000'000,
                          uint64_t{10} * 1'000'000'000);
  net.CheckInvariants();
  return PingResult{r.outcome, client.pongs(), client.resends(), r.end_time_ns, trace.hash()};
}

TEST(SimNetworkTest, SchedulerDrivesDeliveryAndTimeoutsInVirtualTime) {
  const PingResult r = RunPingPong(5);
  EXPECT_EQ(r.outcome, RunOutcome::kDone);
  EXPECT_EQ(r.pongs, PingClient::kPongs);
  EXPECT_GT(r.resends, 20u);  // about 36% of round trips lose a message
  // Every round trip takes at least two minimum delays of virtual time.
  EXPECT_GE(r.end_time_ns, uint64_t{PingClient::kPongs} * 2 * 5'000);
  const PingResult again = RunPingPong(5);
  EXPECT_EQ(again.trace_hash, r.trace_hash);
  EXPECT_EQ(again.end_time_ns, r.end_time_ns);
  EXPECT_NE(RunPingPong(6).trace_hash, r.trace_hash);
}

}  // namespace
}  // namespace ferry::sim
