// tests/engine/sim/wake_probe_test.cc: the sweep's probe wakes (a worker
// asleep is stepped at drawn times and must find nothing to do;
// sim/world/engine_runtime.h, WakeProbes) and the lost wake-ups they found
// on their own (session 36), each a named regression (suite 'sim').
// docs/simulator.md, "Lost wake-ups", has the table.
//
// What must stay true: each seed replays clean with ferry-sim's defaults
// (random profile, wake cqe, read depth and CQ spread drawn, probe wakes
// on); under the switch that brings its cause back it fails with the
// message it was found with (asserted, never only printed); probe wakes
// are deterministic and off by default.
#include <cstdint>
#include <string>

#include "base/mutation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/world/swarm.h"

namespace ferry::engine::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// ferry-sim --seed N with its defaults as of session 36.
simworld::SwarmReport RunProbed(uint64_t seed, base::Mutation m = base::Mutation::kCount,
                                bool probes = true, bool notify = false) {
  simworld::SwarmOptions o;
  o.notify = notify;
  o.profile = simworld::WorldProfile::kRandom;
  o.wake = simworld::WakeModel::kCqe;
  o.read_depth = true;
  o.cq_spread = true;
  o.wake_probes = probes;
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  if (m != base::Mutation::kCount) o.mutations.Enable(m);
#else
  (void)m;
#endif
  return simworld::RunSwarm(seed, o);
}

// Probe wakes take effect only when asked for, and replay: a seed's trace
// with them is its own, and the same on every run.
TEST(WakeProbes, OffByDefaultOnWhenAskedAndDeterministic) {
  const simworld::SwarmReport off = RunProbed(7, base::Mutation::kCount, false);
  const simworld::SwarmReport on = RunProbed(7);
  const simworld::SwarmReport again = RunProbed(7);
  EXPECT_EQ(off.failure, simworld::FailureClass::kNone) << off.message;
  EXPECT_EQ(on.failure, simworld::FailureClass::kNone) << on.message;
  EXPECT_EQ(off.wake_probes, 0u);
  EXPECT_GT(on.wake_probes, 100u);  // 642 as of session 36
  EXPECT_EQ(on.lost_wakeups, 0u);
  EXPECT_NE(off.trace_hash, on.trace_hash);
  EXPECT_EQ(on.trace_hash, again.trace_hash);
  EXPECT_EQ(on.wake_probes, again.wake_probes);
  EXPECT_EQ(simworld::SwarmOptions{}.wake_probes, false);
}

// Seed 178 (liveness: lost wake-up, worker asleep with a slice bound to an
// exited peer process at the front of its queue). A REQ's refusal (the
// target restarted) failed the key's queued slices bound to the old
// process, but a Submit in a step whose PostAll ran before its inbox drain
// queued more of them; the wait set looked at the key's CONNECTING endpoint
// only and slept until the handshake resend (1 ms), and only the next step
// failed them (DropExitedFront) and started the descriptor refetch. Fix:
// a key whose front slice PostKey would drop asks for a step now
// (Worker::FrontDroppable).
TEST(WakeProbes, Seed178ExitedFrontIsWorkNow) {
  const simworld::SwarmReport r = RunProbed(178);
  EXPECT_EQ(r.failure, simworld::FailureClass::kNone) << r.message;
  EXPECT_GT(r.wake_probes, 0u);
}

// Seed 470 (liveness: lost wake-up, latched slices at a queue's front).
// A timeout latched three tasks in a step whose PostAll had run, so their
// unposted slices stayed queued: the tasks could not publish, and their
// endpoint (no WR outstanding) did not count as idle, so the store looked
// full of busy endpoints to another key waiting for room. The owner slept
// until its next timer; the probe's step dropped the slices, evicted the
// now idle endpoint and opened the waiting key's. Same fix as seed 178.
TEST(WakeProbes, Seed470LatchedFrontIsWorkNow) {
  const simworld::SwarmReport r = RunProbed(470);
  EXPECT_EQ(r.failure, simworld::FailureClass::kNone) << r.message;
}

TEST(WakeProbesMutation, WaitIgnoresDroppableSeed178) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP() << "needs a FERRY_MUTATIONS build";
  const simworld::SwarmReport r = RunProbed(178, base::Mutation::kEngineWaitIgnoresDroppable);
  EXPECT_EQ(r.failure, simworld::FailureClass::kLiveness) << r.message;
  EXPECT_THAT(r.message, StartsWith("lost wake-up: h1:1000 worker 1 asleep since 8524136 ns, "
                                    "stepped by a probe wake at 8530055 ns, posted 0 WR(s) "
                                    "and recorded [refetch_start]; its wait set: timer "
                                    "9524136 ns"));
  EXPECT_EQ(r.lost_wakeups, 1u);
}

TEST(WakeProbesMutation, WaitIgnoresDroppableSeed470) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP() << "needs a FERRY_MUTATIONS build";
  const simworld::SwarmReport r = RunProbed(470, base::Mutation::kEngineWaitIgnoresDroppable);
  EXPECT_EQ(r.failure, simworld::FailureClass::kLiveness) << r.message;
  EXPECT_THAT(r.message, HasSubstr("recorded [ep_retire qp_destroyed]"));
}

