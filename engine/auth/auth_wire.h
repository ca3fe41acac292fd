// engine/auth/auth_wire.h: the messages of the authenticated control channel
// (engine/auth/auth_net.h) and their codec (docs/security.md).
//
// Wire format, version 1, little-endian, byte by byte:
//   u32 magic 0x54554146 ("FAUT" in memory order), u16 version 1, u8 type
//   1 HELLO:     u8[32] client_nonce, str client_identity
//   2 CHALLENGE: u8[32] client_nonce, u8[32] server_nonce, u64 session (!= 0),
//                str server_identity, u8[32] server_proof
//   3 PROOF:     u64 session (!= 0), u8[32] client_proof
//   4 DATA:      u64 session (!= 0), u64 seq (!= 0), u32 length,
//                length bytes of payload (<= kAuthPayloadBytesMax), u8[32] tag
//   5 UNKNOWN:   u64 session (!= 0): "I hold no such session" (a hint,
//                unauthenticated: it only makes the sender authenticate again)
//   str = u16 length + bytes; an identity is 1..kIdentityBytesMax printable
//   ASCII bytes without space.
//
// What must stay true: DecodeAuth is strict and total (truncated, trailing
// bytes, wrong magic/version/type, zero session or seq, bad identity,
// hostile lengths: kInvalidArgument naming the field, never a crash or an
// allocation beyond the bounds); DecodeAuth(EncodeAuth(m)) == m for every
// valid m and EncodeAuth refuses an invalid one; the magic differs from the
// handshake's and the descriptor codec's, so a receiver tells them apart
// by the first four bytes.
//
// Thread safety: pure functions on values.
#ifndef FERRY_ENGINE_AUTH_AUTH_WIRE_H_
#define FERRY_ENGINE_AUTH_AUTH_WIRE_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/auth/hmac_sha256.h"
#include "hal/control_net.h"

namespace ferry::engine::auth {

inline constexpr uint32_t kAuthMagic = 0x54554146u;
inline constexpr uint16_t kAuthVersion = 1;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kIdentityBytesMax = 128;
inline constexpr size_t kAuthHeaderBytes = 4 + 2 + 1;
// DATA's bytes beside its payload: header, session, seq, length, tag.
inline constexpr size_t kDataOverheadBytes = kAuthHeaderBytes + 8 + 8 + 4 + kTagBytes;
inline constexpr size_t kAuthPayloadBytesMax = hal::kMaxMessageBytes - kDataOverheadBytes;

using Nonce = std::array<uint8_t, kNonceBytes>;

enum class AuthType : uint8_t { kHello = 1, kChallenge = 2, kProof = 3, kData = 4, kUnknown = 5 };
std::string_view AuthTypeName(AuthType t);

struct AuthMessage {
  AuthType type = AuthType::kHello;
  Nonce client_nonce{};          // HELLO, CHALLENGE
  Nonce server_nonce{};          // CHALLENGE
  uint64_t session = 0;          // CHALLENGE, PROOF, DATA, UNKNOWN
  std::string identity;          // HELLO: the client's; CHALLENGE: the server's
  Tag proof{};                   // CHALLENGE: server proof; PROOF: client proof
  uint64_t seq = 0;              // DATA
  std::vector<uint8_t> payload;  // DATA
  Tag tag{};                     // DATA
  friend bool operator==(const AuthMessage&, const AuthMessage&) = default;
};

// 1..kIdentityBytesMax printable ASCII bytes without space.
bool IdentityValid(std::string_view identity);
// True when `bytes` starts with the auth magic.
bool IsAuthMessage(absl::Span<const uint8_t> bytes);
absl::StatusOr<std::vector<uint8_t>> EncodeAuth(const AuthMessage& m);
absl::StatusOr<AuthMessage> DecodeAuth(absl::Span<const uint8_t> bytes);

}  // namespace ferry::engine::auth

#endif  // FERRY_ENGINE_AUTH_AUTH_WIRE_H_
