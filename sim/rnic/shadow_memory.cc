// sim/rnic/shadow_memory.cc: the granule interval map behind ShadowMemory.
// What must stay true: map_ intervals are disjoint and non-empty; every
// interval's owner index is valid.
#include "sim/rnic/shadow_memory.h"

#include <bit>
#include <cstring>
#include <iterator>

#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/fnv1a.h"

namespace ferry::sim {
namespace {

uint64_t FirstGranule(const void* addr) {
  return reinterpret_cast<uintptr_t>(addr) / kShadowGranuleBytes;
}
uint64_t EndGranule(const void* addr, size_t len) {
  return (reinterpret_cast<uintptr_t>(addr) + len + kShadowGranuleBytes - 1) / kShadowGranuleBytes;
}

}  // namespace

void ShadowMemory::SplitAt(uint64_t g) {
  auto it = map_.upper_bound(g);
  if (it == map_.begin()) return;
  --it;
  if (it->first == g || it->second.end_granule <= g) return;
  Interval right = it->second;
  it->second.end_granule = g;
  map_.emplace(g, right);
}

void ShadowMemory::Assign(uint64_t first, uint64_t end, ShadowState state, uint32_t owner) {
  FERRY_CHECK_LT(first, end);
  SplitAt(first);
  SplitAt(end);
  auto it = map_.lower_bound(first);
  while (it != map_.end() && it->first < end) it = map_.erase(it);
  map_.emplace(first, Interval{end, state, owner});
}

void ShadowMemory::Claim(const void* addr, size_t len, uint64_t task_id, std::string_view label) {
  if (len == 0) return;
  owners_.push_back(ShadowOwner{task_id, std::string(label)});
  Assign(FirstGranule(addr), EndGranule(addr, len), ShadowState::kOwned,
         static_cast<uint32_t>(owners_.size() - 1));
}

void ShadowMemory::Release(const void* addr, size_t len, std::optional<uint64_t> only_task) {
  if (len == 0) return;
  const uint64_t first = FirstGranule(addr);
  const uint64_t end = EndGranule(addr, len);
  SplitAt(first);
  SplitAt(end);
  for (auto it = map_.lower_bound(first); it != map_.end() && it->first < end; ++it) {
    if (it->second.state != ShadowState::kOwned) continue;
    if (only_task && owners_[it->second.owner].task_id != *only_task) continue;
    it->second.state = ShadowState::kReleased;
  }
}

void ShadowMemory::Fence(const void* addr, size_t len, uint64_t task_id, std::string_view why) {
  if (len == 0) return;
  owners_.push_back(ShadowOwner{task_id, std::string(why)});
  Assign(FirstGranule(addr), EndGranule(addr, len), ShadowState::kFenced,
         static_cast<uint32_t>(owners_.size() - 1));
}

void ShadowMemory::Forget(const void* addr, size_t len) {
  if (len == 0) return;
  const uint64_t first = FirstGranule(addr);
  const uint64_t end = EndGranule(addr, len);
  SplitAt(first);
  SplitAt(end);
  auto it = map_.lower_bound(first);
  while (it != map_.end() && it->first < end) it = map_.erase(it);
}

std::optional<std::string> ShadowMemory::Check(const void* addr, size_t len) const {
  if (map_.empty() || len == 0) return std::nullopt;
  const uint64_t first = FirstGranule(addr);
  const uint64_t end = EndGranule(addr, len);
  auto it = map_.upper_bound(first);
  if (it != map_.begin()) --it;
  for (; it != map_.end() && it->first < end; ++it) {
    if (it->second.end_granule <= first) continue;
    if (it->second.state == ShadowState::kOwned) continue;
    const ShadowOwner& o = owners_[it->second.owner];
    const uint64_t g = it->first > first ? it->first : first;
    return absl::StrFormat("DMA touched %s range of task %u (%s) at +%u bytes (addr 0x%x)",
                           it->second.state == ShadowState::kReleased ? "released" : "fenced",
                           o.task_id, o.label, g - first, g * kShadowGranuleBytes);
  }
  return std::nullopt;
}

std::optional<ShadowState> ShadowMemory::StateAt(const void* addr) const {
  const uint64_t g = FirstGranule(addr);
  auto it = map_.upper_bound(g);
  if (it == map_.begin()) return std::nullopt;
  --it;
  if (it->second.end_granule <= g) return std::nullopt;
  return it->second.state;
}

namespace {

// The hash of word `word` of the task whose seed is `seed`: the splitmix64
// finalizer of seed + (word + 1) * golden ratio (two multiplies per 8
// bytes, independent across words; FNV-1a per word cost 8 dependent
// multiplies and was the simulator's largest single cost).
inline uint64_t WordHash(uint64_t seed, uint64_t word) {
  uint64_t z = seed + (word + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t TaskSeed(uint64_t task_id) {
  return base::Fnv1a64UpdateU64(base::kFnv1a64Offset, task_id);
}

// Walks `n` bytes from offset0 word by word (one hash per 8 bytes):
// `whole(i, hash)` handles the 8 bytes at i, which start a word (byte b of
// the word is bits 8b..8b+7 of its hash, the little-endian layout of the
// hash); `part(i, byte)` one byte of a partial word. Either returns false
// to stop; returns the index of the first byte of the unit it stopped at,
// or n.
template <typename Whole, typename Part>
size_t WalkAttributable(size_t n, uint64_t task_id, uint64_t offset0, Whole whole, Part part) {
  static_assert(std::endian::native == std::endian::little);
  const uint64_t seed = TaskSeed(task_id);
  size_t i = 0;
  while (i < n) {
    const uint64_t off = offset0 + i;
    const uint64_t h = WordHash(seed, off / 8);
    if (off % 8 == 0 && n - i >= 8) {
      if (!whole(i, h)) return i;
      i += 8;
      continue;
    }
    for (uint64_t b = off % 8; b < 8 && i < n; ++b, ++i)
      if (!part(i, static_cast<uint8_t>(h >> (8 * b)))) return i;
  }
  return n;
}

}  // namespace

uint8_t AttributableByte(uint64_t task_id, uint64_t offset) {
  return static_cast<uint8_t>(WordHash(TaskSeed(task_id), offset / 8) >> (8 * (offset % 8)));
}

void FillAttributable(std::span<uint8_t> bytes, uint64_t task_id, uint64_t offset0) {
  (void)WalkAttributable(
      bytes.size(), task_id, offset0,
      [&](size_t i, uint64_t h) {
        std::memcpy(bytes.data() + i, &h, 8);
        return true;
      },
      [&](size_t i, uint8_t v) {
        bytes[i] = v;
        return true;
      });
}

size_t FirstNotAttributable(std::span<const uint8_t> bytes, uint64_t task_id, uint64_t offset0) {
  size_t bad = bytes.size();
  const size_t stop = WalkAttributable(
      bytes.size(), task_id, offset0,
      [&](size_t i, uint64_t h) {
        uint64_t got;
        std::memcpy(&got, bytes.data() + i, 8);
        if (got == h) return true;
        // The first differing byte: the lowest set byte of got ^ h.
        bad = i + static_cast<size_t>(std::countr_zero(got ^ h) / 8);
        return false;
      },
      [&](size_t i, uint8_t v) { return bytes[i] == v; });
  return bad != bytes.size() ? bad : stop;
}

}  // namespace ferry::sim
