// sim/virtual_clock.h: virtual time for the simulated world, with timers.
//
// Thread safety: none (single-threaded simulator).
// What must stay true: NowNs() never decreases; timers fire in (deadline,
// creation order) order, never before their deadline; time only moves by
// Advance/AdvanceTo (the scheduler jumps to NextDeadlineNs() when every actor
// is idle).
#ifndef FERRY_SIM_VIRTUAL_CLOCK_H_
#define FERRY_SIM_VIRTUAL_CLOCK_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "hal/clock.h"

namespace ferry::sim {

class VirtualClock final : public hal::Clock {
 public:
  using TimerId = uint64_t;

  explicit VirtualClock(uint64_t start_ns = 0) : now_ns_(start_ns) {}

  uint64_t NowNs() override { return now_ns_; }
  // Moves time forward by delta_ns (does not fire timers; see FireDue).
  void Advance(uint64_t delta_ns) { now_ns_ += delta_ns; }
  // Moves time to t_ns if it is later than now.
  void AdvanceTo(uint64_t t_ns) {
    if (t_ns > now_ns_) now_ns_ = t_ns;
  }

  // Registers `fn` to run at or after deadline_ns. Returns its id.
  TimerId AddTimer(uint64_t deadline_ns, std::function<void()> fn);
  // Cancels a pending timer; false if it already fired or never existed.
  bool CancelTimer(TimerId id);
  // Earliest pending deadline, if any.
  std::optional<uint64_t> NextDeadlineNs() const;
  // Runs every timer whose deadline <= now, in order; returns how many ran.
  // Timers added by a running timer with deadline <= now also run.
  size_t FireDue();
  size_t pending_timers() const { return timers_.size(); }

 private:
  uint64_t now_ns_;
  TimerId next_id_ = 1;
  // Key: (deadline, id) so equal deadlines fire in creation order.
  std::map<std::pair<uint64_t, TimerId>, std::function<void()>> timers_;
  std::map<TimerId, uint64_t> deadline_of_;
};

}  // namespace ferry::sim

#endif  // FERRY_SIM_VIRTUAL_CLOCK_H_
