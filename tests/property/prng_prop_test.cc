// tests/property/prng_prop_test.cc: properties of sim::Prng (sim/prng.h).
//
// Owns: for arbitrary seeds and bounds, Below(n) < n, Range stays within
// [lo, hi] (the full 64-bit range included), Chance honours kNever/kAlways,
// Shuffle permutes, Fork gives a stream different from its parent's and from
// its sibling's, and one seed replays the same stream. What must stay true:
// every property draws a bounded number of values (<= 64 per case).
// FERRY_MUTATION=unseeded_draw makes SameSeedSameStream fail (the meson test
// property_prng_mut_unseeded_draw expects that failure).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "sim/prng.h"
#include "tests/property/prop_env.h"

namespace ferry::sim {
namespace {

constexpr int kDrawsMax = 64;

Prng MakePrng(uint64_t seed) {
  Prng p(seed);
  base::Mutations m;
  property::ApplyEnvMutation(m);
  p.SetMutations(m);
  return p;
}

RC_GTEST_PROP(PrngProp, BelowIsBelowN, (uint64_t seed, uint64_t n_raw)) {
  // Small bounds (rejection rarely needed) and huge ones (rejection often).
  const uint64_t n = *rc::gen::element<uint64_t>(n_raw | 1, (n_raw % 1000) + 1,
                                                 (uint64_t{1} << 63) + (n_raw >> 1), 1);
  Prng p = MakePrng(seed);
  for (int i = 0; i < kDrawsMax; ++i) RC_ASSERT(p.Below(n) < n);
}

RC_GTEST_PROP(PrngProp, RangeIsWithinBounds, (uint64_t seed, uint64_t a, uint64_t b)) {
  const uint64_t lo = std::min(a, b);
  const uint64_t hi = std::max(a, b);
  Prng p = MakePrng(seed);
  for (int i = 0; i < kDrawsMax; ++i) {
    const uint64_t v = p.Range(lo, hi);
    RC_ASSERT(v >= lo);
    RC_ASSERT(v <= hi);
  }
  // Degenerate and full ranges.
  RC_ASSERT(p.Range(a, a) == a);
  (void)p.Range(0, UINT64_MAX);
}

RC_GTEST_PROP(PrngProp, ChanceHonoursNeverAndAlways, (uint64_t seed, uint64_t den_raw)) {
  const uint64_t den = den_raw == 0 ? 1 : den_raw;
  Prng p = MakePrng(seed);
  for (int i = 0; i < kDrawsMax / 4; ++i) {
    RC_ASSERT(!p.Chance(kNever));
    RC_ASSERT(p.Chance(kAlways));
    RC_ASSERT(!p.Chance(Ratio{0, den}));
    RC_ASSERT(p.Chance(Ratio{den, den}));
  }
}

RC_GTEST_PROP(PrngProp, ShuffleIsAPermutation, (uint64_t seed, std::vector<int> items)) {
  RC_PRE(items.size() <= 256u);
  std::vector<int> shuffled = items;
  Prng p = MakePrng(seed);
  p.Shuffle(std::span<int>(shuffled));
  std::sort(items.begin(), items.end());
  std::sort(shuffled.begin(), shuffled.end());
  RC_ASSERT(items == shuffled);
}

std::array<uint64_t, 4> Four(Prng& p) { return {p.Next(), p.Next(), p.Next(), p.Next()}; }

RC_GTEST_PROP(PrngProp, ForkStreamsDiffer, (uint64_t seed)) {
  Prng parent = MakePrng(seed);
  Prng child1 = parent.Fork();
  Prng child2 = parent.Fork();
  const auto p = Four(parent);
  const auto c1 = Four(child1);
  const auto c2 = Four(child2);
  // 256 bits colliding by chance has probability 2^-256.
  RC_ASSERT(p != c1);
  RC_ASSERT(p != c2);
  RC_ASSERT(c1 != c2);
  // A fork replays too: the same parent seed forks the same child.
  Prng again = MakePrng(seed);
  Prng child1_again = again.Fork();
  RC_ASSERT(Four(child1_again) == c1);
}

RC_GTEST_PROP(PrngProp, SameSeedSameStream, (uint64_t seed, uint64_t other)) {
  Prng a = MakePrng(seed);
  Prng b = MakePrng(seed);
  for (int i = 0; i < kDrawsMax / 2; ++i) {
    RC_ASSERT(a.Next() == b.Next());
    const uint64_t n = (other >> (i % 32)) | 1;
    RC_ASSERT(a.Below(n) == b.Below(n));
  }
  if (other != seed) {
    Prng c = MakePrng(other);
    Prng d = MakePrng(seed);
    RC_ASSERT(Four(c) != Four(d));
  }
}

}  // namespace
}  // namespace ferry::sim
