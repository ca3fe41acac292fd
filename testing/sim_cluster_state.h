// testing/sim_cluster_state.h: SimCluster::State, what a SimCluster owns,
// shared by testing/sim_cluster.cc (lifecycle: create, restart, finish) and
// testing/sim_cluster_faults.cc (the fault plan: which part of the world
// applies each scripted kind, pauses, partitions, the swarm's schedule).
// Internal to libferry-testing; never installed.
//
// Thread safety: the hosts' engines run their own threads; the world's
// pump runs the timers. A host's proc_verbs pointer is written (process
// start) and read (timers) only with the world mutex held, so a timer never
// sees a half-replaced process. What must stay true: engines are shut down
// and destroyed before the ports and the world.
#ifndef FERRY_TESTING_SIM_CLUSTER_STATE_H_
#define FERRY_TESTING_SIM_CLUSTER_STATE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ferry/config.h"
#include "ferry/engine.h"
#include "ferry/testing.h"
#include "hal/control_net.h"
#include "hal/entropy.h"
#include "hal/verbs.h"
#include "sim/prng.h"
#include "sim/rnic/fault_plan.h"
#include "sim/threaded/locked_world.h"
#include "sim/world/process_verbs.h"

namespace ferry::testing {

inline constexpr uint32_t kSimClusterHostsMax = 8;

// The swarm's process and network schedule: every period, each host is
// paused with the plan's paused_peer chance and cut off with its
// ctrl_partition chance, for a duration drawn from these ranges.
inline constexpr uint64_t kSwarmPeriodNs = 1'000'000;
inline constexpr uint64_t kSwarmPauseNsMin = 100'000;
inline constexpr uint64_t kSwarmPauseNsMax = 2'000'000;
inline constexpr uint64_t kSwarmPartitionNsMin = 100'000;
inline constexpr uint64_t kSwarmPartitionNsMax = 5'000'000;

struct SimCluster::State {
  struct Host {
    std::string addr;
    std::unique_ptr<hal::Verbs> verbs;                   // the host's RNIC
    std::shared_ptr<simworld::ProcessVerbs> proc_verbs;  // this process's view of it
    std::unique_ptr<hal::ControlNet> net;
    std::unique_ptr<hal::Entropy> entropy;
    std::unique_ptr<Engine> engine;
  };
  std::unique_ptr<sim::LockedWorld> world;
  std::vector<Host> hosts;
  std::string plan_text;
  EngineConfig config;
  bool finished = false;
  std::atomic<uint64_t> pause_seq{0};       // pauses started (ids 1..)
  std::atomic<uint64_t> partitions{0};      // partitions started
  std::atomic<bool> faults_stopped{false};  // Finish: no new pause or partition

  // Binds host h's control endpoint and starts its engine process.
  absl::Status StartProcess(uint32_t h);

  // sim_cluster_faults.cc. A scripted fault the cluster applies: now (in
  // force on return), or at f.at_ns (by the pump; now, if past).
  // kInvalidArgument for a kind or target the cluster cannot apply.
  absl::Status Schedule(const sim::ScriptedFault& f, bool now);
  // The swarm's periodic pauses and partitions at the plan's rates.
  absl::Status ScheduleSwarm(const sim::FaultPlan& plan, uint64_t seed);
  // Ends every pause and partition and stops the swarm's schedule.
  void StopFaults();

 private:
  using TimerCtx = sim::LockedWorld::TimerCtx;
  void StartPause(TimerCtx& ctx, uint32_t h, uint64_t duration_ns);
  void StartPartition(TimerCtx& ctx, uint32_t h, uint64_t duration_ns);
  void SwarmTick(TimerCtx& ctx, sim::Ratio pause, sim::Ratio partition,
                 std::shared_ptr<sim::Prng> prng);
};

// Whether the fabric applies scripted kind k (else the cluster does: a
// process pause, the control network's faults; peer_restart is refused).
bool FabricApplies(sim::FaultKind k);

// The control network's rates from a swarm plan's ctrl_loss, ctrl_dup,
// ctrl_reorder (200 us of jitter) and ctrl_delay (delays of 1-200 us), and
// peer_restart switched off in the plan (a restart replaces engine(h):
// SimCluster::RestartHost does it at a point the test chooses).
sim::NetPlan SplitSwarmPlan(sim::FaultPlan* plan);

}  // namespace ferry::testing

#endif  // FERRY_TESTING_SIM_CLUSTER_STATE_H_
