// engine/accept.h: the C6 accept decision as a pure function.
//
// Given the state of our endpoint for a key (local NIC, peer NIC path), what
// we recorded about the peer for it, and an incoming REQ, DecideAccept says
// what the owner does (docs/design.md section 4, "Accept decision"):
//
// row | our endpoint | recorded vs incoming REQ                    | action
// ----+--------------+---------------------------------------------+-------------------
// R1  | none/RETIRING| any                                         | kFreshEndpoint
// R2  | CONNECTING   | nothing recorded yet (simultaneous open)    | kAcceptOnConnecting
// R2d | CONNECTING   | same incarnation, generation and QPNs       | kDuplicate
// R2n | CONNECTING   | new incarnation, or higher generation       | kRetireAndServe
// R2s | CONNECTING   | same incarnation, lower generation          | kReplyStale
// R3  | READY        | same incarnation, generation and QPNs       | kDuplicate
// R4  | READY        | new incarnation, or higher generation       | kRetireAndServe
// R5  | READY        | same incarnation, lower generation          | kReplyStale
// R6  | CONNECTING/  | same incarnation and generation, other QPNs | kReplyError
//     | READY        |                                             |
//
// Actions: kFreshEndpoint = create an endpoint (new generation), accept,
// REP. kAcceptOnConnecting = pair our CONNECTING endpoint's QPs with the
// REQ's, REP. kDuplicate = resend the REP we sent for this REQ, change
// nothing. kRetireAndServe = retire ours and serve this REQ with a fresh
// endpoint in the same exchange (the peer's first REQ after it dropped its
// endpoint succeeds, tent-internals 3c). kReplyStale = reply STALE, change
// nothing. kReplyError = reply ERROR, change nothing (a peer never reuses a
// generation with other QPNs: hostile or corrupt).
//
// docs/design.md's row "CONNECTING | any | accept onto it" is refined into R2,
// R2d, R2n, R2s, R6 for a CONNECTING endpoint that already recorded a peer
// (the passive side waiting for RTU): its QPs are at RTR with that peer's
// QPNs, which cannot be re-targeted, so only "nothing recorded yet" can be
// accepted onto it. QP numbers are never an identity on their own: a
// restarted peer reusing QPNs differs by incarnation (R4).
//
// What must stay true: kDuplicate, kReplyStale and kReplyError never change
// an endpoint; a stale or reordered REQ (same incarnation, lower generation)
// never retires anything. Test-only mutation kEngineC6AcceptStale makes R5
// retire (the bug C6 scenarios must catch).
//
// Thread safety: pure function.
#ifndef FERRY_ENGINE_ACCEPT_H_
#define FERRY_ENGINE_ACCEPT_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "base/mutation.h"

namespace ferry::engine {

enum class LocalEndpointState : uint8_t { kNone, kConnecting, kReady, kRetiring };
std::string_view LocalEndpointStateName(LocalEndpointState s);

// What our endpoint recorded about its peer (from the REQ it accepted or the
// REP it applied). `known` false: nothing recorded (an active endpoint that
// sent a REQ and has no answer yet).
struct RecordedPeer {
  bool known = false;
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  std::vector<uint32_t> qpns;
};

struct IncomingReq {
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  absl::Span<const uint32_t> qpns;
};

enum class AcceptAction : uint8_t {
  kFreshEndpoint,
  kAcceptOnConnecting,
  kDuplicate,
  kRetireAndServe,
  kReplyStale,
  kReplyError,
};
std::string_view AcceptActionName(AcceptAction a);

struct AcceptDecision {
  AcceptAction action = AcceptAction::kReplyError;
  std::string_view row;  // "R1".."R6", for traces and tests
};

// `recorded` is ignored for kNone/kRetiring. `mutations` may be null.
AcceptDecision DecideAccept(LocalEndpointState state, const RecordedPeer& recorded,
                            const IncomingReq& req, const base::Mutations* mutations);

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_ACCEPT_H_
