// hal/entropy.h: the Entropy port: incarnation ids and starting PSNs.
//
// Production: OS entropy (hal/os/os_entropy, getrandom). Sim: derived from
// the run's root seed, so a seed replays exactly.
// What must stay true: engine code draws randomness only from here.
#ifndef FERRY_HAL_ENTROPY_H_
#define FERRY_HAL_ENTROPY_H_

#include <cstdint>

namespace ferry::hal {

class Entropy {
 public:
  virtual ~Entropy() = default;
  virtual uint64_t Next64() = 0;
};

}  // namespace ferry::hal

#endif  // FERRY_HAL_ENTROPY_H_
