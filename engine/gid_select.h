// engine/gid_select.h: which GID table entry a context uses when the config
// says gid_index = -1 (automatic).
//
// Owns: the preference order and its scan bound; nothing else.
// Thread safety: pure functions (SelectGidIndex) and one bring-up call per
// context (ChooseGid), made by the thread that enables the context.
// What must stay true:
// - Preference: a RoCE v2 entry holding an IPv4-mapped address
//   (::ffff:a.b.c.d, routable over IPv4), else any RoCE v2 entry, else
//   index 0 (an InfiniBand port, or a table without type information). Ties
//   go to the lowest index, so the choice is deterministic.
// - Empty slots (kNotFound or an all-zero GID) are never chosen by a
//   preference rule.
// - The scan reads at most kGidScanMax entries: reading a whole 1024-entry
//   rxe table costs tens of seconds under emulation, and the addresses sit
//   at the front of the table.
#ifndef FERRY_ENGINE_GID_SELECT_H_
#define FERRY_ENGINE_GID_SELECT_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "hal/verbs.h"

namespace ferry::engine {

inline constexpr int kGidScanMax = 16;

// Why a GID index was used.
enum class GidChoice : uint8_t {
  kConfigured,  // gid_index >= 0 in the config
  kRoceV2Ipv4,  // auto: RoCE v2, IPv4-mapped
  kRoceV2,      // auto: RoCE v2 (no IPv4-mapped v2 entry)
  kFirstEntry,  // auto: neither; index 0
};
std::string_view GidChoiceName(GidChoice c);

// True for ::ffff:a.b.c.d.
bool IsIpv4MappedGid(const hal::Gid& g);

struct GidSelection {
  int index = 0;
  GidChoice why = GidChoice::kFirstEntry;
};

// Picks from a scanned table: entries[i] is index i, nullopt when empty or
// unreadable.
GidSelection SelectGidIndex(absl::Span<const std::optional<hal::GidEntry>> entries);

// Scans up to min(gid_tbl_len, kGidScanMax) entries of `port_num` through
// QueryGidEntry and applies SelectGidIndex. Entries that read as kNotFound
// (empty, ENODATA) or kInvalidArgument (older kernels' EINVAL for an invalid
// entry) are skipped; a backend without the query (kUnimplemented) gives
// index 0. Any other failed read is returned, as is a port whose table is
// empty (gid_tbl_len 0).
absl::StatusOr<GidSelection> ChooseGid(hal::Verbs* verbs, hal::ContextHandle ctx, uint8_t port_num,
                                       uint32_t gid_tbl_len);

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_GID_SELECT_H_
