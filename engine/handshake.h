// engine/handshake.h: the REQ/REP/RTU/STALE/ERROR handshake messages and
// their wire codec (docs/design.md section 4, "Identity and handshake"; C8).
//
// Wire format, version 2. Every integer is little-endian, written byte by
// byte (never memcpy of a struct), so the encoding is the same on every host:
//
//   u32  magic            0x4B534846 ("FHSK" in memory order)
//   u16  version          kHandshakeVersion
//   u8   type             1 REQ, 2 REP, 3 RTU, 4 STALE, 5 ERROR,
//                         6 WINREQ, 7 WIN (memory windows, below)
//   u8   flags            0 (anything else is rejected)
//   u64  incarnation      sender's process incarnation, != 0
//   u64  generation       sender's endpoint generation for this key
//                         (!= 0 for REQ, REP, RTU)
//   u64  echo_incarnation the incarnation of the message answered; in a
//                         REQ, the incarnation of the target as its
//                         sender knows it (from the segment descriptor;
//                         0 = unknown): a process refuses a REQ naming
//                         another incarnation than its own with ERROR
//                         target_restarted (C6). Before this rule a REQ
//                         had to carry 0 there, and a decoder of that
//                         time rejects the new REQs ("non-zero echo"):
//                         the two do not interoperate (no release had
//                         shipped; the version stayed 1)
//   u64  echo_generation  the generation of the message answered
//                         (0 in a REQ, != 0 otherwise; echo_incarnation
//                         != 0 in every answer)
//   str  src_nic_path     sender's "host:port@nic" (1..kNicPathBytesMax)
//   str  dst_nic          receiver's NIC name (1..kNicNameBytesMax)
//   u8   qp_count         REQ/REP: 1..kHandshakeQpsMax; others: 0
//   qp_count x { u32 qpn (24 bit, != 0, distinct), u32 start_psn (24 bit) }
//   REQ/REP only:  u8[16] gid, u16 lid, u8 mtu (hal::Mtu, 1..5),
//                  u8 rd_atomic (1..255: READs the sender's QPs accept in
//                  flight, their max_dest_rd_atomic; the receiver issues
//                  at most that many per QP). Version 1 had no rd_atomic
//                  and every QP allowed one READ in flight; the two
//                  versions do not interoperate (each refuses the other's
//                  version with a clear error)
//   ERROR only:    u16 code (absl::StatusCode, 1..16), str message
//                  (0..kErrorMessageBytesMax)
//   WINREQ only:   u64 window (the range's window id from the descriptor,
//                  != 0): "bind that range's windows on the QPs of the
//                  endpoint this answers" (generation = the sender's
//                  endpoint, echo = the receiver's)
//   WIN only:      u64 window (!= 0), u8 status (0 bound, 1 refused, 2 no
//                  such endpoint), u8 rkey count (bound: one per QP of the
//                  endpoint, in QP order, 1..kHandshakeQpsMax, each != 0;
//                  otherwise 0),
//                  count x u32 rkey; sent only after every bind of the
//                  windows completed (docs/security.md section 6)
//   str = u16 length + bytes; names are printable ASCII without spaces,
//   the error message printable ASCII.
//
// The receiver's endpoint key is (dst_nic, src_nic_path).
//
// What must stay true:
// - DecodeHandshake is strict and total: any input (truncated, oversized,
//   trailing bytes, wrong magic/version/type/flags, out-of-range field,
//   duplicate QPN, hostile lengths) gives a clear error and no message;
//   it allocates at most what the bounds allow and never reads out of bounds.
// - EncodeHandshake refuses a message DecodeHandshake would reject, and
//   DecodeHandshake(EncodeHandshake(m)) == m for every valid m.
// - kHandshakeBytesMax <= hal::kMaxMessageBytes (static_assert).
//
// Thread safety: pure functions on values.
#ifndef FERRY_ENGINE_HANDSHAKE_H_
#define FERRY_ENGINE_HANDSHAKE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "hal/control_net.h"
#include "hal/types.h"

