// engine/auth/auth_wire.cc: the auth message codec (see auth_wire.h).
#include "engine/auth/auth_wire.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/wire_bytes.h"

namespace ferry::engine::auth {

namespace {

absl::Status Bad(std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("auth message rejected: ", std::string(why)));
}

absl::Status Validate(const AuthMessage& m) {
  switch (m.type) {
    case AuthType::kHello:
      return IdentityValid(m.identity) ? absl::OkStatus() : Bad("identity");
    case AuthType::kChallenge:
      if (m.session == 0) return Bad("session 0");
      return IdentityValid(m.identity) ? absl::OkStatus() : Bad("identity");
    case AuthType::kProof:
    case AuthType::kUnknown:
      return m.session == 0 ? Bad("session 0") : absl::OkStatus();
    case AuthType::kData:
      if (m.session == 0) return Bad("session 0");
      if (m.seq == 0) return Bad("seq 0");
      return m.payload.size() <= kAuthPayloadBytesMax ? absl::OkStatus() : Bad("payload length");
  }
  return Bad("type");
}

void EncodeBody(const AuthMessage& m, WireWriter& w) {
  switch (m.type) {
    case AuthType::kHello:
      w.Bytes(m.client_nonce);
      w.Str(m.identity, kIdentityBytesMax);
      return;
    case AuthType::kChallenge:
      w.Bytes(m.client_nonce);
      w.Bytes(m.server_nonce);
      w.Le(m.session, 8);
      w.Str(m.identity, kIdentityBytesMax);
      w.Bytes(m.proof);
      return;
    case AuthType::kProof:
      w.Le(m.session, 8);
      w.Bytes(m.proof);
      return;
    case AuthType::kData:
      w.Le(m.session, 8);
      w.Le(m.seq, 8);
      w.Le(m.payload.size(), 4);
      w.Bytes(m.payload);
      w.Bytes(m.tag);
      return;
    case AuthType::kUnknown:
      w.Le(m.session, 8);
      return;
  }
}

void DecodeBody(WireReader& r, AuthMessage& m) {
  switch (m.type) {
    case AuthType::kHello:
      r.Bytes(absl::MakeSpan(m.client_nonce));
      m.identity = r.Str(kIdentityBytesMax);
      return;
    case AuthType::kChallenge:
      r.Bytes(absl::MakeSpan(m.client_nonce));
      r.Bytes(absl::MakeSpan(m.server_nonce));
      m.session = r.Le(8);
      m.identity = r.Str(kIdentityBytesMax);
      r.Bytes(absl::MakeSpan(m.proof));
      return;
    case AuthType::kProof:
      m.session = r.Le(8);
      r.Bytes(absl::MakeSpan(m.proof));
      return;
    case AuthType::kData: {
      m.session = r.Le(8);
      m.seq = r.Le(8);
      const uint64_t n = r.Le(4);
      // Checked against the bound and what is left before anything is
      // allocated from a length the peer chose.
      if (n > kAuthPayloadBytesMax || n > r.remaining()) {
        r.Take(r.remaining() + 1);  // latches !ok()
        return;
      }
      absl::Span<const uint8_t> p = r.Take(n);
      m.payload.assign(p.begin(), p.end());
      r.Bytes(absl::MakeSpan(m.tag));
      return;
    }
    case AuthType::kUnknown:
      m.session = r.Le(8);
      return;
  }
}

}  // namespace

std::string_view AuthTypeName(AuthType t) {
  switch (t) {
    case AuthType::kHello:
      return "HELLO";
    case AuthType::kChallenge:
      return "CHALLENGE";
    case AuthType::kProof:
      return "PROOF";
    case AuthType::kData:
      return "DATA";
    case AuthType::kUnknown:
      return "UNKNOWN";
  }
  return "?";
}

bool IdentityValid(std::string_view identity) {
  if (identity.empty() || identity.size() > kIdentityBytesMax) return false;
  for (char c : identity)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}

bool IsAuthMessage(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < 4) return false;
  WireReader r(bytes);
  return r.Le(4) == kAuthMagic;
}

absl::StatusOr<std::vector<uint8_t>> EncodeAuth(const AuthMessage& m) {
  if (absl::Status s = Validate(m); !s.ok()) return s;
  WireWriter w;
  w.Le(kAuthMagic, 4);
  w.Le(kAuthVersion, 2);
  w.Le(static_cast<uint8_t>(m.type), 1);
  EncodeBody(m, w);
  return w.Take();
}

absl::StatusOr<AuthMessage> DecodeAuth(absl::Span<const uint8_t> bytes) {
  WireReader r(bytes);
  if (r.Le(4) != kAuthMagic || !r.ok()) return Bad("magic");
  const uint64_t version = r.Le(2);
  if (!r.ok()) return Bad("truncated header");
  if (version != kAuthVersion) return Bad(absl::StrCat("version ", version));
  const uint64_t type = r.Le(1);
  if (!r.ok()) return Bad("truncated header");
  if (type < 1 || type > 5) return Bad(absl::StrCat("type ", type));
  AuthMessage m;
  m.type = static_cast<AuthType>(type);
  DecodeBody(r, m);
  if (!r.ok()) return Bad(absl::StrCat("truncated ", std::string(AuthTypeName(m.type))));
  if (!r.done()) return Bad("trailing bytes");
  if (absl::Status s = Validate(m); !s.ok()) return s;
  return m;
}

}  // namespace ferry::engine::auth
