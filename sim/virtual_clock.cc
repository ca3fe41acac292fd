// sim/virtual_clock.cc: timers of the virtual clock.
//
// Owns: timer bookkeeping. What must stay true: timers_ and deadline_of_ hold
// exactly the same pending timers; ids are never reused; FireDue runs timers
// in (deadline, id) order and removes each before running it, so a timer may
// add or cancel timers (itself included) safely.
#include "sim/virtual_clock.h"

#include <utility>

#include "base/check.h"

namespace ferry::sim {
namespace {

// A timer that keeps re-arming itself at the current time would loop forever;
// no legitimate sim has this many timers due at one instant.
constexpr size_t kFireDueMax = size_t{1} << 22;

}  // namespace

VirtualClock::TimerId VirtualClock::AddTimer(uint64_t deadline_ns, std::function<void()> fn) {
  FERRY_CHECK(fn != nullptr);
  const TimerId id = next_id_++;
  FERRY_CHECK(timers_.emplace(std::make_pair(deadline_ns, id), std::move(fn)).second);
  FERRY_CHECK(deadline_of_.emplace(id, deadline_ns).second);
  FERRY_CHECK_EQ(timers_.size(), deadline_of_.size());
  return id;
}

bool VirtualClock::CancelTimer(TimerId id) {
  auto it = deadline_of_.find(id);
  if (it == deadline_of_.end()) return false;
  FERRY_CHECK_EQ(timers_.erase(std::make_pair(it->second, id)), 1U);
  deadline_of_.erase(it);
  FERRY_CHECK_EQ(timers_.size(), deadline_of_.size());
  return true;
}

std::optional<uint64_t> VirtualClock::NextDeadlineNs() const {
  if (timers_.empty()) return std::nullopt;
  return timers_.begin()->first.first;
}

size_t VirtualClock::FireDue() {
  size_t fired = 0;
  while (!timers_.empty()) {
    auto it = timers_.begin();
    const auto [deadline_ns, id] = it->first;
    if (deadline_ns > now_ns_) break;
    FERRY_CHECK_LT(fired, kFireDueMax);
    std::function<void()> fn = std::move(it->second);
    timers_.erase(it);
    FERRY_CHECK_EQ(deadline_of_.erase(id), 1U);
    ++fired;
    fn();
  }
  FERRY_CHECK_EQ(timers_.size(), deadline_of_.size());
  return fired;
}

}  // namespace ferry::sim
