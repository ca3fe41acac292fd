// engine/request_validation.h: C8 validation of a batch of requests.
//
// Owns: RangeSet (non-overlapping [addr, addr + len) ranges, O(log n)
// lookup; used for the local MR table and for each peer segment's buffers)
// and ValidateRequests, which checks every request of a Submit before any is
// enqueued and gives each its own status (docs/design.md C8).
//
// Checks, in this order (the first failing one is the request's status):
//   1. opcode is READ or WRITE                         else kInvalidArgument
//   2. length_bytes > 0                                else kInvalidArgument
//   3. length_bytes <= request_bytes_max               else kInvalidArgument
//   4. local range does not wrap around 2^64           else kOutOfRange
//   5. local_addr lies in a registered range           else kFailedPrecondition
//   6. the whole local range lies in that one range    else kOutOfRange
//   7. segment handle names an open peer segment       else kNotFound
//   8. remote range does not wrap, and lies wholly in
//      one buffer of that segment                      else kOutOfRange
//   8a. that buffer allows the operation (its Range
//      flags hold its RemoteAccess: READ needs read,
//      WRITE needs write; docs/security.md)            else kPermissionDenied
//   9. the batch has a free slot for it (request i
//      needs i < free slots)                           else kResourceExhausted
// A range that spans two adjacent registrations is refused (6/8): one WR
// uses one MR key.
//
// What must stay true: validation is pure (reads only its arguments); the
// result has exactly one status per request; all_ok is true iff every
// status is OK, and the caller enqueues nothing unless all_ok.
//
// Thread safety: RangeSet is a value with no internal locking (the engine
// guards its MR table); ValidateRequests is pure.
#ifndef FERRY_ENGINE_REQUEST_VALIDATION_H_
#define FERRY_ENGINE_REQUEST_VALIDATION_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ferry/types.h"

namespace ferry::engine {

struct Range {
  uint64_t addr = 0;
  uint64_t length_bytes = 0;
  uint64_t tag = 0;    // the caller's, given to Add (e.g. a buffer's index)
  uint32_t flags = 0;  // the caller's (a peer buffer's RemoteAccess; 0 = none)
  friend bool operator==(const Range&, const Range&) = default;
};

class RangeSet {
 public:
  // kInvalidArgument for zero length or a range that wraps; kAlreadyExists
  // if it overlaps a range already present (nothing changes).
  absl::Status Add(uint64_t addr, uint64_t length_bytes, uint64_t tag = 0, uint32_t flags = 0);
  // Removes the range starting at `addr`; kNotFound if none starts there.
  absl::Status Remove(uint64_t addr);
  // The range that contains `addr`, if any.
  std::optional<Range> Covering(uint64_t addr) const;
  // True when [addr, addr + length_bytes) lies inside one range (length > 0,
  // no wrap).
  bool Contains(uint64_t addr, uint64_t length_bytes) const;
  size_t size() const { return ranges_.size(); }

 private:
  // Sorted by addr, never overlapping. A sorted vector, not a btree: a
  // lookup (two per request at Submit) is a binary search over contiguous
  // entries, about 90 instructions fewer than absl::btree_map's at one to
  // a few ranges (bench/scale); Add and Remove move the entries after the
  // position (32 bytes each: 10000 regions are a 320 KB move, less than
  // the memory registration that comes with one). One range inline: a
  // peer segment of one buffer keeps it in the PeerSegment, not in a
  // line of its own (bench/scale: +5 % slices/s at 512 endpoints).
  absl::InlinedVector<Range, 1> ranges_;
  // The first range starting at or after addr (end() if none).
  absl::InlinedVector<Range, 1>::iterator FirstAtOrAfter(uint64_t addr);
};

struct BatchValidation {
  bool all_ok = true;
  std::vector<absl::Status> per_request;  // one per request, same order
};

// What validation found for a valid request: the registration holding its
// local range and the peer buffer holding its remote range (each range's
// tag and flags as Add was given them), so the caller routes it without a
// second search. Both are zero for a request that failed validation.
struct ResolvedRanges {
  Range local;
  Range remote;
};

// Looks up the buffers of an open peer segment; nullptr when unknown.
// `index`: the request's position in the batch (a caller may keep what it
// found for that request); called at most once per request, in order.
using SegmentLookup = absl::FunctionRef<const RangeSet*(SegmentHandle, size_t index)>;

// `check_access` false skips check 8a (only the test-only mutation
// kEngineC8NoRemoteAccessCheck passes false).
BatchValidation ValidateRequests(absl::Span<const Request> requests, const RangeSet& local,
                                 SegmentLookup segments, uint64_t request_bytes_max,
                                 uint64_t batch_free_slots, bool check_access = true);
// The same into `*per_request` (cleared first; its capacity is reused, so a
// caller that keeps the vector validates without allocating); true when
// every request is valid. `*resolved`, when given, gets one entry per
// request (its capacity reused the same way).
bool ValidateRequestsInto(absl::Span<const Request> requests, const RangeSet& local,
                          SegmentLookup segments, uint64_t request_bytes_max,
                          uint64_t batch_free_slots, bool check_access,
                          std::vector<absl::Status>* per_request,
                          std::vector<ResolvedRanges>* resolved = nullptr);

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_REQUEST_VALIDATION_H_
