// sim/rnic/fault_plan.h: the fault kinds the simulated world can inject, a
// seeded swarm plan of rates, and the scripted form ("at T do X to Y").
//
// Thread safety: plain values; no shared state.
// What must stay true:
// - A plan is a pure function of the Prng it is drawn from (docs/design.md
//   section 7): same seed, same plan, on every build.
// - Rates are integer ratios (sim::Ratio), never floating point.
// - ToString() prints every kind (enabled or not), so a run's printed plan is
//   the whole plan; ParseFaultScript() rejects malformed text with the line.
#ifndef FERRY_SIM_RNIC_FAULT_PLAN_H_
#define FERRY_SIM_RNIC_FAULT_PLAN_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/prng.h"

namespace ferry::sim {

enum class FaultKind : uint8_t {
  kWrFlush = 0,
  kLateCqe,
  kHungQp,
  kDestroyQpFail,
  kModifyQpFail,
  kPostSendEnomem,
  kCqOverrun,
  kPacketLoss,
  kLinkDown,
  kPortFlap,
  kResourceFail,
  kPeerRestart,
  kPausedPeer,
  kCtrlDelay,
  kCtrlLoss,
  kCtrlDup,
  kCtrlReorder,
  kCtrlPartition,
  // Scripted only (no seeded rate): events with no natural opportunity.
  kLinkUp,
  kDeviceFatal,
  kGidChange,
  // Stall kinds (StallPlan below; the swarm's "stall" family): a QP that
  // hangs and recovers, a move to ERR held while the QP still executes, a
  // CQE delivered twice. Seeded from their own stream, and scriptable.
  kHungQpRecover,
  kQpErrHold,
  kDupCqe,
  // Receive-side kinds (fabric_recv.cc), scripted on a QP as responder:
  // its next SEND / WRITE-with-immediate packet is lost on arrival, or it
  // answers every new message with an RNR NAK for a while though receive
  // WRs are posted (an RNR storm). A late receive CQE is late_cqe.
  kRecvDrop,
  kRnrStorm,
  kCount,
};
inline constexpr size_t kSeededFaultKinds = static_cast<size_t>(FaultKind::kLinkUp);
inline constexpr size_t kFaultKinds = static_cast<size_t>(FaultKind::kCount);
inline constexpr size_t kFirstStallKind = static_cast<size_t>(FaultKind::kHungQpRecover);
// Whether a kind is one of the stall kinds (a campaign gates on them as on
// the seeded kinds when its plans draw them).
constexpr bool IsStallKind(FaultKind k) {
  return static_cast<size_t>(k) >= kFirstStallKind && k <= FaultKind::kDupCqe;
}
constexpr bool IsRecvKind(FaultKind k) {
  return k == FaultKind::kRecvDrop || k == FaultKind::kRnrStorm;
}

std::string_view FaultKindName(FaultKind k);
absl::StatusOr<FaultKind> ParseFaultKind(std::string_view name);

// Rates per seeded kind; a kind with num == 0 is disabled.
struct FaultPlan {
  std::array<Ratio, kSeededFaultKinds> rate{};

  Ratio Rate(FaultKind k) const {
    return static_cast<size_t>(k) < kSeededFaultKinds ? rate[static_cast<size_t>(k)] : kNever;
  }
  bool Enabled(FaultKind k) const { return Rate(k).num != 0; }
  void Set(FaultKind k, Ratio r) { rate[static_cast<size_t>(k)] = r; }
  bool AnyEnabled() const;

  // Swarm draw: each kind enabled with probability 1/2, its rate from a
  // per-kind menu. Consumes a fixed number of draws per kind.
  static FaultPlan Draw(Prng& prng);
  // No faults at all.
  static FaultPlan None() { return FaultPlan{}; }
  // "fault plan:\n  wr_flush 1/1000\n  late_cqe off\n..."
  std::string ToString() const;
};

// The stall kinds' rates and durations. Drawn from a stream of their own
// and applied by the RNIC from a stream of its own (seeded by `seed`), so a
// run whose plan has no stall kind is the run it was before they existed
// (the named regressions replay with the family off). Every chance is drawn
// only when its rate is not zero.
struct StallPlan {
  Ratio hung_recover = kNever;       // per move to RTS: the QP hangs, then...
  uint64_t hung_recover_ns_max = 0;  // ...recovers after 1..this ns
  Ratio err_hold = kNever;           // per modify to ERR: the move waits...
  uint64_t err_hold_ns_max = 0;      // ...1..this ns, the QP executing meanwhile
  Ratio dup_cqe = kNever;            // per CQE: the CQ gets it again...
  uint64_t dup_cqe_ns_max = 0;       // ...1..this ns later
  uint64_t seed = 0;                 // the RNIC's stall stream

