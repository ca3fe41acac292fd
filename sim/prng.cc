// sim/prng.cc: xoshiro256** seeded through splitmix64, and the integer-only
// helpers on top of it.
//
// Owns: the exact output sequence of every seed (pinned by
// tests/sim/core/prng_test.cc: changing anything here changes every replay).
// What must stay true: no floating point, no platform-dependent operation
// (only 64-bit unsigned arithmetic, shifts and rotations); every value handed
// out passes through Next(), which reports it to the attached trace. The only
// unseeded source is behind FERRY_MUTATIONS, for the kUnseededDraw mutation.
#include "sim/prng.h"

#include <limits>

#include "base/check.h"
#include "sim/trace.h"

#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
#include <random>  // std::random_device: the kUnseededDraw mutation only.
#endif

namespace ferry::sim {
namespace {

constexpr uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// splitmix64 (Steele, Lea, Flood; as used by Vigna to seed xoshiro): advances
// `state` by the golden-ratio increment and returns a mixed output.
constexpr uint64_t SplitMix64(uint64_t& state) {
  state += 0x9e3779b97f4a7c15ULL;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Published first output of splitmix64 from state 0.
constexpr uint64_t FirstSplitMixOfZero() {
  uint64_t state = 0;
  return SplitMix64(state);
}
static_assert(FirstSplitMixOfZero() == 0xe220a8397b1dcdafULL);

// A rejection loop ends with probability >= 1/2 per draw; this bound is
// reached with probability 2^-256, i.e. only if the generator is broken.
constexpr int kRejectDrawsMax = 256;

#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
uint64_t UnseededBits() {
  std::random_device device;
  const uint64_t hi = device();
  const uint64_t lo = device();
  return (hi << 32) ^ lo;
}
#endif

}  // namespace

Prng::Prng(uint64_t seed) {
  uint64_t sm = seed;
  for (uint64_t& word : s_) word = SplitMix64(sm);
  // splitmix64 is a bijection of its state, so four consecutive outputs are
  // never all zero; checked because xoshiro would then emit zeros forever.
  FERRY_CHECK((s_[0] | s_[1] | s_[2] | s_[3]) != 0);
}

Prng Prng::FromStateForTest(const std::array<uint64_t, 4>& state) {
  FERRY_CHECK((state[0] | state[1] | state[2] | state[3]) != 0);
  Prng prng;
  for (size_t i = 0; i < 4; ++i) prng.s_[i] = state[i];
  return prng;
}

uint64_t Prng::NextRaw() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Prng::Next() {
  uint64_t value = NextRaw();
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  if (mutations_.on(base::Mutation::kUnseededDraw)) value ^= UnseededBits();
#endif
  if (trace_ != nullptr) trace_->Draw(stream_, value);
  return value;
}

uint64_t Prng::Below(uint64_t n) {
  FERRY_CHECK_GT(n, 0U);
  // 2^64 mod n: the first `skip` values of the 64-bit range are the surplus
  // that would make `x % n` favour small results; rejecting them leaves
  // exactly floor(2^64 / n) values for each residue.
  const uint64_t skip = (0 - n) % n;
  for (int draw = 0; draw < kRejectDrawsMax; ++draw) {
    const uint64_t x = Next();
    if (x >= skip) return x % n;
  }
  FERRY_UNREACHABLE();
}

uint64_t Prng::Range(uint64_t lo, uint64_t hi) {
  FERRY_CHECK(lo <= hi);
  const uint64_t span_minus_one = hi - lo;
  if (span_minus_one == std::numeric_limits<uint64_t>::max()) return Next();
  return lo + Below(span_minus_one + 1);
}

bool Prng::Chance(Ratio r) {
  FERRY_CHECK(r.den > 0);
  FERRY_CHECK(r.num <= r.den);
  // Always exactly one Below() call, so the stream consumed does not depend
  // on whether the ratio is 0 or 1.
  return Below(r.den) < r.num;
}

Prng Prng::Fork() {
  Prng child(Next());
  child.mutations_ = mutations_;
  return child;
}

void Prng::Reseed(uint64_t seed) {
  const Prng fresh(seed);
  for (size_t i = 0; i < 4; ++i) s_[i] = fresh.s_[i];
}

void Prng::AttachTrace(Trace* trace, uint32_t stream) {
  trace_ = trace;
  stream_ = stream;
}

}  // namespace ferry::sim
