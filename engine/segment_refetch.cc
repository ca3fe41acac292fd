// engine/segment_refetch.cc: refetch decisions (see segment_refetch.h).
#include "engine/segment_refetch.h"

namespace ferry::engine {

std::string_view RefetchStartName(RefetchStart s) {
  switch (s) {
    case RefetchStart::kStart:
      return "start";
    case RefetchStart::kInFlight:
      return "in_flight";
    case RefetchStart::kOlderVersion:
      return "older_version";
  }
  return "?";
}

RefetchStart DecideRefetchStart(uint64_t held_version, uint64_t reported_version, bool in_flight) {
  if (reported_version < held_version) return RefetchStart::kOlderVersion;
  if (in_flight) return RefetchStart::kInFlight;
  return RefetchStart::kStart;
}

std::string_view RefetchAnswerName(RefetchAnswer a) {
  switch (a) {
    case RefetchAnswer::kApply:
      return "apply";
    case RefetchAnswer::kUnchanged:
      return "unchanged";
    case RefetchAnswer::kOtherIncarnation:
      return "other_incarnation";
    case RefetchAnswer::kOtherAddress:
      return "other_address";
  }
  return "?";
}

RefetchAnswer DecideRefetchAnswer(const SegmentDescriptor& held, const SegmentDescriptor& answer) {
  if (answer.address != held.address) return RefetchAnswer::kOtherAddress;
  if (answer.incarnation != held.incarnation) return RefetchAnswer::kOtherIncarnation;
  if (answer.version <= held.version) return RefetchAnswer::kUnchanged;
  return RefetchAnswer::kApply;
}

}  // namespace ferry::engine
