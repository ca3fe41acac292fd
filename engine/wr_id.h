// engine/wr_id.h: the 64-bit work-request id: (slot, generation).
//
// Owns: the encoding of a WR id. A slot is an index into an owner's slice
// slot table; its generation is bumped every time the slot is armed for a
// new post (a new slice attempt or a new slice in a reused slot). A CQE whose
// id's generation differs from the slot's current one is stale (a late CQE
// of an earlier attempt, or of a slice that was freed) and is dropped, never
// applied to another slice (docs/design.md section 4; the pointer-as-wr_id
// aliasing of tent-internals 2.6 is the bug this prevents).
//
// What must stay true: Encode/Decode are exact inverses; generation 0 is
// never armed, so a zero wr_id never matches a slot.
//
// Thread safety: pure values and functions.
#ifndef FERRY_ENGINE_WR_ID_H_
#define FERRY_ENGINE_WR_ID_H_

#include <cstdint>

namespace ferry::engine {

struct WrId {
  uint32_t slot = 0;
  uint32_t generation = 0;  // 0 = never armed
  friend constexpr bool operator==(WrId, WrId) = default;
};

constexpr uint64_t EncodeWrId(WrId id) {
  return (uint64_t{id.slot} << 32) | uint64_t{id.generation};
}

constexpr WrId DecodeWrId(uint64_t raw) {
  return WrId{static_cast<uint32_t>(raw >> 32), static_cast<uint32_t>(raw & 0xffffffffu)};
}

// The generation after `g`, skipping 0 on wrap-around.
constexpr uint32_t NextGeneration(uint32_t g) { return g == UINT32_MAX ? 1 : g + 1; }

// True when a CQE carrying `raw` belongs to the attempt currently armed in
// slot `slot` with generation `current_generation`.
constexpr bool WrIdMatches(uint64_t raw, uint32_t slot, uint32_t current_generation) {
  const WrId id = DecodeWrId(raw);
  return current_generation != 0 && id.slot == slot && id.generation == current_generation;
}

static_assert(DecodeWrId(EncodeWrId(WrId{7, 9})) == WrId{7, 9});
static_assert(NextGeneration(UINT32_MAX) == 1);
static_assert(!WrIdMatches(0, 0, 0));

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_WR_ID_H_
