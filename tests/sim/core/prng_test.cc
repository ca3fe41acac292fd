// Tests of sim::Prng: the algorithm matches its published reference outputs,
// the output of fixed seeds is pinned (literal values, computed once from an
// independent model of the published algorithms), the integer helpers stay
// in bounds and are uniform (chi-square with integer math), Chance matches
// its ratio, forks are independent, every draw is traced, and the
// kUnseededDraw mutation exists only in mutation builds. Built twice: against
// the production core and against the mutation core, with the same pins.
#include "sim/prng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/mutation.h"
#include "sim/trace.h"

namespace ferry::sim {
namespace {

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

// The published xoshiro256** reference: state {1, 2, 3, 4}.
TEST(Prng, MatchesPublishedXoshiroReferenceOutputs) {
  Prng prng = Prng::FromStateForTest({1, 2, 3, 4});
  EXPECT_EQ(prng.Next(), 11520U);
  EXPECT_EQ(prng.Next(), 0U);
  EXPECT_EQ(prng.Next(), 1509978240U);
  EXPECT_EQ(prng.Next(), 1215971899390074240ULL);
}

TEST(Prng, FixedOutputsForFixedSeeds) {
  struct Pin {
    uint64_t seed;
    std::array<uint64_t, 4> first;
  };
  const Pin pins[] = {
      {0,
       {0x99ec5f36cb75f2b4ULL, 0xbf6e1f784956452aULL, 0x1a5f849d4933e6e0ULL,
        0x6aa594f1262d2d2cULL}},
      {1,
       {0xb3f2af6d0fc710c5ULL, 0x853b559647364ceaULL, 0x92f89756082a4514ULL,
        0x642e1c7bc266a3a7ULL}},
      {42,
       {0x15780b2e0c2ec716ULL, 0x6104d9866d113a7eULL, 0xae17533239e499a1ULL,
        0xecb8ad4703b360a1ULL}},
      {0xdeadbeefcafef00dULL,
       {0x9e32cfb5bb93eebbULL, 0x16006bd9d4ac0014ULL, 0x8ada5d6d34b6538eULL,
        0x7c327ca32346a238ULL}},
  };
  for (const Pin& pin : pins) {
    Prng prng(pin.seed);
    for (uint64_t expected : pin.first) EXPECT_EQ(prng.Next(), expected) << "seed " << pin.seed;
  }
}

TEST(Prng, FixedHelperOutputsForSeed42) {
  Prng prng(42);
  std::vector<uint64_t> below;
  for (int i = 0; i < 8; ++i) below.push_back(prng.Below(10));
  EXPECT_EQ(below, (std::vector<uint64_t>{2, 2, 9, 3, 6, 4, 4, 7}));
  std::vector<uint64_t> range;
  for (int i = 0; i < 4; ++i) range.push_back(prng.Range(100, 200));
  EXPECT_EQ(range, (std::vector<uint64_t>{143, 119, 172, 192}));
  std::vector<bool> chance;
  for (int i = 0; i < 8; ++i) chance.push_back(prng.Chance(Ratio{1, 3}));
  EXPECT_EQ(chance, (std::vector<bool>{false, false, false, false, true, true, true, false}));
  // n just above 2^63: about half of all raw draws are rejected.
  EXPECT_EQ(prng.Below(0x8000000000000001ULL), 0x1a1da25458817416ULL);
  EXPECT_EQ(prng.Below(0x8000000000000001ULL), 0x4a03e50015c044b7ULL);
  EXPECT_EQ(prng.Below(0x8000000000000001ULL), 0x2293144f4f3bd3f9ULL);
  Prng child = prng.Fork();
  EXPECT_EQ(child.Next(), 0x639546908065258cULL);
  EXPECT_EQ(child.Next(), 0x2615b10892e29e95ULL);
  EXPECT_EQ(prng.Next(), 0x6a0da881492d3bfdULL);
}

TEST(Prng, BelowAndRangeStayInBounds) {
  Prng prng(7);
  const uint64_t ns[] = {
      1, 2, 3, 7, 10, 1000, (uint64_t{1} << 32) + 1, 0x8000000000000001ULL, kU64Max - 1, kU64Max};
  for (uint64_t n : ns) {
    for (int i = 0; i < 2000; ++i) ASSERT_LT(prng.Below(n), n) << "n=" << n;
  }
  for (int i = 0; i < 100; ++i) EXPECT_EQ(prng.Below(1), 0U);
  for (int i = 0; i < 2000; ++i) {
    const uint64_t v = prng.Range(5, 9);
    ASSERT_GE(v, 5U);
    ASSERT_LE(v, 9U);
  }
  for (int i = 0; i < 100; ++i) EXPECT_EQ(prng.Range(17, 17), 17U);
  // The full range is allowed (no overflow in hi - lo + 1).
  bool saw_high_half = false;
  for (int i = 0; i < 100; ++i) saw_high_half |= prng.Range(0, kU64Max) > (kU64Max >> 1);
  EXPECT_TRUE(saw_high_half);
  std::vector<bool> seen(5, false);
  for (int i = 0; i < 500; ++i) seen[prng.Range(5, 9) - 5] = true;
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 5);
}

// Pearson's statistic times the expected count, all integers:
// chi2 = sum((c - e)^2) / e, so chi2 <= limit  <=>  sum((c - e)^2) <= limit * e.
uint64_t ChiSquareTimesExpected(const std::vector<uint64_t>& counts, uint64_t expected) {
  uint64_t sum = 0;
  for (uint64_t c : counts) {
    const uint64_t d = c > expected ? c - expected : expected - c;
    sum += d * d;
  }
  return sum;
}

TEST(Prng, BelowIsUniformChiSquare) {
  // Critical values at p = 0.001: 27.88 for 9 degrees of freedom, 22.46 for 6.
  struct Case {
    uint64_t n;
    uint64_t limit;
  };
  for (const Case c : {Case{10, 28}, Case{7, 23}}) {
    for (uint64_t seed : {1ULL, 2ULL, 3ULL, 4ULL, 5ULL}) {
      Prng prng(seed);
      const uint64_t draws = 10000 * c.n;
      std::vector<uint64_t> counts(c.n, 0);
      for (uint64_t i = 0; i < draws; ++i) ++counts[prng.Below(c.n)];
      const uint64_t expected = draws / c.n;
      EXPECT_LE(ChiSquareTimesExpected(counts, expected), c.limit * expected)
          << "n=" << c.n << " seed=" << seed;
    }
  }
}

// With n ~ 2/3 * 2^64, plain `x % n` would return values below 2^64 - n
// (about half of [0, n)) with probability 2/3 instead of 1/2.
TEST(Prng, BelowHasNoModuloBias) {
  const uint64_t n = 0xAAAAAAAAAAAAAAABULL;
  const uint64_t low_end = 0 - n;  // 2^64 - n
  Prng prng(11);
  uint64_t low = 0;
  const uint64_t draws = 20000;
  for (uint64_t i = 0; i < draws; ++i) low += prng.Below(n) < low_end ? 1 : 0;
  // 1/2 of 20000 = 10000, sigma ~ 71; biased would be ~13333.
  EXPECT_GE(low, 9700U);
  EXPECT_LE(low, 10300U);
}

TEST(Prng, ChanceMatchesRatio) {
  struct Case {
    Ratio r;
    uint64_t lo, hi;  // of 30000 draws, mean +- ~4.5 sigma
  };
  const Case cases[] = {
      {Ratio{1, 3}, 9600, 10400},
      {Ratio{7, 10}, 20640, 21360},
      {Ratio{1, 1000}, 10, 55},
      {Ratio{1, 2}, 14600, 15400},
  };
  Prng prng(99);
  for (const Case& c : cases) {
    uint64_t hits = 0;
    for (int i = 0; i < 30000; ++i) hits += prng.Chance(c.r) ? 1 : 0;
    EXPECT_GE(hits, c.lo) << c.r.num << "/" << c.r.den;
    EXPECT_LE(hits, c.hi) << c.r.num << "/" << c.r.den;
  }
  for (int i = 0; i < 1000; ++i) {
    EXPECT_FALSE(prng.Chance(kNever));
    EXPECT_TRUE(prng.Chance(kAlways));
    EXPECT_FALSE(prng.Chance(Ratio{0, 17}));
    EXPECT_TRUE(prng.Chance(Ratio{17, 17}));
  }
}

TEST(PrngDeathTest, BadArgumentsAbort) {
  Prng prng(1);
  EXPECT_DEATH(prng.Below(0), "FERRY_CHECK failed");
  EXPECT_DEATH(prng.Range(5, 4), "FERRY_CHECK failed");
  EXPECT_DEATH(prng.Chance(Ratio{2, 1}), "FERRY_CHECK failed");
  EXPECT_DEATH(prng.Chance(Ratio{0, 0}), "FERRY_CHECK failed");
  EXPECT_DEATH(Prng::FromStateForTest({0, 0, 0, 0}), "FERRY_CHECK failed");
}

TEST(Prng, ForkAdvancesParentByOneDrawAndIsReproducible) {
  Prng a(5), b(5), c(5);
  Prng child_a = a.Fork();
  Prng child_c = c.Fork();
  b.Next();
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(a.Next(), b.Next());
    EXPECT_EQ(child_a.Next(), child_c.Next());
  }
}

