// sim/prng.h: Ferry's own 64-bit PRNG with integer-only helpers.
//
// Why our own and not <random>: std::*_distribution output differs between
// standard libraries and versions, and absl::BitGen is seeded per process;
// a seed must replay identically on every build (docs/design.md section 7).
//
// The generator is xoshiro256** (Blackman and Vigna), its 256-bit state
// filled from the seed by four outputs of splitmix64, both written from their
// published descriptions. Fork() seeds a child from one draw of the parent.
//
// Thread safety: none; each component owns its Prng (derived with Fork()).
// What must stay true:
// - The output sequence for a seed is fixed forever (tests pin values).
// - The state is never all zero (xoshiro's one fixed point).
// - No floating point anywhere: probabilities are Ratio{num, den}.
// - Every draw is reported to the attached Trace (if any), so the
//   determinism check sees every draw.
#ifndef FERRY_SIM_PRNG_H_
#define FERRY_SIM_PRNG_H_

#include <array>
#include <cstdint>
#include <span>
#include <utility>

#include "base/mutation.h"

namespace ferry::sim {

class Trace;

// A probability num/den, 0 <= num <= den, den > 0.
struct Ratio {
  uint64_t num = 0;
  uint64_t den = 1;
};
constexpr Ratio kNever{0, 1};
constexpr Ratio kAlways{1, 1};

class Prng {
 public:
  explicit Prng(uint64_t seed);
  // A generator with the raw xoshiro256** state `state` (not all zero), for
  // checking the algorithm against its published reference outputs.
  static Prng FromStateForTest(const std::array<uint64_t, 4>& state);

  // Raw 64 uniformly distributed bits.
  uint64_t Next();
  // Uniform in [0, n); n > 0. Unbiased (rejection), integer only.
  uint64_t Below(uint64_t n);
  // Uniform in [lo, hi], inclusive; lo <= hi.
  uint64_t Range(uint64_t lo, uint64_t hi);
  // True with probability r.num / r.den.
  bool Chance(Ratio r);
  // A new generator whose stream is independent of this one; advances this
  // one by one draw. Components derive their seeds this way, in a fixed order.
  Prng Fork();
  // Restarts the stream as a fresh Prng(seed) would start it, keeping the
  // trace attachment and the mutation switches (a property command's own
  // sub-seed: TwoEngines::Reseed).
  void Reseed(uint64_t seed);
  // Fisher-Yates shuffle.
  template <typename T>
  void Shuffle(std::span<T> items) {
    for (size_t i = items.size(); i > 1; --i) {
      size_t j = static_cast<size_t>(Below(i));
      std::swap(items[i - 1], items[j]);
    }
  }

  // Every later draw is folded into `trace` tagged with `stream` (nullptr
  // detaches). The trace must outlive this Prng or be detached first.
  void AttachTrace(Trace* trace, uint32_t stream);
  Trace* trace() const { return trace_; }
  uint32_t trace_stream() const { return stream_; }

  // Test-only mutation switches (base/mutation.h); Fork() passes them on.
  // With Mutation::kUnseededDraw on (only possible in a FERRY_MUTATIONS=1
  // build), every draw mixes in bits from an unseeded source, so runs of
  // one seed diverge and the determinism check must fail.
  void SetMutations(const base::Mutations& mutations) { mutations_ = mutations; }
  const base::Mutations& mutations() const { return mutations_; }

 private:
  Prng() = default;
  // One xoshiro256** step: the next output, unmutated and untraced.
  uint64_t NextRaw();

  uint64_t s_[4] = {0, 0, 0, 0};
  Trace* trace_ = nullptr;
  uint32_t stream_ = 0;
  base::Mutations mutations_;
};

}  // namespace ferry::sim

#endif  // FERRY_SIM_PRNG_H_
