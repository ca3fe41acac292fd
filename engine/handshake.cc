// engine/handshake.cc: the handshake codec (see handshake.h).
//
// What must stay true: the Reader never reads past its span (every read
// checks the remaining length first); every length field is checked against
// its bound before anything is allocated; the decoded message passes
// ValidateHandshake before it is returned.
#include "engine/handshake.h"

#include <algorithm>
#include <optional>

#include "absl/container/btree_set.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/status_macros.h"

namespace ferry::engine {
namespace {

bool HasBody(HandshakeType t) { return t == HandshakeType::kReq || t == HandshakeType::kRep; }
bool IsWindow(HandshakeType t) { return t == HandshakeType::kWinReq || t == HandshakeType::kWin; }

bool NameCharOk(char c) { return c >= 0x21 && c <= 0x7e; }
bool TextCharOk(char c) { return c >= 0x20 && c <= 0x7e; }

absl::Status CheckString(std::string_view field, std::string_view s, size_t min, size_t max,
                         bool (*char_ok)(char)) {
  if (s.size() < min || s.size() > max)
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake: %s has %d bytes, want %d..%d", field, s.size(), min, max));
  for (size_t i = 0; i < s.size(); ++i) {
    if (!char_ok(s[i]))
      return absl::InvalidArgumentError(
          absl::StrFormat("handshake: %s byte %d (0x%02x) not allowed", field, i,
                          static_cast<unsigned char>(s[i])));
  }
  return absl::OkStatus();
}

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(v); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Str(std::string_view s) {
    FERRY_CHECK_LE(s.size(), size_t{UINT16_MAX});
    U16(static_cast<uint16_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(absl::Span<const uint8_t> in) : in_(in) {}
  size_t offset() const { return pos_; }
  size_t remaining() const { return in_.size() - pos_; }

  absl::StatusOr<uint64_t> Le(std::string_view field, int n) {
    if (remaining() < static_cast<size_t>(n)) return Truncated(field, n);
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{in_[pos_ + i]} << (8 * i);
    pos_ += n;
    return v;
  }
  absl::StatusOr<uint8_t> U8(std::string_view f) {
    FERRY_ASSIGN_OR_RETURN(uint64_t v, Le(f, 1));
    return static_cast<uint8_t>(v);
  }
  absl::StatusOr<uint16_t> U16(std::string_view f) {
    FERRY_ASSIGN_OR_RETURN(uint64_t v, Le(f, 2));
    return static_cast<uint16_t>(v);
  }
  absl::StatusOr<uint32_t> U32(std::string_view f) {
    FERRY_ASSIGN_OR_RETURN(uint64_t v, Le(f, 4));
    return static_cast<uint32_t>(v);
  }
  absl::StatusOr<uint64_t> U64(std::string_view f) { return Le(f, 8); }
  // A u16-length string of at most `max` bytes; the bound is checked before
  // anything is copied.
  absl::StatusOr<std::string> Str(std::string_view field, size_t max) {
    FERRY_ASSIGN_OR_RETURN(uint16_t len, U16(field));
    if (len > max)
      return absl::InvalidArgumentError(absl::StrFormat(
          "handshake: %s length %d at offset %d exceeds %d", field, len, pos_ - 2, max));
    if (remaining() < len) return Truncated(field, len);
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), len);
    pos_ += len;
    return s;
  }
  absl::Status Bytes(std::string_view field, absl::Span<uint8_t> out) {
    if (remaining() < out.size()) return Truncated(field, static_cast<int>(out.size()));
    std::copy_n(in_.begin() + static_cast<ptrdiff_t>(pos_), out.size(), out.begin());
    pos_ += out.size();
    return absl::OkStatus();
  }

 private:
  absl::Status Truncated(std::string_view field, size_t want) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake: truncated at offset %d reading %s (%d bytes, %d left)", pos_,
                        field, want, remaining()));
  }
  absl::Span<const uint8_t> in_;
  size_t pos_ = 0;
};

