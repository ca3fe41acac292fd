// engine/auth/hmac_sha256.cc: HMAC-SHA-256 over OpenSSL libcrypto (see .h).
#include "engine/auth/hmac_sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "base/check.h"

namespace ferry::engine::auth {

Tag HmacSha256(absl::Span<const uint8_t> key, absl::Span<const uint8_t> data) {
  Tag out{};
  unsigned int len = 0;
  static const uint8_t kEmpty = 0;  // HMAC() wants a non-null pointer
  const uint8_t* d = data.empty() ? &kEmpty : data.data();
  const uint8_t* k = key.empty() ? &kEmpty : key.data();
  const unsigned char* r =
      HMAC(EVP_sha256(), k, static_cast<int>(key.size()), d, data.size(), out.data(), &len);
  FERRY_CHECK(r != nullptr);
  FERRY_CHECK_EQ(len, kTagBytes);
  return out;
}

bool TagsEqual(const Tag& a, const Tag& b) {
  return CRYPTO_memcmp(a.data(), b.data(), kTagBytes) == 0;
}

}  // namespace ferry::engine::auth
