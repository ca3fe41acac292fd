// engine/accept.cc: DecideAccept (see accept.h for the table).
//
// What must stay true: the function reads only its arguments; every
// (state, comparison) pair maps to exactly one row.
#include "engine/accept.h"

#include <algorithm>

namespace ferry::engine {

std::string_view LocalEndpointStateName(LocalEndpointState s) {
  switch (s) {
    case LocalEndpointState::kNone:
      return "NONE";
    case LocalEndpointState::kConnecting:
      return "CONNECTING";
    case LocalEndpointState::kReady:
      return "READY";
    case LocalEndpointState::kRetiring:
      return "RETIRING";
  }
  return "?";
}

std::string_view AcceptActionName(AcceptAction a) {
  switch (a) {
    case AcceptAction::kFreshEndpoint:
      return "fresh_endpoint";
    case AcceptAction::kAcceptOnConnecting:
      return "accept_on_connecting";
    case AcceptAction::kDuplicate:
      return "duplicate";
    case AcceptAction::kRetireAndServe:
      return "retire_and_serve";
    case AcceptAction::kReplyStale:
      return "reply_stale";
    case AcceptAction::kReplyError:
      return "reply_error";
  }
  return "?";
}

AcceptDecision DecideAccept(LocalEndpointState state, const RecordedPeer& recorded,
                            const IncomingReq& req, const base::Mutations* mutations) {
  if (state == LocalEndpointState::kNone || state == LocalEndpointState::kRetiring)
    return {AcceptAction::kFreshEndpoint, "R1"};
  if (state == LocalEndpointState::kConnecting && !recorded.known)
    return {AcceptAction::kAcceptOnConnecting, "R2"};
  const bool connecting = state == LocalEndpointState::kConnecting;
  if (!recorded.known) {
    // READY always recorded its peer; a READY endpoint without one is a bug
    // of the caller, never a reason to retire it.
    return {AcceptAction::kReplyError, "R6"};
  }
  if (req.incarnation != recorded.incarnation || req.generation > recorded.generation)
    return {AcceptAction::kRetireAndServe, connecting ? "R2n" : "R4"};
  if (req.generation < recorded.generation) {
    if (!connecting && mutations != nullptr &&
        mutations->on(base::Mutation::kEngineC6AcceptStale)) {
      return {AcceptAction::kRetireAndServe, "R5"};  // the bug C6 forbids
    }
    return {AcceptAction::kReplyStale, connecting ? "R2s" : "R5"};
  }
  const bool same_qpns =
      std::equal(req.qpns.begin(), req.qpns.end(), recorded.qpns.begin(), recorded.qpns.end());
  if (same_qpns) return {AcceptAction::kDuplicate, connecting ? "R2d" : "R3"};
  return {AcceptAction::kReplyError, "R6"};
}

}  // namespace ferry::engine
