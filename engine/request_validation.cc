// engine/request_validation.cc: RangeSet and ValidateRequests (see the
// header for the order of checks and their codes).
//
// What must stay true: no arithmetic wraps (every end is computed only after
// checking addr + len does not overflow); RangeSet never holds overlapping
// or empty ranges.
#include "engine/request_validation.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_format.h"

namespace ferry::engine {
namespace {

bool Wraps(uint64_t addr, uint64_t len) {
  return len > std::numeric_limits<uint64_t>::max() - addr;
}

// [addr, addr + len) lies inside `r`, given that r covers addr (len > 0,
// no wrap: the caller checked both).
bool Inside(const Range& r, uint64_t addr, uint64_t len) {
  return (addr - r.addr) + len <= r.length_bytes;
}

}  // namespace

absl::InlinedVector<Range, 1>::iterator RangeSet::FirstAtOrAfter(uint64_t addr) {
  return std::lower_bound(ranges_.begin(), ranges_.end(), addr,
                          [](const Range& r, uint64_t a) { return r.addr < a; });
}

absl::Status RangeSet::Add(uint64_t addr, uint64_t length_bytes, uint64_t tag, uint32_t flags) {
  if (length_bytes == 0) return absl::InvalidArgumentError("range of zero length");
  if (Wraps(addr, length_bytes))
    return absl::InvalidArgumentError(
        absl::StrFormat("range 0x%x + %d wraps around the address space", addr, length_bytes));
  const uint64_t end = addr + length_bytes;
  auto next = FirstAtOrAfter(addr);
  if (next != ranges_.end() && next->addr < end)
    return absl::AlreadyExistsError(
        absl::StrFormat("range [0x%x, 0x%x) overlaps the one at 0x%x", addr, end, next->addr));
  if (next != ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->addr + prev->length_bytes > addr)
      return absl::AlreadyExistsError(
          absl::StrFormat("range [0x%x, 0x%x) overlaps the one at 0x%x", addr, end, prev->addr));
  }
  ranges_.insert(next, Range{addr, length_bytes, tag, flags});
  return absl::OkStatus();
}

absl::Status RangeSet::Remove(uint64_t addr) {
  auto it = FirstAtOrAfter(addr);
  if (it == ranges_.end() || it->addr != addr)
    return absl::NotFoundError(absl::StrFormat("no range starts at 0x%x", addr));
  ranges_.erase(it);
  return absl::OkStatus();
}

std::optional<Range> RangeSet::Covering(uint64_t addr) const {
  // The last range starting at or before addr.
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), addr,
                             [](uint64_t a, const Range& r) { return a < r.addr; });
  if (it == ranges_.begin()) return std::nullopt;
  --it;
  if (addr - it->addr >= it->length_bytes) return std::nullopt;
  return *it;
}

bool RangeSet::Contains(uint64_t addr, uint64_t length_bytes) const {
  if (length_bytes == 0 || Wraps(addr, length_bytes)) return false;
  const std::optional<Range> r = Covering(addr);
  return r.has_value() && Inside(*r, addr, length_bytes);
}

namespace {

// One search per side: the range covering the start address decides the
// containment check and the access flags, and is what `*found` returns.
absl::Status ValidateOne(const Request& r, size_t index, const RangeSet& local,
                         SegmentLookup segments, uint64_t request_bytes_max,
                         uint64_t batch_free_slots, bool check_access, ResolvedRanges* found) {
  if (r.opcode != OpKind::kRead && r.opcode != OpKind::kWrite)
    return absl::InvalidArgumentError(
        absl::StrFormat("request %d: unknown opcode %d", index, static_cast<int>(r.opcode)));
  if (r.length_bytes == 0)
    return absl::InvalidArgumentError(absl::StrFormat("request %d: zero length", index));
  if (r.length_bytes > request_bytes_max)
    return absl::InvalidArgumentError(
        absl::StrFormat("request %d: oversized: %d bytes exceed request_bytes_max %d", index,
                        r.length_bytes, request_bytes_max));
  if (Wraps(r.local_addr, r.length_bytes))
    return absl::OutOfRangeError(absl::StrFormat("request %d: local range 0x%x + %d wraps", index,
                                                 r.local_addr, r.length_bytes));
  const std::optional<Range> mr = local.Covering(r.local_addr);
  if (!mr.has_value())
    return absl::FailedPreconditionError(absl::StrFormat(
        "request %d: local address 0x%x is not in registered memory", index, r.local_addr));
  if (!Inside(*mr, r.local_addr, r.length_bytes))
    return absl::OutOfRangeError(absl::StrFormat(
        "request %d: local range [0x%x, +%d) runs past its registration [0x%x, +%d)", index,
        r.local_addr, r.length_bytes, mr->addr, mr->length_bytes));
  const RangeSet* seg = r.segment.valid() ? segments(r.segment, index) : nullptr;
  if (seg == nullptr)
    return absl::NotFoundError(
        absl::StrFormat("request %d: unknown peer segment %d", index, r.segment.id));
  const std::optional<Range> buf =
      Wraps(r.remote_addr, r.length_bytes) ? std::nullopt : seg->Covering(r.remote_addr);
  if (!buf.has_value() || !Inside(*buf, r.remote_addr, r.length_bytes))
    return absl::OutOfRangeError(
        absl::StrFormat("request %d: remote range [0x%x, +%d) is not inside one buffer of "
                        "segment %d",
                        index, r.remote_addr, r.length_bytes, r.segment.id));
  if (check_access) {
    const auto access = static_cast<RemoteAccess>(buf->flags);
    const bool allowed = r.opcode == OpKind::kRead ? AllowsRead(access) : AllowsWrite(access);
    if (!allowed)
      return absl::PermissionDeniedError(
          absl::StrFormat("request %d: %s a %s buffer of segment %d (as the peer registered it)",
                          index, r.opcode == OpKind::kRead ? "READ from" : "WRITE into",
                          std::string(RemoteAccessName(access)), r.segment.id));
  }
  if (index >= batch_free_slots)
    return absl::ResourceExhaustedError(
        absl::StrFormat("request %d: batch full (%d free slots)", index, batch_free_slots));
  *found = ResolvedRanges{*mr, *buf};
  return absl::OkStatus();
}

}  // namespace

BatchValidation ValidateRequests(absl::Span<const Request> requests, const RangeSet& local,
                                 SegmentLookup segments, uint64_t request_bytes_max,
                                 uint64_t batch_free_slots, bool check_access) {
  BatchValidation out;
  out.all_ok = ValidateRequestsInto(requests, local, segments, request_bytes_max, batch_free_slots,
                                    check_access, &out.per_request);
  return out;
}

bool ValidateRequestsInto(absl::Span<const Request> requests, const RangeSet& local,
                          SegmentLookup segments, uint64_t request_bytes_max,
                          uint64_t batch_free_slots, bool check_access,
                          std::vector<absl::Status>* per_request,
                          std::vector<ResolvedRanges>* resolved) {
  per_request->clear();
  per_request->reserve(requests.size());
  if (resolved != nullptr) resolved->assign(requests.size(), ResolvedRanges{});
  bool all_ok = true;
  for (size_t i = 0; i < requests.size(); ++i) {
    ResolvedRanges found;
    per_request->push_back(ValidateOne(requests[i], i, local, segments, request_bytes_max,
                                       batch_free_slots, check_access, &found));
    all_ok = all_ok && per_request->back().ok();
    if (resolved != nullptr) (*resolved)[i] = found;
  }
  return all_ok;
}

}  // namespace ferry::engine
