// engine/auth/hmac_sha256.h: HMAC-SHA-256 and a constant-time compare, the
// only crypto Ferry's control-plane authentication needs.
//
// Owns: the one place that calls a crypto library (OpenSSL's libcrypto, the
// Debian package libssl-dev). Never hand-written: a MAC is only as good as
// its implementation, and libcrypto's is the one security reviews already
// accept (FIPS-validated builds exist).
//
// Thread safety: pure functions.
// What must stay true: HmacSha256 is deterministic (same key and data, same
// tag); TagsEqual takes time independent of where the tags differ.
#ifndef FERRY_ENGINE_AUTH_HMAC_SHA256_H_
#define FERRY_ENGINE_AUTH_HMAC_SHA256_H_

#include <array>
#include <cstdint>

#include "absl/types/span.h"

namespace ferry::engine::auth {

inline constexpr size_t kTagBytes = 32;
using Tag = std::array<uint8_t, kTagBytes>;

// HMAC-SHA-256(key, data). Aborts (FERRY_CHECK) only if libcrypto fails,
// which it does not for in-memory input.
Tag HmacSha256(absl::Span<const uint8_t> key, absl::Span<const uint8_t> data);

// Constant-time equality of two tags.
bool TagsEqual(const Tag& a, const Tag& b);

}  // namespace ferry::engine::auth

#endif  // FERRY_ENGINE_AUTH_HMAC_SHA256_H_
