// engine/descriptor_wire.h: the segment-descriptor fetch messages
// (DESC_REQ, DESC_REP) the listener exchanges over hal::ControlNet.
//
// Owns: their wire codec. Handshake messages (REQ/REP/RTU/STALE/ERROR) are
// engine/handshake.h; the two codecs start with different magics, so the
// listener tells them apart by the first four bytes (IsDescriptorMessage).
//
// Wire format, little-endian, byte by byte:
//   u32 magic 0x43534446 ("FDSC"), u16 version 3, u8 type (1 REQ, 2 REP,
//   3 REFUSED), u64 token, then for REP only: str address, u64
//   incarnation, u64 version, u16 device count (<= kDescDevicesMax) x {str
//   name, u8[16] gid, u16 lid}, u32 buffer count (<= kDescBuffersMax) x
//   {u64 addr, u64 length, u8 access (RemoteAccess: 1 read, 2 write, 3
//   both), u16 rkey count (<= kDescDevicesMax) x u32 rkey, u64 window
//   (the range's window id, 0 = not revocable), u64 window devices (bit i:
//   device i reaches it through memory windows only; 0 exactly when window
//   is 0, no bit past the device count)}; for REFUSED only: str reason
//   (the listener offers this peer nothing, docs/security.md). str = u16
//   length (<= kDescStringBytesMax) + bytes. Versions 1 (no access byte,
//   no REFUSED) and 2 (no window fields) are not accepted: they cannot say
//   a range is read-only, or revocable.
//
// What must stay true: Decode is strict and total (truncated, oversized,
// trailing bytes, wrong magic/version/type: kInvalidArgument, never a
// crash, allocation bounded by the limits); Decode(Encode(m)) == m.
//
// Thread safety: pure functions on values.
#ifndef FERRY_ENGINE_DESCRIPTOR_WIRE_H_
#define FERRY_ENGINE_DESCRIPTOR_WIRE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/types.h"

namespace ferry::engine {

inline constexpr uint32_t kDescMagic = 0x43534446u;
inline constexpr uint16_t kDescVersion = 3;
inline constexpr size_t kDescStringBytesMax = 256;
inline constexpr size_t kDescDevicesMax = 64;
inline constexpr size_t kDescBuffersMax = 4096;

enum class DescType : uint8_t { kReq = 1, kRep = 2, kRefused = 3 };

struct DescMessage {
  DescType type = DescType::kReq;
  uint64_t token = 0;            // the requester's open token
  SegmentDescriptor descriptor;  // REP only
  std::string reason;            // REFUSED only
};

// True when `bytes` starts with the descriptor magic.
bool IsDescriptorMessage(absl::Span<const uint8_t> bytes);
std::vector<uint8_t> EncodeDesc(const DescMessage& m);
absl::StatusOr<DescMessage> DecodeDesc(absl::Span<const uint8_t> bytes);

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_DESCRIPTOR_WIRE_H_
