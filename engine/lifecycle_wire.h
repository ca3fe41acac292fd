// engine/lifecycle_wire.h: the control messages the lifecycle code sends
// over hal::ControlNet: handshake REQ/REP/RTU and segment-descriptor
// fetch (DESIGN.md section 4, "Identity and handshake").
//
// Interim codec owned by the lifecycle work: engine/handshake.* (the
// foundations codec, with the full C8 hostile-input tests) replaces the
// handshake part when it lands; the struct below names every field the
// lifecycle needs.
//
// Thread safety: pure functions on values.
// What must stay true: Decode rejects (kInvalidArgument, never a crash)
// anything truncated, oversized (more than kQpsPerEndpointMax QPNs, strings
// over 256 bytes), of another protocol version, or with trailing bytes;
// Decode(Encode(m)) == m.
#ifndef FERRY_ENGINE_LIFECYCLE_WIRE_H_
#define FERRY_ENGINE_LIFECYCLE_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/types.h"

namespace ferry::engine {

inline constexpr uint16_t kWireVersion = 1;

enum class WireType : uint8_t {
  kReq = 1,
  kRep = 2,
  kRtu = 3,
  kDescReq = 4,
  kDescRep = 5,
};

enum class WireStatus : uint8_t { kOk = 0, kStale = 1, kError = 2 };

struct WireMsg {
  WireType type = WireType::kReq;
  WireStatus status = WireStatus::kOk;
  uint64_t incarnation = 0;      // sender process
  uint32_t generation = 0;       // sender's endpoint generation for the key
  uint32_t echo_generation = 0;  // REP: the REQ's generation; RTU: the REP's
  std::string sender_nic;        // device name on the sender
  std::string target_nic;        // device name on the receiver
  std::vector<uint32_t> qpns;
  std::vector<uint32_t> psns;
  std::array<uint8_t, 16> gid{};
  uint16_t lid = 0;
  uint8_t mtu = 3;               // hal::Mtu value
  uint64_t token = 0;            // DESC_REQ/DESC_REP: the requester's open token
  SegmentDescriptor descriptor;  // DESC_REP only
  friend bool operator==(const WireMsg&, const WireMsg&) = default;
};

std::vector<uint8_t> EncodeWire(const WireMsg& m);
absl::StatusOr<WireMsg> DecodeWire(absl::Span<const uint8_t> bytes);

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_LIFECYCLE_WIRE_H_
