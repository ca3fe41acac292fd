// sim/world/swarm.h: the swarm workload on the two-engine world: a seeded
// fault plan (the RNIC's own kinds plus the runner's families: peer restart,
// paused peer, control-network faults, resource failures), two waves of
// READs and WRITEs both ways, and the contracts every run is judged by.
// Used by the EngineSwarm gtest and by ferry-sim (tools/ferry-sim).
//
// Thread safety: none (one run at a time per thread; no shared state).
// What must stay true:
// - Determinism (docs/design.md section 7): RunSwarm(seed, options) depends only
//   on its arguments. The plan comes from Prng(seed * 7919 + 1) (the fabric
//   plan first, then one Fork per runner family, each drawn whether the
//   family is on or not, so switching a family off leaves the others'
//   draws alone); the world from Prng(seed). Seed X alone and seed X after
//   seed Y in one process give the same report (no globals).
// - Rates are integer ratios (sim::Ratio); every family and rate is printed
//   in SwarmPlan::ToString().
//
// What a run judges (docs/simulator.md, "ferry-sim"):
//   safety   the oracle after every step (shadow memory: no DMA into a
//            buffer after its task published; quota vs ground truth; one
//            publish per task; slices resolve once), every fabric violation
//            (wrong actor, foreign or destroyed handle, unacked events), and
//            every COMPLETED task moved exactly the right bytes;
//   liveness both processes come up; segments open; once the runner's fault
//            window closed (resume, heal, clean control network) every task
//            of a live process is terminal within a bounded virtual time; a
//            second wave after the faults is terminal too; shutdown drains
//            and leaks nothing (C9: engine ledger and simulated RNIC).
// Tasks of a process that restarted died with it and are not judged (the
// contract promises nothing about a dead process's tasks). The RNIC's own
// seeded kinds cannot be switched off mid-run, so they stay on during the
// second wave: it asserts terminal, not COMPLETED.
#ifndef FERRY_SIM_WORLD_SWARM_H_
#define FERRY_SIM_WORLD_SWARM_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/mutation.h"
#include "sim/net/sim_network.h"
#include "sim/prng.h"
#include "sim/rnic/fault_plan.h"
#include "sim/trace.h"
#include "sim/world/swarm_shape.h"
#include "sim/world/two_engines.h"

namespace ferry::simworld {

// Fault families a swarm run may draw. Each family that is on is still
// enabled per seed only with probability 1/2 (swarm testing). All are on by
// default.
struct SwarmFamilies {
  bool rnic = true;           // the fabric's seeded kinds wr_flush .. port_flap
  bool resource_fail = true;  // verbs create failures: bring-up, endpoints, CQ re-creation
  bool peer_restart = true;   // a process exits and a new incarnation starts
  bool paused_peer = true;    // a process stops for a while (control plane silent)
  bool ctrl = true;           // control network: delay, loss, dup, reorder, partition
  bool device = true;         // the RNIC reports DEVICE_FATAL or GID_CHANGE
  // The RNIC's stall kinds (sim::StallPlan): a QP that hangs and recovers
  // after the deadline, a move to ERR held while the QP executes, a CQE
  // delivered twice. Drawn for the random world only (the fixed world's
  // runs are the ones its named regressions were found on).
  bool stall = true;

