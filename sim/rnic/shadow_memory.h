// sim/rnic/shadow_memory.h: ground truth of who owns which bytes, exact to
// the byte (docs/design.md section 6), checked by the simulated RNIC at every
// DMA packet event.
//
// Thread safety: none (the simulator is single-threaded).
// What must stay true:
// - Tracked ranges never overlap: the map holds disjoint granule intervals,
//   each Owned, Released (its task published: the RNIC must not touch it) or
//   Fenced (a target fenced it: responder QP destroyed or MR deregistered).
// - A granule is one byte: two tasks' buffers that are adjacent at any
//   address never share a granule. (With 64-byte granules, found by the
//   engine state-machine property, adjacent unaligned buffers shared their
//   edge granule, and the first of them to publish released the other's
//   bytes: its own DMA was then reported as a DMA after publish.) The map
//   holds one interval per claim, so the cost is the same as with coarse
//   granules.
// - Check() is O(log n + overlapping intervals) and free when nothing is
//   tracked, so the benchmark pays nothing.
// - Attributable bytes: AttributableByte(task, offset) is a fixed function of
//   (task, offset) (FNV-1a of the task, splitmix64's finalizer per 8-byte
//   word), so bytes found in a buffer name the task that wrote them.
#ifndef FERRY_SIM_RNIC_SHADOW_MEMORY_H_
#define FERRY_SIM_RNIC_SHADOW_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::sim {

inline constexpr uint64_t kShadowGranuleBytes = 1;

enum class ShadowState : uint8_t { kOwned, kReleased, kFenced };

struct ShadowOwner {
  uint64_t task_id = 0;
  std::string label;
};

class ShadowMemory {
 public:
  // Marks [addr, addr+len) as owned by (task_id, label); replaces any earlier
  // state of those granules. len == 0 does nothing.
  void Claim(const void* addr, size_t len, uint64_t task_id, std::string_view label);
  // The owner published: granules become Released (the owner is kept so a
  // later touch names it). Untracked granules stay untracked.
  // With `only_task`, only the granules that task owns: a buffer the
  // engine handed to a new task before the oracle saw the old one publish
  // (a notification's send slot, returned at the publish and taken by the
  // next Submit in the same driver call) stays the new task's.
  void Release(const void* addr, size_t len, std::optional<uint64_t> only_task = std::nullopt);
  // A target fenced the range (remote side); `why` names the fence.
  void Fence(const void* addr, size_t len, uint64_t task_id, std::string_view why);
  // Stops tracking the range.
  void Forget(const void* addr, size_t len);

  // nullopt when touching [addr, addr+len) is allowed; else a message naming
  // the owner, e.g. "touched released range of task 7 (write-A) at +128".
  std::optional<std::string> Check(const void* addr, size_t len) const;

  bool empty() const { return map_.empty(); }
  size_t intervals() const { return map_.size(); }
  // State of the granule holding addr, if tracked.
  std::optional<ShadowState> StateAt(const void* addr) const;

 private:
  struct Interval {
    uint64_t end_granule = 0;  // exclusive
    ShadowState state = ShadowState::kOwned;
    uint32_t owner = 0;  // index into owners_
  };
  void Assign(uint64_t first, uint64_t end, ShadowState state, uint32_t owner);
  // Splits so that an interval starts exactly at `g` if one covers it.
  void SplitAt(uint64_t g);

  std::map<uint64_t, Interval> map_;  // key: first granule
  std::vector<ShadowOwner> owners_;
};

// The byte the workload writes at `offset` of task `task_id`'s data.
uint8_t AttributableByte(uint64_t task_id, uint64_t offset);
void FillAttributable(std::span<uint8_t> bytes, uint64_t task_id, uint64_t offset0);
// Index of the first byte that is not task_id's attributable byte, or
// bytes.size() when all match.
size_t FirstNotAttributable(std::span<const uint8_t> bytes, uint64_t task_id, uint64_t offset0);

}  // namespace ferry::sim

#endif  // FERRY_SIM_RNIC_SHADOW_MEMORY_H_
