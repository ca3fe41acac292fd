// tests/property/accept_prop_test.cc: DecideAccept (engine/accept.h) against
// an oracle written independently from the accept table of docs/design.md
// section 4 as refined in docs/architecture.md section 5 (rows R1..R6).
//
// Owns: the oracle (a transcription of the table, row by row, not of
// accept.cc) and the generators. Incarnations, generations and QPNs are drawn
// from small pools so that "same", "lower", "higher" and "other QPNs" all
// occur often. What must stay true: for every input the action and the row
// match the table; for the one input the table leaves open (READY with
// nothing recorded) the decision never retires and never creates, since C6
// says a healthy endpoint is only retired by a newer peer.
// FERRY_MUTATION=engine_c6_accept_stale makes R5 retire; the property then
// fails (meson test property_accept_mut_c6_accept_stale expects it).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "engine/accept.h"
#include "tests/property/prop_env.h"

namespace ferry::engine {
// Printer so RapidCheck counterexamples name the action (found by ADL).
inline std::ostream& operator<<(std::ostream& os, AcceptAction a) {
  return os << AcceptActionName(a);
}
inline std::ostream& operator<<(std::ostream& os, LocalEndpointState s) {
  return os << LocalEndpointStateName(s);
}

namespace {

struct Expected {
  AcceptAction action;
  std::string row;
};

// The table, in its own words. Returns false in `defined` for the input the
// table does not cover.
Expected Oracle(LocalEndpointState ours, const RecordedPeer& rec, const IncomingReq& req,
                bool* defined) {
  *defined = true;
  // R1: none, or only RETIRING -> fresh endpoint, whatever was recorded.
  if (ours == LocalEndpointState::kNone || ours == LocalEndpointState::kRetiring)
    return {AcceptAction::kFreshEndpoint, "R1"};
  const bool connecting = ours == LocalEndpointState::kConnecting;
  if (!rec.known) {
    if (connecting) return {AcceptAction::kAcceptOnConnecting, "R2"};  // simultaneous open
    *defined = false;  // READY always recorded its peer
    return {AcceptAction::kReplyError, "R6"};
  }
  const bool same_incarnation = req.incarnation == rec.incarnation;
  const bool same_qpns = std::vector<uint32_t>(req.qpns.begin(), req.qpns.end()) == rec.qpns;
  // "new incarnation, or higher generation"
  if (!same_incarnation || req.generation > rec.generation)
    return {AcceptAction::kRetireAndServe, connecting ? "R2n" : "R4"};
  // "same incarnation, lower generation"
  if (req.generation < rec.generation)
    return {AcceptAction::kReplyStale, connecting ? "R2s" : "R5"};
  // same incarnation and generation
  if (same_qpns) return {AcceptAction::kDuplicate, connecting ? "R2d" : "R3"};
  return {AcceptAction::kReplyError, "R6"};
}

rc::Gen<std::vector<uint32_t>> GenQpns() {
  // 1..3 QPNs from a pool of 4: equal lists are common.
  return rc::gen::container<std::vector<uint32_t>>(*rc::gen::inRange<size_t>(1, 4),
                                                   rc::gen::inRange<uint32_t>(1, 5));
}

RC_GTEST_PROP(AcceptProp, MatchesTheTable, ()) {
  base::Mutations mutations;
  property::ApplyEnvMutation(mutations);
  const auto ours = *rc::gen::element(LocalEndpointState::kNone, LocalEndpointState::kConnecting,
                                      LocalEndpointState::kReady, LocalEndpointState::kRetiring);
  RecordedPeer rec;
  rec.known = *rc::gen::arbitrary<bool>();
  if (rec.known) {
    rec.incarnation = *rc::gen::inRange<uint64_t>(1, 4);
    rec.generation = *rc::gen::inRange<uint64_t>(1, 4);
    rec.qpns = *GenQpns();
  }
  const uint64_t req_incarnation =
      *rc::gen::oneOf(rc::gen::inRange<uint64_t>(1, 4), rc::gen::arbitrary<uint64_t>());
  const uint64_t req_generation =
      *rc::gen::oneOf(rc::gen::inRange<uint64_t>(1, 4), rc::gen::arbitrary<uint64_t>());
  // Often the very QPNs recorded, otherwise fresh ones.
  const std::vector<uint32_t> req_qpns =
      rec.known && *rc::gen::arbitrary<bool>() ? rec.qpns : *GenQpns();
  const IncomingReq req{req_incarnation, req_generation, req_qpns};

  bool defined = true;
  const Expected want = Oracle(ours, rec, req, &defined);
  const AcceptDecision got = DecideAccept(ours, rec, req, &mutations);
  RC_TAG(want.row);
  if (defined) {
    RC_ASSERT(AcceptActionName(got.action) == AcceptActionName(want.action));
    RC_ASSERT(std::string(got.row) == want.row);
  } else {
    // Not in the table: must change nothing.
    RC_ASSERT(got.action != AcceptAction::kRetireAndServe);
    RC_ASSERT(got.action != AcceptAction::kFreshEndpoint);
    RC_ASSERT(got.action != AcceptAction::kAcceptOnConnecting);
  }
}

// C6, stated on its own: a REQ with our recorded incarnation and a lower
// generation never retires anything, in any state that recorded a peer.
RC_GTEST_PROP(AcceptProp, StaleReqNeverRetires, (uint64_t incarnation, uint64_t generation)) {
  RC_PRE(generation > 1u);
  base::Mutations mutations;
  property::ApplyEnvMutation(mutations);
  const auto ours = *rc::gen::element(LocalEndpointState::kConnecting, LocalEndpointState::kReady);
  const uint64_t lower = *rc::gen::inRange<uint64_t>(0, generation);
  RecordedPeer rec{true, incarnation, generation, *GenQpns()};
  const std::vector<uint32_t> qpns = *GenQpns();
  const AcceptDecision d =
      DecideAccept(ours, rec, IncomingReq{incarnation, lower, qpns}, &mutations);
  RC_ASSERT(d.action == AcceptAction::kReplyStale);
}

}  // namespace
}  // namespace ferry::engine
