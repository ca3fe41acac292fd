// sim/entropy.h: SimEntropy, the hal::Entropy port in the simulated world:
// incarnations and starting PSNs drawn from a sim::Prng forked from the
// world's root seed (docs/design.md section 7).
//
// Thread safety: none (the simulated world is single-threaded).
// What must stay true: every value is a draw of the Prng it was given, so a
// run's incarnations and PSNs replay from the seed.
#ifndef FERRY_SIM_ENTROPY_H_
#define FERRY_SIM_ENTROPY_H_

#include <cstdint>
#include <utility>

#include "hal/entropy.h"
#include "sim/prng.h"

namespace ferry::sim {

class SimEntropy final : public hal::Entropy {
 public:
  explicit SimEntropy(Prng prng) : prng_(std::move(prng)) {}
  uint64_t Next64() override { return prng_.Next(); }
  void Reseed(uint64_t seed) { prng_.Reseed(seed); }

 private:
  Prng prng_;
};

}  // namespace ferry::sim

#endif  // FERRY_SIM_ENTROPY_H_