// Session 35's cooldown bug (timeout scenario S21), found by the sweep on
// its own: one peer's errors paused a rail under another peer's READY
// endpoint with slices queued, and the owner slept past the cooldown's end
// until its next timer (28 ms later).
TEST(WakeProbesMutation, ReadyKeyIgnoresCooldownSeed409) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP() << "needs a FERRY_MUTATIONS build";
  const simworld::SwarmReport r = RunProbed(409, base::Mutation::kEngineReadyKeyIgnoresCooldown);
  EXPECT_EQ(r.failure, simworld::FailureClass::kLiveness) << r.message;
  EXPECT_THAT(r.message, StartsWith("lost wake-up: h2:1000 worker 0 asleep since 4018249 ns, "
                                    "stepped by a probe wake at 4155551 ns, posted 6 WR(s) "
                                    "and recorded [post x6]; its wait set: timer 32043900 ns"));
  EXPECT_EQ(RunProbed(409).failure, simworld::FailureClass::kNone);
}

// Notification seeds 2..1000 (ferry-sim --notify on; 84 of 1..200 under
// the switch below, first seed 2; seed 914 was the CI sweep's): a
// retiring QP that never connected (still INIT, with the notification
// receive WRs an endpoint posts before RTR) is destroyed by RetireStep at
// once, but NextRetireNs timed it at the drain deadline, so an owner
// asleep destroyed it up to drain_timeout_ns late (holding its CQ quota).
// Fix: NextRetireNs applies RetireStep's rule (a QP that never connected
// waits for no drain).
TEST(WakeProbes, Seed914NotifyUnconnectedQpRetiresOnTime) {
  const simworld::SwarmReport r = RunProbed(914, base::Mutation::kCount, true, true);
  EXPECT_EQ(r.failure, simworld::FailureClass::kNone) << r.message;
  EXPECT_GT(r.probes.at("recv_abandoned"), 0u);
}

TEST(WakeProbesMutation, RetireTimerDrainsUnconnectedSeed914Notify) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP() << "needs a FERRY_MUTATIONS build";
  const simworld::SwarmReport r =
      RunProbed(914, base::Mutation::kEngineRetireTimerDrainsUnconnected, true, true);
  EXPECT_EQ(r.failure, simworld::FailureClass::kLiveness) << r.message;
  EXPECT_THAT(r.message, StartsWith("lost wake-up: h2:1000 worker 1 asleep since 1825900 ns, "
                                    "stepped by a probe wake at 1840500 ns, posted 0 WR(s) "
                                    "and recorded [qp_destroyed]; its wait set: timer "
                                    "2026200 ns, WRs outstanding yes"));
}

// Seed 664135965 (liveness: lost wake-up; session 39's CI sweep of
// b21c4f9, the bug older). h0's one-endpoint store held the endpoint of key
// h6, waiting for the peer's windows with a slice queued, while key h7
// waited for room (no idle endpoint to evict). The world canceled h6's
// task: Cancel withdrew the queued slice on the user thread, but the entry
// stays in the owner's queue until PostAll drops it, and nothing woke the
// owner, asleep until the WINREQ resend 1 s later; the probe's step dropped
// it, evicted the now idle h6 endpoint and opened h7's. Fix: a Cancel that
// withdrew queued slices pushes an InboxRecheck to their owner.
TEST(WakeProbes, Seed664135965CancelWakesTheOwner) {
  const simworld::SwarmReport r = RunProbed(664135965);
  EXPECT_EQ(r.failure, simworld::FailureClass::kNone) << r.message;
  EXPECT_GT(r.probes.at("cancel"), 0u);
}

TEST(WakeProbesMutation, CancelNoWakeSeed664135965) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP() << "needs a FERRY_MUTATIONS build";
  const simworld::SwarmReport r = RunProbed(664135965, base::Mutation::kEngineCancelNoWake);
  EXPECT_EQ(r.failure, simworld::FailureClass::kLiveness) << r.message;
  EXPECT_THAT(r.message, StartsWith("lost wake-up: h0:1000 worker 0 asleep since 16060655 ns, "
                                    "stepped by a probe wake at 16065455 ns, posted 0 WR(s) "
                                    "and recorded [ep_evict ep_retire ep_create req_sent]; its "
                                    "wait set: timer 17057155 ns"));
  EXPECT_EQ(r.lost_wakeups, 1u);
}

// Without probe wakes the same switch goes unseen: no contract is broken,
// the work only waits (what the probes add to the sweep).
TEST(WakeProbesMutation, WaitIgnoresDroppableUnseenWithoutProbes) {
  if (!base::Mutations::kCompiledIn) GTEST_SKIP() << "needs a FERRY_MUTATIONS build";
  const simworld::SwarmReport r =
      RunProbed(178, base::Mutation::kEngineWaitIgnoresDroppable, false);
  EXPECT_EQ(r.failure, simworld::FailureClass::kNone) << r.message;
}

}  // namespace
}  // namespace ferry::engine::testing