namespace ferry::engine {

inline constexpr uint32_t kHandshakeMagic = 0x4B534846u;
inline constexpr uint16_t kHandshakeVersion = 2;
inline constexpr uint32_t kHandshakeQpsMax = 64;  // == kQpsPerEndpointMax
inline constexpr size_t kNicPathBytesMax = 255;
inline constexpr size_t kNicNameBytesMax = 64;
// A NIC name a handshake can carry (dst_nic): 1..kNicNameBytesMax bytes of
// printable ASCII without space. A descriptor naming another is refused;
// the engine does not bring up a local device named otherwise.
inline bool NicNameCarriable(std::string_view name) {
  if (name.empty() || name.size() > kNicNameBytesMax) return false;
  for (char c : name)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}
inline constexpr size_t kErrorMessageBytesMax = 256;
inline constexpr uint32_t kPsnMask = 0xffffffu;  // PSNs and QPNs are 24 bit

inline constexpr size_t kHandshakeHeaderBytes = 4 + 2 + 1 + 1 + 8 * 4;
inline constexpr size_t kHandshakeBytesMax = kHandshakeHeaderBytes + (2 + kNicPathBytesMax) +
                                             (2 + kNicNameBytesMax) + 1 + kHandshakeQpsMax * 8 +
                                             (16 + 2 + 1) + (2 + 2 + kErrorMessageBytesMax) +
                                             (8 + 1 + 1 + kHandshakeQpsMax * 4);
static_assert(kHandshakeBytesMax <= hal::kMaxMessageBytes);

enum class HandshakeType : uint8_t {
  kReq = 1,
  kRep = 2,
  kRtu = 3,
  kStale = 4,
  kError = 5,
  kWinReq = 6,
  kWin = 7,
};
inline constexpr uint8_t kHandshakeTypeMax = 7;
// kNoEndpoint: the receiver holds no endpoint of that pairing (it
// retired it): the sender's endpoint is dead too and retires.
enum class WindowStatus : uint8_t { kBound = 0, kRefused = 1, kNoEndpoint = 2 };
std::string_view HandshakeTypeName(HandshakeType t);

struct HandshakeQp {
  uint32_t qpn = 0;
  uint32_t start_psn = 0;
  friend bool operator==(const HandshakeQp&, const HandshakeQp&) = default;
};

struct HandshakeMessage {
  HandshakeType type = HandshakeType::kReq;
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  uint64_t echo_incarnation = 0;
  uint64_t echo_generation = 0;
  std::string src_nic_path;
  std::string dst_nic;
  std::vector<HandshakeQp> qps;                         // REQ/REP only
  hal::Gid gid;                                         // REQ/REP only
  uint16_t lid = 0;                                     // REQ/REP only
  hal::Mtu mtu = hal::Mtu::k1024;                       // REQ/REP only
  uint8_t rd_atomic = 1;                                // REQ/REP only (!= 0)
  absl::StatusCode error_code = absl::StatusCode::kOk;  // ERROR only (!= kOk)
  std::string error_message;                            // ERROR only
  uint64_t window = 0;                                  // WINREQ/WIN only (!= 0)
  WindowStatus window_status = WindowStatus::kBound;    // WIN only
  std::vector<uint32_t> window_rkeys;                   // WIN only: one per QP when bound

  friend bool operator==(const HandshakeMessage&, const HandshakeMessage&) = default;
};

// The semantic rules of the file comment on a decoded or to-be-sent message.
absl::Status ValidateHandshake(const HandshakeMessage& m);
// ValidateHandshake's part for the window fields (WINREQ, WIN; none elsewhere).
absl::Status ValidateWindowFields(const HandshakeMessage& m);

// kInvalidArgument (naming the rule) for a message that breaks a rule.
absl::StatusOr<std::vector<uint8_t>> EncodeHandshake(const HandshakeMessage& m);

// kInvalidArgument for malformed input (the message names the field and the
// offset), kUnimplemented for another protocol version.
absl::StatusOr<HandshakeMessage> DecodeHandshake(absl::Span<const uint8_t> bytes);

// The QPN list of a message, in order.
std::vector<uint32_t> QpnsOf(const HandshakeMessage& m);

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_HANDSHAKE_H_
