// tests/property/handshake_prop_test.cc: properties of the handshake codec
// (engine/handshake.h).
//
// Owns: a generator of arbitrary valid messages (every type, field bounds
// from the header's wire-format comment) and the properties: a valid message
// validates, encodes within kHandshakeBytesMax and decodes to itself;
// decoding arbitrary bytes, or a valid encoding with random damage (byte
// changes, truncation, extra bytes), never crashes and either fails cleanly
// (kInvalidArgument / kUnimplemented, never OK with garbage) or yields a
// valid message that re-encodes to exactly the input (decoding is
// canonical). What must stay true: generated strings honour the character
// sets (names 0x21..0x7e, error text 0x20..0x7e).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/handshake.h"

namespace ferry::engine {
namespace {

rc::Gen<std::string> GenString(char lo, char hi, size_t min, size_t max) {
  return rc::gen::mapcat(rc::gen::inRange<size_t>(min, max + 1), [lo, hi](size_t n) {
    return rc::gen::container<std::string>(n, rc::gen::inRange<char>(lo, char(hi + 1)));
  });
}

rc::Gen<uint64_t> NonZero64() {
  return rc::gen::oneOf(
      rc::gen::inRange<uint64_t>(1, 4),
      rc::gen::suchThat(rc::gen::arbitrary<uint64_t>(), [](uint64_t v) { return v != 0; }));
}

HandshakeMessage GenValidMessage() {
  HandshakeMessage m;
  m.type = *rc::gen::element(HandshakeType::kReq, HandshakeType::kRep, HandshakeType::kRtu,
                             HandshakeType::kStale, HandshakeType::kError);
  m.incarnation = *NonZero64();
  const bool needs_generation = m.type == HandshakeType::kReq || m.type == HandshakeType::kRep ||
                                m.type == HandshakeType::kRtu;
  m.generation = needs_generation ? *NonZero64() : *rc::gen::arbitrary<uint64_t>();
  if (m.type != HandshakeType::kReq) {
    m.echo_incarnation = *NonZero64();
    m.echo_generation = *NonZero64();
  } else {
    m.echo_incarnation = *rc::gen::arbitrary<uint64_t>();  // the target as known (0 = unknown)
  }
  m.src_nic_path = *GenString(0x21, 0x7e, 1, kNicPathBytesMax);
  m.dst_nic = *GenString(0x21, 0x7e, 1, kNicNameBytesMax);
  if (m.type == HandshakeType::kReq || m.type == HandshakeType::kRep) {
    const size_t n = *rc::gen::inRange<size_t>(1, kHandshakeQpsMax + 1);
    const auto qpns =
        *rc::gen::unique<std::vector<uint32_t>>(n, rc::gen::inRange<uint32_t>(1, kPsnMask + 1));
    for (uint32_t qpn : qpns)
      m.qps.push_back(HandshakeQp{qpn, *rc::gen::inRange<uint32_t>(0, kPsnMask + 1)});
    for (uint8_t& b : m.gid.raw) b = *rc::gen::arbitrary<uint8_t>();
    m.lid = *rc::gen::arbitrary<uint16_t>();
    m.mtu = static_cast<hal::Mtu>(*rc::gen::inRange<uint8_t>(1, 6));
    m.rd_atomic = *rc::gen::inRange<uint16_t>(1, 256);
  }
  if (m.type == HandshakeType::kError) {
    m.error_code = static_cast<absl::StatusCode>(*rc::gen::inRange<int>(1, 17));
    m.error_message = *GenString(0x20, 0x7e, 0, kErrorMessageBytesMax);
  }
  return m;
}

// Decoding `bytes` fails cleanly or is canonical.
void CheckDecodeIsCleanOrCanonical(const std::vector<uint8_t>& bytes) {
  const absl::StatusOr<HandshakeMessage> d = DecodeHandshake(bytes);
  if (!d.ok()) {
    RC_ASSERT(d.status().code() == absl::StatusCode::kInvalidArgument ||
              d.status().code() == absl::StatusCode::kUnimplemented);
    RC_ASSERT(!d.status().message().empty());
    RC_TAG("rejected");
    return;
  }
  RC_TAG("decoded");
  RC_ASSERT(ValidateHandshake(*d).ok());
  const absl::StatusOr<std::vector<uint8_t>> again = EncodeHandshake(*d);
  RC_ASSERT(again.ok());
  RC_ASSERT(*again == bytes);
}

RC_GTEST_PROP(HandshakeProp, ValidMessagesRoundTrip, ()) {
  const HandshakeMessage m = GenValidMessage();
  RC_ASSERT(ValidateHandshake(m).ok());
  const absl::StatusOr<std::vector<uint8_t>> bytes = EncodeHandshake(m);
  RC_ASSERT(bytes.ok());
  RC_ASSERT(bytes->size() >= kHandshakeHeaderBytes);
  RC_ASSERT(bytes->size() <= kHandshakeBytesMax);
  const absl::StatusOr<HandshakeMessage> back = DecodeHandshake(*bytes);
  RC_ASSERT(back.ok());
  RC_ASSERT(*back == m);
  RC_ASSERT(QpnsOf(*back) == QpnsOf(m));
  RC_TAG(HandshakeTypeName(m.type));
}

RC_GTEST_PROP(HandshakeProp, ArbitraryBytesAreRejectedOrCanonical,
              (const std::vector<uint8_t>& bytes)) {
  CheckDecodeIsCleanOrCanonical(bytes);
}

// Arbitrary bytes behind a correct magic and version, so the decoder gets
// past the header and into the fields.
RC_GTEST_PROP(HandshakeProp, ArbitraryBodiesAreRejectedOrCanonical,
              (const std::vector<uint8_t>& body)) {
  std::vector<uint8_t> bytes = {0x46, 0x48, 0x53, 0x4B, 0x01, 0x00};
  bytes.push_back(*rc::gen::inRange<uint8_t>(0, 7));  // type, mostly valid
  bytes.push_back(*rc::gen::element<uint8_t>(0, 0, 0, 1));
  bytes.insert(bytes.end(), body.begin(), body.end());
  CheckDecodeIsCleanOrCanonical(bytes);
}

RC_GTEST_PROP(HandshakeProp, DamagedEncodingsAreRejectedOrCanonical, ()) {
  const HandshakeMessage m = GenValidMessage();
  const absl::StatusOr<std::vector<uint8_t>> enc = EncodeHandshake(m);
  RC_ASSERT(enc.ok());
  std::vector<uint8_t> bytes = *enc;
  const int edits = *rc::gen::inRange(1, 4);
  for (int e = 0; e < edits; ++e) {
    switch (*rc::gen::inRange(0, 4)) {
      case 0:  // overwrite one byte
        if (!bytes.empty())
          bytes[*rc::gen::inRange<size_t>(0, bytes.size())] = *rc::gen::arbitrary<uint8_t>();
        break;
      case 1:  // truncate
        bytes.resize(*rc::gen::inRange<size_t>(0, bytes.size() + 1));
        break;
      case 2:  // trailing bytes
        bytes.push_back(*rc::gen::arbitrary<uint8_t>());
        break;
      case 3:  // flip one bit
        if (!bytes.empty())
          bytes[*rc::gen::inRange<size_t>(0, bytes.size())] ^=
              static_cast<uint8_t>(1u << *rc::gen::inRange(0, 8));
        break;
    }
  }
  CheckDecodeIsCleanOrCanonical(bytes);
}

}  // namespace
}  // namespace ferry::engine
