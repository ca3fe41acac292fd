// engine/segment_refetch.h: the pure decisions of the segment-descriptor
// refetch on REM_ACCESS_ERR (docs/design.md section 4, "Errors, retries, rails":
// "the peer's segment descriptor is fetched again").
//
// Owns: nothing but two decisions on values. EngineImpl (engine/engine.cc)
// keeps the per-segment refetch state under its mutex, drives the resends
// from the listener's step, and applies these decisions.
//
// What must stay true:
// - A REM_ACCESS_ERR starts a refetch only for the descriptor version the
//   segment holds now (a late error of a request submitted with an older
//   version says nothing about the current one) and only when no refetch of
//   that segment is in flight (one per segment).
// - An answer replaces the held descriptor only when it comes from the same
//   peer (address and incarnation) with a strictly higher version; a
//   same-or-lower version, or another incarnation of the peer (a restarted
//   process: the user must open it again), changes nothing.
//
// Thread safety: pure functions on values.
#ifndef FERRY_ENGINE_SEGMENT_REFETCH_H_
#define FERRY_ENGINE_SEGMENT_REFETCH_H_

#include <cstdint>
#include <string_view>

#include "ferry/types.h"

namespace ferry::engine {

enum class RefetchStart : uint8_t {
  kStart,         // mark stale, send a DESC_REQ
  kInFlight,      // stale already; the refetch in flight covers it
  kOlderVersion,  // the error used an older version than the one held
};
std::string_view RefetchStartName(RefetchStart s);

// A REM_ACCESS_ERR on a request that resolved its rkeys from descriptor
// version `reported_version`, while the segment holds `held_version` and
// `in_flight` says whether a refetch is outstanding.
RefetchStart DecideRefetchStart(uint64_t held_version, uint64_t reported_version, bool in_flight);

enum class RefetchAnswer : uint8_t {
  kApply,             // strictly newer, same peer: replace the descriptor
  kUnchanged,         // same or lower version: nothing changes
  kOtherIncarnation,  // the peer process restarted: nothing changes
  kOtherAddress,      // not from the peer asked: ignored (keep waiting)
};
std::string_view RefetchAnswerName(RefetchAnswer a);

RefetchAnswer DecideRefetchAnswer(const SegmentDescriptor& held, const SegmentDescriptor& answer);

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_SEGMENT_REFETCH_H_