// The window fields of a WINREQ or WIN (none for the other types).
absl::Status DecodeWindowFields(Reader& r, HandshakeMessage& m) {
  if (!IsWindow(m.type)) return absl::OkStatus();
  FERRY_ASSIGN_OR_RETURN(m.window, r.U64("window"));
  if (m.type != HandshakeType::kWin) return absl::OkStatus();
  FERRY_ASSIGN_OR_RETURN(uint8_t st, r.U8("window_status"));
  if (st > 2)
    return absl::InvalidArgumentError(absl::StrFormat("handshake: WIN status %d not 0..2", st));
  m.window_status = static_cast<WindowStatus>(st);
  FERRY_ASSIGN_OR_RETURN(uint8_t n, r.U8("window_rkey_count"));
  if (n > kHandshakeQpsMax)
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake: WIN rkey count %d exceeds %d", n, kHandshakeQpsMax));
  if (r.remaining() < size_t{n} * 4)
    return absl::InvalidArgumentError(absl::StrFormat(
        "handshake: truncated WIN rkeys (%d rkeys, %d bytes left)", n, r.remaining()));
  m.window_rkeys.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    FERRY_ASSIGN_OR_RETURN(uint32_t k, r.U32("window_rkey"));
    m.window_rkeys.push_back(k);
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view HandshakeTypeName(HandshakeType t) {
  switch (t) {
    case HandshakeType::kReq:
      return "REQ";
    case HandshakeType::kRep:
      return "REP";
    case HandshakeType::kRtu:
      return "RTU";
    case HandshakeType::kStale:
      return "STALE";
    case HandshakeType::kError:
      return "ERROR";
    case HandshakeType::kWinReq:
      return "WINREQ";
    case HandshakeType::kWin:
      return "WIN";
  }
  return "?";
}

std::vector<uint32_t> QpnsOf(const HandshakeMessage& m) {
  std::vector<uint32_t> out;
  out.reserve(m.qps.size());
  for (const HandshakeQp& q : m.qps) out.push_back(q.qpn);
  return out;
}

absl::Status ValidateHandshake(const HandshakeMessage& m) {
  const auto type = static_cast<uint8_t>(m.type);
  if (type < 1 || type > kHandshakeTypeMax)
    return absl::InvalidArgumentError(absl::StrFormat("handshake: unknown type %d", type));
  if (m.incarnation == 0) return absl::InvalidArgumentError("handshake: incarnation is 0");
  const bool needs_generation = m.type == HandshakeType::kReq || m.type == HandshakeType::kRep ||
                                m.type == HandshakeType::kRtu || IsWindow(m.type);
  if (needs_generation && m.generation == 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake: %s with generation 0", HandshakeTypeName(m.type)));
  if (m.type == HandshakeType::kReq) {
    // echo_incarnation names the target (0 = unknown): any value is valid.
    if (m.echo_generation != 0)
      return absl::InvalidArgumentError("handshake: REQ with a non-zero echo_generation");
  } else if (m.echo_incarnation == 0 || m.echo_generation == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "handshake: %s without the echo of what it answers", HandshakeTypeName(m.type)));
  }
  FERRY_RETURN_IF_ERROR(
      CheckString("src_nic_path", m.src_nic_path, 1, kNicPathBytesMax, NameCharOk));
  FERRY_RETURN_IF_ERROR(CheckString("dst_nic", m.dst_nic, 1, kNicNameBytesMax, NameCharOk));
  if (HasBody(m.type)) {
    if (m.qps.empty() || m.qps.size() > kHandshakeQpsMax)
      return absl::InvalidArgumentError(absl::StrFormat("handshake: %s lists %d QPs, want 1..%d",
                                                        HandshakeTypeName(m.type), m.qps.size(),
                                                        kHandshakeQpsMax));
    absl::btree_set<uint32_t> seen;
    for (const HandshakeQp& q : m.qps) {
      if (q.qpn == 0 || q.qpn > kPsnMask)
        return absl::InvalidArgumentError(
            absl::StrFormat("handshake: QPN %d outside 1..0xffffff", q.qpn));
      if (q.start_psn > kPsnMask)
        return absl::InvalidArgumentError(
            absl::StrFormat("handshake: start PSN %d exceeds 24 bits", q.start_psn));
      if (!seen.insert(q.qpn).second)
        return absl::InvalidArgumentError(absl::StrFormat("handshake: QPN %d listed twice", q.qpn));
    }
    const auto mtu = static_cast<uint8_t>(m.mtu);
    if (mtu < 1 || mtu > 5)
      return absl::InvalidArgumentError(absl::StrFormat("handshake: MTU code %d not in 1..5", mtu));
    if (m.rd_atomic == 0)
      return absl::InvalidArgumentError("handshake: rd_atomic 0 (a QP must accept one READ)");
  } else {
    if (!m.qps.empty())
      return absl::InvalidArgumentError(
          absl::StrFormat("handshake: %s must not list QPs", HandshakeTypeName(m.type)));
    if (m.gid != hal::Gid{} || m.lid != 0 || m.mtu != hal::Mtu::k1024 || m.rd_atomic != 1)
      return absl::InvalidArgumentError(absl::StrFormat(
          "handshake: %s must not carry GID/LID/MTU/rd_atomic", HandshakeTypeName(m.type)));
  }
  if (m.type == HandshakeType::kError) {
    const int code = static_cast<int>(m.error_code);
    if (code < 1 || code > 16)
      return absl::InvalidArgumentError(
          absl::StrFormat("handshake: ERROR code %d not in 1..16", code));
    FERRY_RETURN_IF_ERROR(
        CheckString("error_message", m.error_message, 0, kErrorMessageBytesMax, TextCharOk));
  } else if (m.error_code != absl::StatusCode::kOk || !m.error_message.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake: %s must not carry an error", HandshakeTypeName(m.type)));
  }
  return ValidateWindowFields(m);
}

