// sim/prng.h: Ferry's own 64-bit PRNG with integer-only helpers.
//
// Why our own and not <random>: std::*_distribution output differs between
// standard libraries and versions, and absl::BitGen is seeded per process;
// a seed must replay identically on every build (DESIGN.md section 7).
//
// Thread safety: none; each component owns its Prng (derived with Fork()).
// What must stay true:
// - The output sequence for a seed is fixed forever (tests pin values).
// - No floating point anywhere: probabilities are Ratio{num, den}.
// - Every draw is reported to the attached Trace (if any), so the
//   determinism check sees every draw.
#ifndef FERRY_SIM_PRNG_H_
#define FERRY_SIM_PRNG_H_

#include <cstdint>
#include <span>
#include <utility>

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

 private:
  uint64_t s_[4];
  Trace* trace_ = nullptr;
  uint32_t stream_ = 0;
};

}  // namespace ferry::sim

#endif  // FERRY_SIM_PRNG_H_