TEST(Prng, ForkedStreamsAreIndependent) {
  Prng parent(123);
  Prng child1 = parent.Fork();
  Prng child2 = parent.Fork();
  // Bit agreement between streams: each XOR has 32 set bits on average;
  // over 2000 words, 64000 +- ~4 sigma (sigma = sqrt(2000 * 16) ~ 179).
  uint64_t pc_parent = 0, pc_siblings = 0;
  uint64_t equal = 0;
  for (int i = 0; i < 2000; ++i) {
    const uint64_t p = parent.Next(), c1 = child1.Next(), c2 = child2.Next();
    pc_parent += static_cast<uint64_t>(std::popcount(p ^ c1));
    pc_siblings += static_cast<uint64_t>(std::popcount(c1 ^ c2));
    equal += (p == c1 || c1 == c2) ? 1 : 0;
  }
  EXPECT_EQ(equal, 0U);
  EXPECT_GE(pc_parent, 63280U);
  EXPECT_LE(pc_parent, 64720U);
  EXPECT_GE(pc_siblings, 63280U);
  EXPECT_LE(pc_siblings, 64720U);
}

TEST(Prng, EveryDrawIsTraced) {
  Trace trace(1000);
  Prng prng(8);
  prng.AttachTrace(&trace, 9);
  EXPECT_EQ(prng.trace(), &trace);
  EXPECT_EQ(prng.trace_stream(), 9U);
  prng.Next();
  prng.Below(0x8000000000000001ULL);  // may reject: every raw draw counts
  prng.Chance(Ratio{1, 2});
  Prng child = prng.Fork();
  EXPECT_EQ(child.trace(), nullptr);  // children start detached
  child.Next();
  ASSERT_GE(trace.entries(), 4U);
  ASSERT_EQ(trace.record().size(), trace.entries());
  // The record is exactly the raw stream of the seed, with nothing skipped:
  // a mirror generator reproduces every entry and then the next draw.
  Prng mirror(8);
  for (const TraceEntry& e : trace.record()) {
    EXPECT_EQ(e.text, absl::StrFormat("draw s=9 v=0x%016x", mirror.Next()));
  }
  const uint64_t entries = trace.entries();
  EXPECT_EQ(prng.Next(), mirror.Next());
  EXPECT_EQ(trace.entries(), entries + 1);
  prng.AttachTrace(nullptr, 0);
  prng.Next();
  EXPECT_EQ(trace.entries(), entries + 1);
}

