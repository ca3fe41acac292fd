// fuzz/handshake_fuzz.cc: libFuzzer target for the control-message decoders
// and the authenticating listener (C8; docs/security.md).
//
// Every input is (1) decoded as what its magic says, a handshake message
// (engine/handshake.h) or an auth message (engine/auth/auth_wire.h), and an
// accepted one must be canonical; and (2) fed to an AuthNet in
// kSharedSecret mode, as one message and then as a sequence of messages
// (u16 length + bytes each, up to kFuzzMessagesMax), as a party without
// the secret would send them. Whatever it sends, nothing may be delivered
// and no session may open: an HMAC-SHA-256 cannot be guessed.
//
// Build: meson setup -Dfuzzing=true (clang); run e.g.
//   build/fuzz/handshake_fuzz fuzz/corpus/handshake -max_total_time=60
// The same body runs as a GTest over fuzz/corpus/handshake in every build.
#include "fuzz/handshake_fuzz.h"

#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "base/check.h"
#include "engine/auth/auth_net.h"
#include "engine/auth/auth_wire.h"
#include "engine/handshake.h"

namespace ferry::fuzz {

namespace {

constexpr size_t kFuzzMessagesMax = 16;

// The listener's side of the network: an inbox the fuzzer fills, and the
// messages the AuthNet answers with, checked to be valid auth messages.
class InboxNet final : public hal::ControlNet {
 public:
  std::string LocalAddress() const override { return "target:1"; }
  absl::Status Send(std::string_view, absl::Span<const uint8_t> bytes) override {
    auto m = engine::auth::DecodeAuth(bytes);
    FERRY_CHECK(m.ok());  // it only ever says CHALLENGE or UNKNOWN
    FERRY_CHECK(m->type == engine::auth::AuthType::kChallenge ||
                m->type == engine::auth::AuthType::kUnknown);
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<hal::Message>> Poll(uint64_t) override {
    if (inbox.empty()) return std::optional<hal::Message>();
    hal::Message m = std::move(inbox.front());
    inbox.pop_front();
    return std::optional<hal::Message>(std::move(m));
  }
  std::deque<hal::Message> inbox;
};

class CounterEntropy final : public hal::Entropy {
 public:
  uint64_t Next64() override { return ++n_ * 0x9e3779b97f4a7c15ull; }

 private:
  uint64_t n_ = 0;
};

void Push(InboxNet& net, absl::Span<const uint8_t> bytes) {
  hal::Message m;
  m.from = "attacker:1";
  m.source_host = "attacker";
  m.bytes.assign(bytes.begin(), bytes.end());
  net.inbox.push_back(std::move(m));
}

void AuthListenerFuzz(absl::Span<const uint8_t> in) {
  InboxNet net;
  CounterEntropy entropy;
  AuthConfig cfg;
  cfg.mode = AuthConfig::Mode::kSharedSecret;
  cfg.identity = "target";
  cfg.secret = "a secret the fuzzer does not know, 32+ bytes";
  engine::auth::AuthNet auth(&net, cfg, &entropy, nullptr);
  Push(net, in);
  for (size_t off = 0, n = 0; n < kFuzzMessagesMax && in.size() - off >= 2; ++n) {
    const size_t len = in[off] | (size_t{in[off + 1]} << 8);
    off += 2;
    if (len > in.size() - off) break;
    Push(net, in.subspan(off, len));
    off += len;
  }
  for (size_t i = 0; i <= kFuzzMessagesMax && !net.inbox.empty(); ++i) {
    auto polled = auth.Poll(0);
    FERRY_CHECK(polled.ok());
    FERRY_CHECK(!polled->has_value());  // nothing unauthenticated is delivered
  }
  const AuthStats s = auth.stats();
  FERRY_CHECK_EQ(s.delivered, 0u);
  FERRY_CHECK_EQ(s.sessions_established, 0u);
}

bool AuthFuzzOne(absl::Span<const uint8_t> in) {
  auto decoded = engine::auth::DecodeAuth(in);
  if (!decoded.ok()) {
    FERRY_CHECK(!decoded.status().message().empty());
    return false;
  }
  auto encoded = engine::auth::EncodeAuth(*decoded);
  FERRY_CHECK(encoded.ok());
  FERRY_CHECK(*encoded == std::vector<uint8_t>(in.begin(), in.end()));  // canonical
  auto again = engine::auth::DecodeAuth(*encoded);
  FERRY_CHECK(again.ok() && *again == *decoded);
  return true;
}

}  // namespace

bool HandshakeFuzzOne(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> in(data, size);
  AuthListenerFuzz(in);
  if (engine::auth::IsAuthMessage(in)) return AuthFuzzOne(in);
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
