#include "hal/os/steady_clock.h"

#include <chrono>

namespace ferry::hal {

uint64_t SteadyClock::NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace ferry::hal
