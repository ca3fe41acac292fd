// engine/lifecycle_wire.cc: encoding of WireMsg (little-endian, length-
// prefixed, bounds-checked; see lifecycle_wire.h).
#include "engine/lifecycle_wire.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "ferry/config.h"

namespace ferry::engine {

namespace {
constexpr size_t kStringMax = 256;
constexpr size_t kBuffersMax = 4096;
constexpr size_t kDevicesMax = 64;

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(v); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Str(const std::string& s) {
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
  bool ok() const { return ok_; }
  bool done() const { return pos_ == in_.size(); }
  uint64_t Le(int n) {
    if (!ok_ || in_.size() - pos_ < static_cast<size_t>(n)) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{in_[pos_ + i]} << (8 * i);
    pos_ += n;
    return v;
  }
  std::string Str() {
    const size_t n = Le(2);
    if (!ok_ || n > kStringMax || in_.size() - pos_ < n) {
      ok_ = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  absl::Span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};
}  // namespace

std::vector<uint8_t> EncodeWire(const WireMsg& m) {
  Writer w;
  w.U16(kWireVersion);
  w.U8(static_cast<uint8_t>(m.type));
  w.U8(static_cast<uint8_t>(m.status));
  w.U64(m.incarnation);
  w.U32(m.generation);
  w.U32(m.echo_generation);
  w.Str(m.sender_nic);
  w.Str(m.target_nic);
  w.U8(static_cast<uint8_t>(m.qpns.size()));
  for (size_t i = 0; i < m.qpns.size(); ++i) {
    w.U32(m.qpns[i]);
    w.U32(i < m.psns.size() ? m.psns[i] : 0);
  }
  for (uint8_t b : m.gid) w.U8(b);
  w.U16(m.lid);
  w.U8(m.mtu);
  w.U64(m.token);
  const SegmentDescriptor& d = m.descriptor;
  w.Str(d.address);
  w.U64(d.incarnation);
  w.U64(d.version);
  w.U16(static_cast<uint16_t>(d.devices.size()));
  for (const DeviceDescriptor& dev : d.devices) {
    w.Str(dev.name);
    for (uint8_t b : dev.gid) w.U8(b);
    w.U16(dev.lid);
  }
  w.U32(static_cast<uint32_t>(d.buffers.size()));
  for (const BufferDescriptor& b : d.buffers) {
    w.U64(b.addr);
    w.U64(b.length_bytes);
    w.U16(static_cast<uint16_t>(b.rkeys.size()));
    for (uint32_t k : b.rkeys) w.U32(k);
  }
  return w.Take();
}

absl::StatusOr<WireMsg> DecodeWire(absl::Span<const uint8_t> bytes) {
  Reader r(bytes);
  auto bad = [](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("control message rejected: ", std::string(why)));
  };
  const uint64_t version = r.Le(2);
  if (!r.ok()) return bad("truncated header");
  if (version != kWireVersion) return bad(absl::StrCat("protocol version ", version));
  WireMsg m;
  const uint64_t type = r.Le(1);
  if (type < 1 || type > 5) return bad(absl::StrCat("unknown type ", type));
  m.type = static_cast<WireType>(type);
  const uint64_t status = r.Le(1);
  if (status > 2) return bad("unknown status");
  m.status = static_cast<WireStatus>(status);
  m.incarnation = r.Le(8);
  m.generation = static_cast<uint32_t>(r.Le(4));
  m.echo_generation = static_cast<uint32_t>(r.Le(4));
  m.sender_nic = r.Str();
  m.target_nic = r.Str();
  const uint64_t nq = r.Le(1);
  if (nq > kQpsPerEndpointMax) return bad("too many QPNs");
  for (uint64_t i = 0; i < nq && r.ok(); ++i) {
    m.qpns.push_back(static_cast<uint32_t>(r.Le(4)));
    m.psns.push_back(static_cast<uint32_t>(r.Le(4)));
  }
  for (uint8_t& b : m.gid) b = static_cast<uint8_t>(r.Le(1));
  m.lid = static_cast<uint16_t>(r.Le(2));
  m.mtu = static_cast<uint8_t>(r.Le(1));
  if (r.ok() && (m.mtu < 1 || m.mtu > 5)) return bad("bad MTU");
  m.token = r.Le(8);
  SegmentDescriptor& d = m.descriptor;
  d.address = r.Str();
  d.incarnation = r.Le(8);
  d.version = r.Le(8);
  const uint64_t ndev = r.Le(2);
  if (ndev > kDevicesMax) return bad("too many devices");
  for (uint64_t i = 0; i < ndev && r.ok(); ++i) {
    DeviceDescriptor dev;
    dev.name = r.Str();
    for (uint8_t& b : dev.gid) b = static_cast<uint8_t>(r.Le(1));
    dev.lid = static_cast<uint16_t>(r.Le(2));
    d.devices.push_back(std::move(dev));
  }
  const uint64_t nbuf = r.Le(4);
  if (nbuf > kBuffersMax) return bad("too many buffers");
  for (uint64_t i = 0; i < nbuf && r.ok(); ++i) {
    BufferDescriptor b;
    b.addr = r.Le(8);
    b.length_bytes = r.Le(8);
    const uint64_t nk = r.Le(2);
    if (nk > kDevicesMax) return bad("too many rkeys");
    for (uint64_t k = 0; k < nk && r.ok(); ++k) b.rkeys.push_back(static_cast<uint32_t>(r.Le(4)));
    d.buffers.push_back(std::move(b));
  }
  if (!r.ok()) return bad("truncated");
  if (!r.done()) return bad("trailing bytes");
  if ((m.type == WireType::kReq || m.type == WireType::kRep) && m.status == WireStatus::kOk &&
      m.qpns.empty())
    return bad("handshake without QPNs");
  return m;
}

}  // namespace ferry::engine