  // "rnic,resource_fail,peer_restart,paused_peer,ctrl,device,stall" (the families on).
  std::string ToString() const;
  // A comma-separated list of family names; "all", "none" and "default"
  // too; a name prefixed with '-' switches it off ("all,-ctrl").
  static absl::StatusOr<SwarmFamilies> Parse(std::string_view text);
  bool operator==(const SwarmFamilies&) const = default;
};

// The runner's part of a plan (the RNIC applies its own FaultPlan).
struct WorldPlan {
  uint64_t tick_ns = 1'000'000;      // one opportunity per tick (and per host)
  uint32_t ticks = 20;               // the fault window: ticks x tick_ns after submit
  sim::Ratio restart = sim::kNever;  // per tick per host
  uint32_t restarts_max = 2;
  sim::Ratio pause = sim::kNever;  // per tick per host
  uint64_t pause_ns = 0;
  sim::Ratio partition = sim::kNever;  // per tick
  uint64_t partition_ns = 0;
  // After its peer restarted, a process opens the peer's segment again
  // (fresh rkeys); else it keeps submitting against the old descriptor.
  bool reopen_after_peer_restart = false;
  bool ctrl_rates = false;  // net carries drawn delay/loss/dup/reorder rates
  sim::NetPlan net;
  sim::Ratio device_fatal = sim::kNever;  // per tick per host
  sim::Ratio gid_change = sim::kNever;    // per tick per host
  std::string ToString() const;
};

struct SwarmPlan {
  uint64_t seed = 0;
  SwarmFamilies families;
  WorldShape shape;      // the fixed world, or the random profile's draw
  sim::FaultPlan rnic;   // external kinds (peer_restart, paused_peer, ctrl_*) off:
                         // the runner applies those from `world`
  sim::StallPlan stall;  // off unless the random world and the stall family
  WorldPlan world;
  std::vector<WorldFault> schedule;  // at_ns relative to the first wave's submit
  std::string ToString() const;
};

SwarmPlan DrawSwarmPlan(uint64_t seed, const SwarmFamilies& families,
                        WorldProfile profile = WorldProfile::kFixed);

enum class FailureClass : uint8_t { kNone, kSafety, kLiveness };
std::string_view FailureClassName(FailureClass c);

struct SwarmOptions {
  // kFixed: the two-host world the named regressions replay on; kRandom:
  // the world drawn from the seed (swarm_shape.h).
  WorldProfile profile = WorldProfile::kFixed;
  SwarmFamilies families;
  base::Mutations mutations;  // effective only in the *_mut build
  size_t trace_record_max = 0;
  // Period of the first wave's driver rounds (part of the workload, so of
  // the replay key when not the default).
  uint64_t round_ns = 1'000'000;
  // Per-seed budgets (part of the replay key when not the default): the
  // virtual time a wave may take to become terminal, and the scheduler
  // steps of one RunUntil.
  uint64_t terminal_ns = 5'000'000'000;
  uint64_t steps_max = 5'000'000;
  // How owners with WRs outstanding wait (part of the replay key): kSpin
  // here, so the named regressions replay the runs they were found in;
  // ferry-sim sweeps with kCqe unless told --wake spin.
  WakeModel wake = WakeModel::kSpin;
  // Memory windows (part of the replay key): the random profile's shape
  // draws whether buffers are revocable; false registers them plainly, as
  // before windows existed, so the named regressions found then replay
  // the runs they were found in (ferry-sim: --windows off).
  bool windows = true;
  // READ depth (part of the replay key): true uses the qp_rd_atomic_max
  // the random profile's shape draws (1, 2 or 16); false here keeps the
  // default 16, which no QP of a swarm world (wr_depth <= 16) exceeds, so
  // the named regressions, found before the sim honoured max_rd_atomic,
  // replay the runs they were found in; ferry-sim sweeps with true unless
  // told --read-depth off.
  bool read_depth = false;
  // CQs per worker (part of the replay key): true uses the cqs_per_worker
  // the random profile's shape draws (1, 2 or 3); false keeps 1, so the
  // named regressions, found while every endpoint was on its owner's first
  // CQ, replay the runs they were found in; ferry-sim sweeps with true
  // unless told --cq-spread off.
  bool cq_spread = false;
  // Notifications (part of the replay key; ferry-sim --notify on): the
  // engines post receive WRs (notify_recv_slots 2, rnr retries 3) and
  // every Submit of a new batch carries a notification to its peer, each
  // delivery judged by the oracle (N1-N3) and every COMPLETED one checked
  // delivered at the end (N5). Off by default, so every seed found before
  // notifications replays.
  bool notify = false;
  // Probe wakes (part of the replay key; ferry-sim --wake-probes, on by
  // default there): a worker asleep is stepped at drawn times, and a probe
  // step that posts a WR or records an event fails the run as a lost
  // wake-up (engine_runtime.h, WakeProbes). Off here, so every seed found before them replays.
  bool wake_probes = false;
};

struct SwarmReport {
  uint64_t seed = 0;
  FailureClass failure = FailureClass::kNone;
  std::string message;  // empty when the run kept every contract
  std::string plan_text;
  std::array<uint64_t, sim::kFaultKinds> faults{};  // injected, per kind
  std::map<std::string, uint64_t> probes;           // every known probe, 0 if not hit
  std::array<uint64_t, 8> status{};                 // judged tasks by terminal status
  uint64_t tasks_dead = 0;                          // died with a restarted process
  WorldShape shape;
  bool stall_drawn = false;     // the plan drew a stall kind (sim::StallPlan)
  uint64_t c8_probes = 0;       // C8 refusals asserted (FreeBatch, Unregister, CloseSegment)
  uint64_t cancels = 0;         // Cancel calls the workload made
  uint64_t wave2_attempts = 0;  // random profile: liveness transfers submitted
  // Random profile: slot reuses deferred because a WRITE that was not
  // COMPLETED could still land in the slot's remote range.
  uint64_t remote_waits = 0;
  uint64_t open_retries = 0;  // segment opens retried after DEADLINE_EXCEEDED
  uint64_t wake_probes = 0;   // probe steps of asleep workers (SwarmOptions::wake_probes)
  uint64_t lost_wakeups = 0;  // of them, steps that posted a WR or recorded an event
  uint64_t trace_hash = 0;
  uint64_t trace_entries = 0;
  uint64_t end_ns = 0;
  // Readable replay (filled when trace_record_max > 0).
  std::vector<sim::TraceEntry> trace;
  std::vector<std::string> actor_names;   // by scheduler index
  std::map<uint64_t, std::string> names;  // fnv1a64(key or address) -> text
};

SwarmReport RunSwarm(uint64_t seed, const SwarmOptions& options);

// Fills a report's faults, probes, names, hash and trace from a finished
// world (swarm_run.cc calls it at the end of every run).
void CollectReport(TwoEngines& w, const SwarmPlan& plan, size_t trace_record_max,
                   SwarmReport* report);

// Probe names every report lists (lifecycle records, worker, RNIC, network
// and runner counters).
std::vector<std::string> KnownProbes();
// Known probes of defensive paths no run reaches without a bug to defend
// against (the probe gate does not require them): error_req (a REQ with the
// same incarnation and generation as the recorded one but other QPNs) and
// w.stale_cqes (a CQE whose wr_id generation is not its slot's: the engine
// frees a slot only on its CQE or on destroy evidence, so no verbs-legal
// device produces one).
std::vector<std::string> DefensiveProbes();

}  // namespace ferry::simworld

#endif  // FERRY_SIM_WORLD_SWARM_H_
