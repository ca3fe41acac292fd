// hal/os/steady_clock.h: the production Clock (std::chrono::steady_clock).
// Stateless; safe from any thread. The one place a wall-clock read happens.
#ifndef FERRY_HAL_OS_STEADY_CLOCK_H_
#define FERRY_HAL_OS_STEADY_CLOCK_H_

#include "hal/clock.h"

namespace ferry::hal {

class SteadyClock final : public Clock {
 public:
  uint64_t NowNs() override;
};

}  // namespace ferry::hal

#endif  // FERRY_HAL_OS_STEADY_CLOCK_H_