TEST(Prng, ShuffleIsAPermutation) {
  Prng prng(3);
  std::vector<int> items(50);
  std::iota(items.begin(), items.end(), 0);
  prng.Shuffle(std::span<int>(items));
  std::vector<int> sorted = items;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
  int fixed = 0;
  for (int i = 0; i < 50; ++i) fixed += items[i] == i ? 1 : 0;
  EXPECT_LT(fixed, 10);
}

#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
TEST(PrngMutation, UnseededDrawBreaksReplayAndForksInheritIt) {
  base::Mutations mutations;
  mutations.Enable(base::Mutation::kUnseededDraw);
  Prng a(42), b(42);
  a.SetMutations(mutations);
  b.SetMutations(mutations);
  EXPECT_NE(a.Next(), b.Next());
  Prng child = a.Fork();
  EXPECT_TRUE(child.mutations().on(base::Mutation::kUnseededDraw));
  // Off again: back to the pinned stream.
  Prng c(42);
  c.SetMutations(base::Mutations{});
  EXPECT_EQ(c.Next(), 0x15780b2e0c2ec716ULL);
}
#else
TEST(PrngMutation, ProductionBuildCannotEnableMutations) {
  static_assert(!base::Mutations::kCompiledIn);
  Prng a(42);
  a.SetMutations(base::Mutations{});
  EXPECT_FALSE(a.mutations().on(base::Mutation::kUnseededDraw));
  EXPECT_EQ(a.Next(), 0x15780b2e0c2ec716ULL);
}
#endif

}  // namespace
}  // namespace ferry::sim
