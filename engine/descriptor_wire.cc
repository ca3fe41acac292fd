// engine/descriptor_wire.cc: the descriptor codec (see descriptor_wire.h).
#include "engine/descriptor_wire.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/handshake.h"
#include "engine/wire_bytes.h"

namespace ferry::engine {

bool IsDescriptorMessage(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < 4) return false;
  uint32_t m = 0;
  for (int i = 0; i < 4; ++i) m |= uint32_t{bytes[static_cast<size_t>(i)]} << (8 * i);
  return m == kDescMagic;
}

std::vector<uint8_t> EncodeDesc(const DescMessage& m) {
  WireWriter w;
  w.Le(kDescMagic, 4);
  w.Le(kDescVersion, 2);
  w.Le(static_cast<uint8_t>(m.type), 1);
  w.Le(m.token, 8);
  if (m.type == DescType::kRep) {
    const SegmentDescriptor& d = m.descriptor;
    w.Str(d.address, kDescStringBytesMax);
    w.Le(d.incarnation, 8);
    w.Le(d.version, 8);
    const size_t ndev = std::min(d.devices.size(), kDescDevicesMax);
    w.Le(ndev, 2);
    for (size_t i = 0; i < ndev; ++i) {
      w.Str(d.devices[i].name, kDescStringBytesMax);
      for (uint8_t b : d.devices[i].gid) w.Le(b, 1);
      w.Le(d.devices[i].lid, 2);
    }
    const size_t nbuf = std::min(d.buffers.size(), kDescBuffersMax);
    w.Le(nbuf, 4);
    for (size_t i = 0; i < nbuf; ++i) {
      const BufferDescriptor& b = d.buffers[i];
      w.Le(b.addr, 8);
      w.Le(b.length_bytes, 8);
      w.Le(static_cast<uint8_t>(b.access), 1);
      const size_t nk = std::min(b.rkeys.size(), kDescDevicesMax);
      w.Le(nk, 2);
      for (size_t k = 0; k < nk; ++k) w.Le(b.rkeys[k], 4);
      w.Le(b.window, 8);
      w.Le(b.window_devices, 8);
    }
  } else if (m.type == DescType::kRefused) {
    w.Str(m.reason, kDescStringBytesMax);
  }
  return w.Take();
}

absl::StatusOr<DescMessage> DecodeDesc(absl::Span<const uint8_t> bytes) {
  auto bad = [](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("descriptor message rejected: ", std::string(why)));
  };
  WireReader r(bytes);
  if (r.Le(4) != kDescMagic || !r.ok()) return bad("magic");
  const uint64_t version = r.Le(2);
  if (!r.ok()) return bad("truncated header");
  if (version != kDescVersion) return bad(absl::StrCat("version ", version));
  const uint64_t type = r.Le(1);
  if (type < 1 || type > 3) return bad(absl::StrCat("type ", type));
  DescMessage m;
  m.type = static_cast<DescType>(type);
  m.token = r.Le(8);
  if (m.type == DescType::kRep) {
    SegmentDescriptor& d = m.descriptor;
    d.address = r.Str(kDescStringBytesMax);
    d.incarnation = r.Le(8);
    d.version = r.Le(8);
    const uint64_t ndev = r.Le(2);
    if (ndev > kDescDevicesMax) return bad("too many devices");
    // A segment is reached through one of its devices: none, or a name a
    // handshake cannot carry as its dst_nic, is refused here (C8).
    if (ndev == 0 && r.ok()) return bad("no device");
    for (uint64_t i = 0; i < ndev && r.ok(); ++i) {
      DeviceDescriptor dev;
      dev.name = r.Str(kDescStringBytesMax);
      if (r.ok() && !NicNameCarriable(dev.name)) return bad("device name");
      for (uint8_t& b : dev.gid) b = static_cast<uint8_t>(r.Le(1));
      dev.lid = static_cast<uint16_t>(r.Le(2));
      d.devices.push_back(std::move(dev));
    }
    const uint64_t nbuf = r.Le(4);
    if (nbuf > kDescBuffersMax) return bad("too many buffers");
    for (uint64_t i = 0; i < nbuf && r.ok(); ++i) {
      BufferDescriptor b;
      b.addr = r.Le(8);
      b.length_bytes = r.Le(8);
      const uint64_t access = r.Le(1);
      if (r.ok() && (access < 1 || access > 3)) return bad("buffer access");
      b.access = static_cast<RemoteAccess>(access);
      const uint64_t nk = r.Le(2);
      if (nk > kDescDevicesMax) return bad("too many rkeys");
      for (uint64_t k = 0; k < nk && r.ok(); ++k) b.rkeys.push_back(static_cast<uint32_t>(r.Le(4)));
      b.window = r.Le(8);
      b.window_devices = r.Le(8);
      // Windows on devices the descriptor lists, and only for a range
      // that names its window id.
      if (r.ok() && (b.window == 0) != (b.window_devices == 0)) return bad("window fields");
      if (r.ok() && ndev < 64 && (b.window_devices >> ndev) != 0) return bad("window device");
      d.buffers.push_back(std::move(b));
    }
  } else if (m.type == DescType::kRefused) {
    m.reason = r.Str(kDescStringBytesMax);
  }
  if (!r.ok()) return bad("truncated");
  if (!r.done()) return bad("trailing bytes");
  return m;
}

}  // namespace ferry::engine
