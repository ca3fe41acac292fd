// hal/clock.h: the Clock port: monotonic time in nanoseconds.
//
// Production: hal/os/steady_clock (std::chrono::steady_clock). Sim: the
// virtual clock (sim/virtual_clock.h), which jumps to the next timer when
// every actor is idle. Engine deadlines are values of NowNs(); workers
// return them in their wait sets instead of sleeping.
// What must stay true: NowNs() never decreases.
#ifndef FERRY_HAL_CLOCK_H_
#define FERRY_HAL_CLOCK_H_

#include <cstdint>

namespace ferry::hal {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t NowNs() = 0;
};

}  // namespace ferry::hal

#endif  // FERRY_HAL_CLOCK_H_
