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

// A receive WR's id (notifications): bit 63 set, the QP's uid in bits
// 32-62 and the QP's receive sequence number in bits 0-31 (a CQE whose
// seq is not the QP's oldest posted receive is a stale duplicate, dropped
// like a send CQE of another generation). A send WR's slot stays below
// 2^31 (AllocSlot checks), so bit 63 tells the two apart: a flushed
// receive CQE carries its wr_id but no meaningful opcode.
inline constexpr uint64_t kRecvWrIdBit = uint64_t{1} << 63;
inline constexpr uint64_t kRecvQpUidMax = (uint64_t{1} << 31) - 1;
struct RecvWrId {
  uint64_t qp_uid = 0;
  uint32_t seq = 0;
  friend constexpr bool operator==(RecvWrId, RecvWrId) = default;
};
constexpr bool IsRecvWrId(uint64_t raw) { return (raw & kRecvWrIdBit) != 0; }
constexpr uint64_t EncodeRecvWrId(RecvWrId id) {
  return kRecvWrIdBit | ((id.qp_uid & kRecvQpUidMax) << 32) | uint64_t{id.seq};
}
constexpr RecvWrId DecodeRecvWrId(uint64_t raw) {
  return RecvWrId{(raw >> 32) & kRecvQpUidMax, static_cast<uint32_t>(raw & 0xffffffffu)};
}

static_assert(DecodeWrId(EncodeWrId(WrId{7, 9})) == WrId{7, 9});
static_assert(DecodeRecvWrId(EncodeRecvWrId(RecvWrId{kRecvQpUidMax, 5})) ==
              RecvWrId{kRecvQpUidMax, 5});
static_assert(IsRecvWrId(EncodeRecvWrId(RecvWrId{1, 0})) && !IsRecvWrId(EncodeWrId(WrId{7, 9})));
static_assert(NextGeneration(UINT32_MAX) == 1);
static_assert(!WrIdMatches(0, 0, 0));

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_WR_ID_H_
