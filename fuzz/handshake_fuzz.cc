// fuzz/handshake_fuzz.cc: libFuzzer target for the handshake decoder (C8).
//
// Build: meson setup -Dfuzzing=true (clang); run e.g.
//   build/fuzz/handshake_fuzz fuzz/corpus/handshake -max_total_time=60
// The same body runs as a GTest over fuzz/corpus/handshake in every build.
#include "fuzz/handshake_fuzz.h"

#include "absl/types/span.h"
#include "base/check.h"
#include "engine/handshake.h"

namespace ferry::fuzz {

bool HandshakeFuzzOne(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> in(data, size);
  auto decoded = engine::DecodeHandshake(in);
  if (!decoded.ok()) {
    FERRY_CHECK(!decoded.status().message().empty());  // every rejection says why
    return false;
  }
  FERRY_CHECK(engine::ValidateHandshake(*decoded).ok());
  auto encoded = engine::EncodeHandshake(*decoded);
  FERRY_CHECK(encoded.ok());
  FERRY_CHECK(*encoded == std::vector<uint8_t>(in.begin(), in.end()));  // canonical
  auto again = engine::DecodeHandshake(*encoded);
  FERRY_CHECK(again.ok());
  FERRY_CHECK(*again == *decoded);
  return true;
}

}  // namespace ferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ferry::fuzz::HandshakeFuzzOne(data, size);
  return 0;
}