absl::Status ValidateWindowFields(const HandshakeMessage& m) {
  if (!IsWindow(m.type)) {
    if (m.window != 0 || m.window_status != WindowStatus::kBound || !m.window_rkeys.empty())
      return absl::InvalidArgumentError(
          absl::StrFormat("handshake: %s must not carry window fields", HandshakeTypeName(m.type)));
    return absl::OkStatus();
  }
  if (m.window == 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake: %s with window 0", HandshakeTypeName(m.type)));
  if (m.type == HandshakeType::kWinReq) {
    if (m.window_status != WindowStatus::kBound || !m.window_rkeys.empty())
      return absl::InvalidArgumentError("handshake: WINREQ must not carry a status or rkeys");
    return absl::OkStatus();
  }
  const auto st = static_cast<uint8_t>(m.window_status);
  if (st > 2)
    return absl::InvalidArgumentError(absl::StrFormat("handshake: WIN status %d not 0..2", st));
  if (m.window_status != WindowStatus::kBound) {
    if (!m.window_rkeys.empty())
      return absl::InvalidArgumentError("handshake: a refused WIN must not list rkeys");
    return absl::OkStatus();
  }
  if (m.window_rkeys.empty() || m.window_rkeys.size() > kHandshakeQpsMax)
    return absl::InvalidArgumentError(absl::StrFormat("handshake: WIN lists %d rkeys, want 1..%d",
                                                      m.window_rkeys.size(), kHandshakeQpsMax));
  for (uint32_t k : m.window_rkeys)
    if (k == 0) return absl::InvalidArgumentError("handshake: WIN rkey 0");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> EncodeHandshake(const HandshakeMessage& m) {
  FERRY_RETURN_IF_ERROR(ValidateHandshake(m));
  Writer w;
  w.U32(kHandshakeMagic);
  w.U16(kHandshakeVersion);
  w.U8(static_cast<uint8_t>(m.type));
  w.U8(0);
  w.U64(m.incarnation);
  w.U64(m.generation);
  w.U64(m.echo_incarnation);
  w.U64(m.echo_generation);
  w.Str(m.src_nic_path);
  w.Str(m.dst_nic);
  w.U8(static_cast<uint8_t>(m.qps.size()));
  for (const HandshakeQp& q : m.qps) {
    w.U32(q.qpn);
    w.U32(q.start_psn);
  }
  if (HasBody(m.type)) {
    for (uint8_t b : m.gid.raw) w.U8(b);
    w.U16(m.lid);
    w.U8(static_cast<uint8_t>(m.mtu));
    w.U8(m.rd_atomic);
  }
  if (m.type == HandshakeType::kError) {
    w.U16(static_cast<uint16_t>(m.error_code));
    w.Str(m.error_message);
  }
  if (IsWindow(m.type)) w.U64(m.window);
  if (m.type == HandshakeType::kWin) {
    w.U8(static_cast<uint8_t>(m.window_status));
    w.U8(static_cast<uint8_t>(m.window_rkeys.size()));
    for (uint32_t k : m.window_rkeys) w.U32(k);
  }
  std::vector<uint8_t> out = w.Take();
  FERRY_CHECK_LE(out.size(), kHandshakeBytesMax);
  return out;
}

absl::StatusOr<HandshakeMessage> DecodeHandshake(absl::Span<const uint8_t> bytes) {
  if (bytes.size() > kHandshakeBytesMax)
    return absl::InvalidArgumentError(absl::StrFormat(
        "handshake: oversized message (%d bytes, at most %d)", bytes.size(), kHandshakeBytesMax));
  Reader r(bytes);
  FERRY_ASSIGN_OR_RETURN(uint32_t magic, r.U32("magic"));
  if (magic != kHandshakeMagic)
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake: bad magic 0x%08x (want 0x%08x)", magic, kHandshakeMagic));
  FERRY_ASSIGN_OR_RETURN(uint16_t version, r.U16("version"));
  if (version != kHandshakeVersion)
    return absl::UnimplementedError(
        absl::StrFormat("handshake: protocol version %d not supported (this engine speaks %d)",
                        version, kHandshakeVersion));
  FERRY_ASSIGN_OR_RETURN(uint8_t type, r.U8("type"));
  if (type < 1 || type > kHandshakeTypeMax)
    return absl::InvalidArgumentError(absl::StrFormat("handshake: unknown type %d", type));
  FERRY_ASSIGN_OR_RETURN(uint8_t flags, r.U8("flags"));
  if (flags != 0)
    return absl::InvalidArgumentError(absl::StrFormat("handshake: flags 0x%02x (want 0)", flags));

  HandshakeMessage m;
  m.type = static_cast<HandshakeType>(type);
  FERRY_ASSIGN_OR_RETURN(m.incarnation, r.U64("incarnation"));
  FERRY_ASSIGN_OR_RETURN(m.generation, r.U64("generation"));
  FERRY_ASSIGN_OR_RETURN(m.echo_incarnation, r.U64("echo_incarnation"));
  FERRY_ASSIGN_OR_RETURN(m.echo_generation, r.U64("echo_generation"));
  FERRY_ASSIGN_OR_RETURN(m.src_nic_path, r.Str("src_nic_path", kNicPathBytesMax));
  FERRY_ASSIGN_OR_RETURN(m.dst_nic, r.Str("dst_nic", kNicNameBytesMax));
  FERRY_ASSIGN_OR_RETURN(uint8_t qp_count, r.U8("qp_count"));
  if (qp_count > kHandshakeQpsMax)
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake: qp_count %d exceeds %d", qp_count, kHandshakeQpsMax));
  if (r.remaining() < size_t{qp_count} * 8)
    return absl::InvalidArgumentError(absl::StrFormat(
        "handshake: truncated QP list (%d QPs, %d bytes left)", qp_count, r.remaining()));
  m.qps.reserve(qp_count);
  for (uint32_t i = 0; i < qp_count; ++i) {
    HandshakeQp q;
    FERRY_ASSIGN_OR_RETURN(q.qpn, r.U32("qpn"));
    FERRY_ASSIGN_OR_RETURN(q.start_psn, r.U32("start_psn"));
    m.qps.push_back(q);
  }
  if (HasBody(m.type)) {
    FERRY_RETURN_IF_ERROR(r.Bytes("gid", absl::MakeSpan(m.gid.raw)));
    FERRY_ASSIGN_OR_RETURN(m.lid, r.U16("lid"));
    FERRY_ASSIGN_OR_RETURN(uint8_t mtu, r.U8("mtu"));
    if (mtu < 1 || mtu > 5)
      return absl::InvalidArgumentError(absl::StrFormat("handshake: MTU code %d not in 1..5", mtu));
    m.mtu = static_cast<hal::Mtu>(mtu);
    FERRY_ASSIGN_OR_RETURN(m.rd_atomic, r.U8("rd_atomic"));  // 0: ValidateHandshake below
  }
  if (m.type == HandshakeType::kError) {
    FERRY_ASSIGN_OR_RETURN(uint16_t code, r.U16("error_code"));
    if (code < 1 || code > 16)
      return absl::InvalidArgumentError(
          absl::StrFormat("handshake: ERROR code %d not in 1..16", code));
    m.error_code = static_cast<absl::StatusCode>(code);
    FERRY_ASSIGN_OR_RETURN(m.error_message, r.Str("error_message", kErrorMessageBytesMax));
  }
  FERRY_RETURN_IF_ERROR(DecodeWindowFields(r, m));
  if (r.remaining() != 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake: %d trailing bytes after offset %d", r.remaining(), r.offset()));
  FERRY_RETURN_IF_ERROR(ValidateHandshake(m));
  return m;
}

}  // namespace ferry::engine