  bool AnyEnabled() const { return hung_recover.num != 0 || err_hold.num != 0 || dup_cqe.num != 0; }
  // Swarm draw: each kind on with probability 1/2, its rate and its time
  // bound from a menu (the hang bound scaled to the slice timeout, so a
  // recovery races the deadline). A fixed number of draws.
  static StallPlan Draw(Prng& prng, uint64_t slice_timeout_ns);
  // "stall plan: hung_qp_recover 1/100 <= 60000000 ns, ..." ("off" when none).
  std::string ToString() const;
};

// The receive-side kinds' rates (fabric_recv.cc), seeded like the stall
// kinds: drawn from a stream of their own and applied by the RNIC from a
// stream of its own (seeded by `seed`), each chance drawn only when its rate
// is not zero, so a run with the plan off is the run it was before the
// kinds existed. They act only where receive WRs are consumed (SEND, WRITE
// with immediate); a late receive CQE is the plan's late_cqe.
struct RecvPlan {
  Ratio drop = kNever;            // per incoming SEND / WRITE_WITH_IMM packet: lost on arrival
  Ratio rnr_storm = kNever;       // per new message at a responder: a storm starts...
  uint64_t rnr_storm_ns_max = 0;  // ...answering RNR for 1..this ns, receives posted or not
  uint64_t seed = 0;              // the RNIC's receive-side stream

  bool AnyEnabled() const { return drop.num != 0 || rnr_storm.num != 0; }
  // Each kind on with probability 1/2, its rate (and the storm's length)
  // from a menu. A fixed number of draws.
  static RecvPlan Draw(Prng& prng);
  // "recv plan: recv_drop 1/100, rnr_storm 1/50 up to 2000000 ns" ("off").
  std::string ToString() const;
};

// What a scripted fault acts on.
enum class TargetKind : uint8_t { kQp, kCq, kDevice, kHost };

// A kQp target's number meaning "every live QP of the device" (written
// `*`): for a user of the simulated world (ferry::testing::SimCluster), who
// cannot know the QP numbers its engine chose.
inline constexpr uint32_t kEveryQp = UINT32_MAX;

struct FaultTarget {
  TargetKind kind = TargetKind::kDevice;
  uint32_t host = 0;
  std::string device;   // e.g. "sim0" (empty for kHost)
  uint32_t number = 0;  // QP number (or kEveryQp), or 1-based CQ ordinal on the device
  std::string ToString() const;
};

struct ScriptedFault {
  uint64_t at_ns = 0;
  FaultKind kind = FaultKind::kWrFlush;
  FaultTarget target;
  // How long a paused_peer or ctrl_partition lasts, a ctrl_delay's delay,
  // how long a hung_qp_recover QP hangs, how long qp_err_hold holds the
  // QP's next move to ERR, or how late dup_cqe's copy of the QP's next CQE
  // comes, how long an rnr_storm lasts ("for <ns>"); 0 (no "for") for
  // every other kind.
  uint64_t duration_ns = 0;
  std::string ToString() const;  // the line ParseFaultScript reads back
};

// Whether a kind takes (and needs) "for <ns>".
bool FaultTakesDuration(FaultKind k);

// Parses lines "at <ns> <kind> <target> [for <ns>]"; '#' starts a comment;
// blank lines are skipped. Targets: qp:h<H>/<dev>/<qpn> (qpn `*`: every
// live QP of the device), cq:h<H>/<dev>/<n>, dev:h<H>/<dev>, host:h<H>.
// "for <ns>" is required by, and only allowed on, the kinds
// FaultTakesDuration names. The result is sorted by time (stable).
absl::StatusOr<std::vector<ScriptedFault>> ParseFaultScript(std::string_view text);

}  // namespace ferry::sim

#endif  // FERRY_SIM_RNIC_FAULT_PLAN_H_
