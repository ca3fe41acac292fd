// engine/gid_select.cc: automatic GID selection (see gid_select.h).
#include "engine/gid_select.h"

#include <algorithm>

#include "base/check.h"

namespace ferry::engine {

std::string_view GidChoiceName(GidChoice c) {
  switch (c) {
    case GidChoice::kConfigured:
      return "configured";
    case GidChoice::kRoceV2Ipv4:
      return "auto: RoCE v2 IPv4";
    case GidChoice::kRoceV2:
      return "auto: RoCE v2";
    case GidChoice::kFirstEntry:
      return "auto: index 0";
  }
  return "?";
}

bool IsIpv4MappedGid(const hal::Gid& g) {
  for (int i = 0; i < 10; ++i)
    if (g.raw[i] != 0) return false;
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

namespace {
bool IsZero(const hal::Gid& g) {
  return std::all_of(g.raw.begin(), g.raw.end(), [](uint8_t b) { return b == 0; });
}
}  // namespace

GidSelection SelectGidIndex(absl::Span<const std::optional<hal::GidEntry>> entries) {
  std::optional<int> v2_ipv4, v2;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (!e.has_value() || IsZero(e->gid) || e->type != hal::GidType::kRoceV2) continue;
    if (!v2_ipv4 && IsIpv4MappedGid(e->gid)) v2_ipv4 = static_cast<int>(i);
    if (!v2) v2 = static_cast<int>(i);
  }
  if (v2_ipv4) return GidSelection{*v2_ipv4, GidChoice::kRoceV2Ipv4};
  if (v2) return GidSelection{*v2, GidChoice::kRoceV2};
  return GidSelection{0, GidChoice::kFirstEntry};
}

absl::StatusOr<GidSelection> ChooseGid(hal::Verbs* verbs, hal::ContextHandle ctx, uint8_t port_num,
                                       uint32_t gid_tbl_len) {
  FERRY_CHECK(verbs != nullptr);
  if (gid_tbl_len == 0) return absl::FailedPreconditionError("the port's GID table is empty");
  const int n = static_cast<int>(std::min<uint32_t>(gid_tbl_len, kGidScanMax));
  std::vector<std::optional<hal::GidEntry>> entries(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto e = verbs->QueryGidEntry(ctx, port_num, i);
    if (e.ok()) {
      entries[static_cast<size_t>(i)] = *e;
      continue;
    }
    switch (e.status().code()) {
      case absl::StatusCode::kNotFound:         // empty slot (ENODATA)
      case absl::StatusCode::kInvalidArgument:  // invalid entry (older kernels: EINVAL)
        break;
      case absl::StatusCode::kUnimplemented:  // no GID types: the old default
        return GidSelection{0, GidChoice::kFirstEntry};
      default:
        return e.status();
    }
  }
  return SelectGidIndex(entries);
}

}  // namespace ferry::engine
