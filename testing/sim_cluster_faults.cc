// testing/sim_cluster_faults.cc: the part of SimCluster's fault plan the
// cluster applies itself, as world timers (sim/threaded/locked_world.h):
// a host's process paused (paused_peer: its verbs calls wait, its control
// endpoint neither delivers nor sends), a host cut off the control network
// (ctrl_partition), the next control message from a host lost, duplicated
// or delayed (ctrl_loss, ctrl_dup, ctrl_delay), and the swarm's periodic
// pauses and partitions. The fabric applies every other kind.
//
// What must stay true: a timer touches a host's process only through the
// ProcessVerbs it read under the world mutex, and ends only the pause it
// started (a later pause, or a restart, supersedes it); after StopFaults()
// no pause or partition starts and none is left in force.
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sim/net/sim_network.h"
#include "sim/prng.h"
#include "testing/sim_cluster_state.h"

namespace ferry::testing {
namespace {

using K = sim::FaultKind;

}  // namespace

// Pauses host h's process for duration_ns of virtual time.
void SimCluster::State::StartPause(TimerCtx& ctx, uint32_t h, uint64_t duration_ns) {
  if (faults_stopped.load()) return;
  std::shared_ptr<simworld::ProcessVerbs> pv = hosts[h].proc_verbs;
  if (pv == nullptr || pv->dead()) return;
  const uint64_t id = pause_seq.fetch_add(1) + 1;
  pv->Pause(id);
  (void)ctx.net.Pause(hosts[h].addr);
  ctx.At(ctx.now_ns + duration_ns, [this, h, pv, id](TimerCtx& c) {
    // Only the pause this timer started, of the process it paused.
    if (pv->Resume(id) && hosts[h].proc_verbs == pv) (void)c.net.Resume(hosts[h].addr);
  });
}

// Cuts host h off every other host's control endpoint for duration_ns.
// (Overlapping partitions of one host end at the first one's end.)
void SimCluster::State::StartPartition(TimerCtx& ctx, uint32_t h, uint64_t duration_ns) {
  if (faults_stopped.load()) return;
  partitions.fetch_add(1);
  for (uint32_t g = 0; g < hosts.size(); ++g) {
    if (g != h) (void)ctx.net.Partition(hosts[h].addr, hosts[g].addr, sim::PartitionDir::kBoth);
  }
  ctx.At(ctx.now_ns + duration_ns, [this, h](TimerCtx& c) {
    for (uint32_t g = 0; g < hosts.size(); ++g) {
      if (g != h) (void)c.net.Heal(hosts[h].addr, hosts[g].addr);
    }
  });
}

// The swarm's schedule: every kSwarmPeriodNs, each host in order draws a
// pause and a partition at the plan's rates.
void SimCluster::State::SwarmTick(TimerCtx& ctx, sim::Ratio pause, sim::Ratio partition,
                                  std::shared_ptr<sim::Prng> prng) {
  if (faults_stopped.load()) return;
  for (uint32_t h = 0; h < hosts.size(); ++h) {
    if (prng->Chance(pause)) StartPause(ctx, h, prng->Range(kSwarmPauseNsMin, kSwarmPauseNsMax));
    if (prng->Chance(partition))
      StartPartition(ctx, h, prng->Range(kSwarmPartitionNsMin, kSwarmPartitionNsMax));
  }
  ctx.At(ctx.now_ns + kSwarmPeriodNs,
         [this, pause, partition, prng](TimerCtx& c) { SwarmTick(c, pause, partition, prng); });
}

bool FabricApplies(sim::FaultKind k) {
  switch (k) {
    case K::kPeerRestart:
    case K::kPausedPeer:
    case K::kCtrlDelay:
    case K::kCtrlLoss:
    case K::kCtrlDup:
    case K::kCtrlReorder:
    case K::kCtrlPartition:
      return false;
    default:
      return true;
  }
}

absl::Status SimCluster::State::Schedule(const sim::ScriptedFault& f, bool now) {
  const std::string kind(sim::FaultKindName(f.kind));
  if (f.kind == K::kPeerRestart)
    return absl::InvalidArgumentError(
        "peer_restart: call SimCluster::RestartHost(h) (it replaces engine(h), so it happens "
        "at a point the test chooses)");
  if (f.kind == K::kCtrlReorder)
    return absl::InvalidArgumentError(
        "ctrl_reorder is a rate (swarm_fault_plan); script 'ctrl_delay host:h<H> for <ns>'");
  if (f.target.kind != sim::TargetKind::kHost || f.target.host >= hosts.size())
    return absl::InvalidArgumentError(
        absl::StrCat(kind, " needs a target host:h<H> with H < ", hosts.size()));
  const uint32_t h = f.target.host;
  const uint64_t d = f.duration_ns;
  sim::LockedWorld::TimerFn fn;
  if (f.kind == K::kPausedPeer) {
    fn = [this, h, d](TimerCtx& c) { StartPause(c, h, d); };
  } else if (f.kind == K::kCtrlPartition) {
    fn = [this, h, d](TimerCtx& c) { StartPartition(c, h, d); };
  } else {
    sim::ScriptedNetAction a;
    a.kind = f.kind == K::kCtrlLoss  ? sim::ScriptedNetAction::Kind::kDrop
             : f.kind == K::kCtrlDup ? sim::ScriptedNetAction::Kind::kDuplicate
                                     : sim::ScriptedNetAction::Kind::kDelay;
    a.delay_ns = d;
    fn = [this, h, a](TimerCtx& c) {
      for (uint32_t g = 0; g < hosts.size(); ++g) {
        if (g != h) (void)c.net.ScriptNext(hosts[h].addr, hosts[g].addr, a);
      }
    };
  }
  if (!now) return world->At(f.at_ns, std::move(fn));
  world->RunNow(fn);
  return absl::OkStatus();
}

absl::Status SimCluster::State::ScheduleSwarm(const sim::FaultPlan& plan, uint64_t seed) {
  const sim::Ratio pause = plan.Rate(K::kPausedPeer);
  const sim::Ratio partition = plan.Rate(K::kCtrlPartition);
  if (pause.num == 0 && partition.num == 0) return absl::OkStatus();
  auto prng = std::make_shared<sim::Prng>(seed ^ 0x5ca1ab1eULL);
  return world->At(kSwarmPeriodNs, [this, pause, partition, prng](TimerCtx& c) {
    SwarmTick(c, pause, partition, prng);
  });
}

void SimCluster::State::StopFaults() {
  faults_stopped.store(true);
  world->WithNet([&](sim::SimNetwork& net) {
    net.HealAll();
    for (Host& hs : hosts) {
      if (hs.proc_verbs == nullptr) continue;
      hs.proc_verbs->EndPause();
      (void)net.Resume(hs.addr);
    }
    return 0;
  });
}

sim::NetPlan SplitSwarmPlan(sim::FaultPlan* plan) {
  sim::NetPlan net;
  net.loss = plan->Rate(K::kCtrlLoss);
  net.duplicate = plan->Rate(K::kCtrlDup);
  net.reorder = plan->Rate(K::kCtrlReorder);
  if (net.reorder.num != 0) net.reorder_jitter_ns_max = 200'000;
  if (plan->Enabled(K::kCtrlDelay)) {
    net.delay_ns_min = 1'000;
    net.delay_ns_max = 200'000;
  }
  plan->Set(K::kPeerRestart, sim::kNever);
  return net;
}

}  // namespace ferry::testing
