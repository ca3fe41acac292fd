// Tests of engine/accept: one test per row of the C6 accept table, plus the
// C6 mutation turning a stale REQ into a retire.
#include "engine/accept.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/mutation.h"

namespace ferry::engine {
namespace {

const std::vector<uint32_t> kQpns = {0x10, 0x11};
const std::vector<uint32_t> kOtherQpns = {0x10, 0x12};

RecordedPeer Recorded(uint64_t inc = 100, uint64_t gen = 5) {
  return RecordedPeer{true, inc, gen, kQpns};
}

IncomingReq Incoming(uint64_t inc, uint64_t gen, const std::vector<uint32_t>& qpns = kQpns) {
  return IncomingReq{inc, gen, qpns};
}

AcceptDecision Decide(LocalEndpointState s, const RecordedPeer& r, const IncomingReq& q) {
  return DecideAccept(s, r, q, nullptr);
}

void ExpectRow(const AcceptDecision& d, AcceptAction action, std::string_view row) {
  EXPECT_EQ(d.action, action) << AcceptActionName(d.action) << " at " << d.row;
  EXPECT_EQ(d.row, row);
}

TEST(AcceptTable, R1NoneOrRetiringGetsAFreshEndpoint) {
  for (LocalEndpointState s : {LocalEndpointState::kNone, LocalEndpointState::kRetiring}) {
    ExpectRow(Decide(s, RecordedPeer{}, Incoming(1, 1)), AcceptAction::kFreshEndpoint, "R1");
    ExpectRow(Decide(s, Recorded(), Incoming(100, 1)), AcceptAction::kFreshEndpoint, "R1");
  }
}

TEST(AcceptTable, R2ConnectingWithNothingRecordedAcceptsOntoIt) {
  ExpectRow(Decide(LocalEndpointState::kConnecting, RecordedPeer{}, Incoming(7, 1)),
            AcceptAction::kAcceptOnConnecting, "R2");
}

TEST(AcceptTable, R2RefinementsForAConnectingEndpointThatRecordedAPeer) {
  const auto c = LocalEndpointState::kConnecting;
  ExpectRow(Decide(c, Recorded(), Incoming(100, 5)), AcceptAction::kDuplicate, "R2d");
  ExpectRow(Decide(c, Recorded(), Incoming(100, 6)), AcceptAction::kRetireAndServe, "R2n");
  ExpectRow(Decide(c, Recorded(), Incoming(200, 1)), AcceptAction::kRetireAndServe, "R2n");
  ExpectRow(Decide(c, Recorded(), Incoming(100, 4)), AcceptAction::kReplyStale, "R2s");
  ExpectRow(Decide(c, Recorded(), Incoming(100, 5, kOtherQpns)), AcceptAction::kReplyError, "R6");
}

TEST(AcceptTable, R3ReadyDuplicateChangesNothing) {
  ExpectRow(Decide(LocalEndpointState::kReady, Recorded(), Incoming(100, 5)),
            AcceptAction::kDuplicate, "R3");
}

TEST(AcceptTable, R4ReadyNewIncarnationOrHigherGenerationRetiresAndServes) {
  const auto r = LocalEndpointState::kReady;
  ExpectRow(Decide(r, Recorded(), Incoming(100, 6)), AcceptAction::kRetireAndServe, "R4");
  // A restarted peer (new incarnation) reusing the very same QPNs and even a
  // lower generation: QPNs are never an identity.
  ExpectRow(Decide(r, Recorded(), Incoming(101, 1, kQpns)), AcceptAction::kRetireAndServe, "R4");
}

TEST(AcceptTable, R5ReadyStaleReqNeverRetires) {
  ExpectRow(Decide(LocalEndpointState::kReady, Recorded(), Incoming(100, 4)),
            AcceptAction::kReplyStale, "R5");
  ExpectRow(Decide(LocalEndpointState::kReady, Recorded(), Incoming(100, 1, kOtherQpns)),
            AcceptAction::kReplyStale, "R5");
}

TEST(AcceptTable, R6ReadySameGenerationOtherQpnsIsAnError) {
  ExpectRow(Decide(LocalEndpointState::kReady, Recorded(), Incoming(100, 5, kOtherQpns)),
            AcceptAction::kReplyError, "R6");
  ExpectRow(Decide(LocalEndpointState::kReady, Recorded(), Incoming(100, 5, {0x10})),
            AcceptAction::kReplyError, "R6");
  // A READY endpoint that recorded nothing is a caller bug: never retire.
  ExpectRow(Decide(LocalEndpointState::kReady, RecordedPeer{}, Incoming(100, 9)),
            AcceptAction::kReplyError, "R6");
}

TEST(AcceptTable, NamesAreStable) {
  EXPECT_EQ(AcceptActionName(AcceptAction::kRetireAndServe), "retire_and_serve");
  EXPECT_EQ(LocalEndpointStateName(LocalEndpointState::kReady), "READY");
}

TEST(AcceptMutation, AcceptStaleRetiresAHealthyEndpoint) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP() << "mutations not compiled in";
  base::Mutations m;
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  m.Enable(base::Mutation::kEngineC6AcceptStale);
#endif
  const AcceptDecision d =
      DecideAccept(LocalEndpointState::kReady, Recorded(), Incoming(100, 4), &m);
  EXPECT_EQ(d.action, AcceptAction::kRetireAndServe);  // the bug C6 forbids
}

}  // namespace
}  // namespace ferry::engine
