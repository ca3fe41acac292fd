// sim/world/swarm.cc: fault families, plan drawing, the probes a report
// lists and the report's collection from a finished world (the run itself:
// swarm_run.cc; what is judged: swarm.h).
#include "sim/world/swarm.h"

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/check.h"
#include "base/fnv1a.h"
#include "sim/rnic/shadow_memory.h"

namespace ferry::simworld {
namespace {

// Lifecycle record kinds of engine/worker.cc (SimObserver records), listed
// so a report shows the probes a sweep never reached as 0.
constexpr std::array<std::string_view, 42> kLifecycleProbes = {
    "cq_err",           "cq_recreated",    "cqe_error",
    "ctx_reenabled",    "ctx_resumed",     "destroy_failed",
    "device_fatal",     "dup_req",         "ep_create",
    "ep_destroyed",     "ep_evict",        "ep_ready",
    "ep_retire",        "error_req",       "gid_change",
    "port_active",      "port_err",        "qp_destroyed",
    "rail_error",       "rail_pause",      "rep_dropped",
    "rep_recv",         "rep_sent",        "repost",
    "req_recv",         "req_sent",        "retry",
    "rtu_dropped",      "rtu_recv",        "rtu_sent",
    "stale_entry",      "stale_recv",      "stale_req",
    "timeout",          "timeout_retire",  "zombie_escalate",
    "req_parked",       "rep_mismatch",    "refetch_applied",
    "req_other_target", "ctx_up_in_place", "ctx_reenable_failed",
};

constexpr std::array<std::string_view, 25> kCounterProbes = {
    "w.stale_cqes",
    "w.zombie_escalations",
    "w.cq_recreated",
    "w.evictions",
    "w.timeout_retires",
    "w.stale_sweep_entries",
    "w.rail_resumes",               // a paused rail carried traffic again (cooldown left)
    "w.simultaneous_opens",         // both sides sent a REQ; one endpoint came of both
    "w.partial_destroys",           // one QP of an endpoint destroyed, a sibling's destroy failed
    "w.busy_passed_over",           // eviction took an idle endpoint over a busy one
    "w.other_incarnation_fails",    // slices failed unposted: their peer process restarted
    "w.other_incarnation_retires",  // a READY endpoint retired for a slice of another incarnation
    "w.posted_inline",              // WRs posted inline (EngineConfig::inline_bytes_max)
    "rnic.retransmits",
    "rnic.retries_suppressed",  // a NAK or implied NAK while a retry was under way
    "rnic.packets_dropped",
    "rnic.qpns_reused",       // a QP created with the number of a destroyed one
    "rnic.read_depth_waits",  // a READ waited: max_rd_atomic READs outstanding on its QP
    "world.start_attempts_failed",
    "world.restarts",
    "world.device_events",
    "world.cancels_while_posted",      // a cancel raced WRs on the RNIC
    "world.late_success_after_latch",  // a slice succeeded after its task latched
    "world.cq_quota_full",             // CQ-full back-pressure (quota at cqe_limit)
    "world.refetch_answers_late",      // a refetch answer after its refetch ended (changed nothing)
};

// One of three menu entries, drawn whether used or not.
template <typename T>
T Pick(sim::Prng& p, const std::array<T, 3>& menu) {
  return menu[p.Below(menu.size())];
}

}  // namespace

std::string SwarmFamilies::ToString() const {
  std::vector<std::string> on;
  if (rnic) on.push_back("rnic");
  if (resource_fail) on.push_back("resource_fail");
  if (peer_restart) on.push_back("peer_restart");
  if (paused_peer) on.push_back("paused_peer");
  if (ctrl) on.push_back("ctrl");
  if (device) on.push_back("device");
  if (stall) on.push_back("stall");
  return on.empty() ? std::string("none") : absl::StrJoin(on, ",");
}

absl::StatusOr<SwarmFamilies> SwarmFamilies::Parse(std::string_view text) {
  SwarmFamilies f;
  f.rnic = f.resource_fail = f.peer_restart = f.paused_peer = f.ctrl = f.device = f.stall = false;
  size_t n = 0;
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    if (++n > 16) return absl::InvalidArgumentError("too many families");
    bool value = true;
    if (!part.empty() && part[0] == '-') {
      value = false;
      part.remove_prefix(1);
    }
    if (part == "default") {
      if (!value) return absl::InvalidArgumentError("'-default' means nothing");
      f = SwarmFamilies{};
    } else if (part == "all" || part == "none") {
      const bool v = part == "all" ? value : !value;
      f.rnic = f.resource_fail = f.peer_restart = f.paused_peer = f.ctrl = f.device = f.stall = v;
    } else if (part == "rnic") {
      f.rnic = value;
    } else if (part == "resource_fail") {
      f.resource_fail = value;
    } else if (part == "peer_restart") {
      f.peer_restart = value;
    } else if (part == "paused_peer") {
      f.paused_peer = value;
    } else if (part == "ctrl") {
      f.ctrl = value;
    } else if (part == "device") {
      f.device = value;
    } else if (part == "stall") {
      f.stall = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown fault family '", part,
          "' (families: rnic, resource_fail, peer_restart, paused_peer, ctrl, device, stall, "
          "all, none, default)"));
    }
  }
  return f;
}

std::string WorldPlan::ToString() const {
  std::string out = absl::StrCat("world plan (runner faults; window ", ticks, " ticks of ", tick_ns,
                                 " ns after the first submit):\n");
  absl::StrAppend(
      &out, "  peer_restart ", RatioText(restart), " per tick per host (max ", restarts_max, ")",
      restart.num == 0            ? ""
      : reopen_after_peer_restart ? ", the survivor opens the restarted peer's segment again"
                                  : ", the survivor keeps the old segment",
      "\n");
  absl::StrAppend(&out, "  paused_peer ", RatioText(pause), " per tick per host",
                  pause.num == 0 ? "" : absl::StrCat(", ", pause_ns, " ns each"), "\n");
  absl::StrAppend(&out, "  ctrl_partition ", RatioText(partition), " per tick",
                  partition.num == 0 ? "" : absl::StrCat(", ", partition_ns, " ns each"), "\n");
  absl::StrAppend(&out, "  ctrl rates ", ctrl_rates ? "on" : "off", ": ", net.ToString(), "\n");
  absl::StrAppend(&out, "  device_fatal ", RatioText(device_fatal),
                  " per tick per host, gid_change ", RatioText(gid_change), " per tick per host\n");
  return out;
}

std::string SwarmPlan::ToString() const {
  std::string out = absl::StrCat("seed ", seed, " families ", families.ToString(), "\n");
  if (shape.profile != WorldProfile::kFixed) absl::StrAppend(&out, shape.ToString());
  absl::StrAppend(&out, rnic.ToString(), world.ToString());
  if (stall.AnyEnabled()) absl::StrAppend(&out, stall.ToString());
  absl::StrAppend(&out, "  schedule (", schedule.size(), " runner faults):");
  for (const WorldFault& f : schedule) absl::StrAppend(&out, "\n    ", f.ToString());
  absl::StrAppend(&out, "\n");
  return out;
}

namespace {

// The runner faults of a world plan at virtual times: per tick, per host,
// the plan's chances, from schedule_p (restarts, pauses, partitions) and
// device_p (device events); sorted by time (stable: draw order breaks
// ties), ending with kStopFaults.
// A world of more than two hosts (the random profile) also draws each cut's
// other side and each device event's NIC; the fixed world draws neither.
std::vector<WorldFault> DrawSchedule(const WorldPlan& w, const WorldShape& shape,
                                     sim::Prng& schedule_p, sim::Prng& device_p) {
  const uint32_t hosts = shape.hosts;
  const bool random = shape.profile == WorldProfile::kRandom;
  std::vector<WorldFault> out;
  // The schedule: per tick, per host, the chances above (each Chance is
  // drawn unconditionally so the schedule's draws do not depend on which
  // families are on).
  uint32_t restarts = 0;
  for (uint32_t t = 0; t < w.ticks; ++t) {
    const uint64_t at = uint64_t{t} * w.tick_ns + schedule_p.Below(w.tick_ns);
    for (uint32_t h = 0; h < hosts; ++h) {
      const bool r = schedule_p.Chance(w.restart);
      const bool pz = schedule_p.Chance(w.pause);
      if (r && restarts < w.restarts_max) {
        ++restarts;
        out.push_back(WorldFault{at, WorldFaultKind::kRestart, h, 0, {}});
      }
      if (pz) out.push_back(WorldFault{at, WorldFaultKind::kPause, h, w.pause_ns, {}});
    }
    const bool cut = schedule_p.Chance(w.partition);
    const uint32_t from = static_cast<uint32_t>(schedule_p.Below(hosts));
    const bool both = schedule_p.Below(2) == 1;
    const uint32_t to =
        random ? static_cast<uint32_t>((from + schedule_p.Range(1, hosts - 1)) % hosts) : 1 - from;
    if (cut)
      out.push_back(WorldFault{at, WorldFaultKind::kPartition, from, w.partition_ns,
                               both ? sim::PartitionDir::kBoth : sim::PartitionDir::kOneWay, to});
  }
  // Device events from their own stream (kept apart so the schedule above
  // is the same whether or not this family is on).
  for (uint32_t t = 0; t < w.ticks; ++t) {
    const uint64_t at = uint64_t{t} * w.tick_ns + device_p.Below(w.tick_ns);
    for (uint32_t h = 0; h < hosts; ++h) {
      const bool fatal = device_p.Chance(w.device_fatal);
      const bool gid = device_p.Chance(w.gid_change);
      const uint32_t dev = random ? static_cast<uint32_t>(device_p.Below(shape.nics)) : 0;
      if (fatal) out.push_back(WorldFault{at, WorldFaultKind::kDeviceFatal, h, 0, {}, 1, dev});
      if (gid) out.push_back(WorldFault{at, WorldFaultKind::kGidChange, h, 0, {}, 1, dev});
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const WorldFault& a, const WorldFault& b) { return a.at_ns < b.at_ns; });
  out.push_back(WorldFault{uint64_t{w.ticks} * w.tick_ns, WorldFaultKind::kStopFaults, 0, 0, {}});
  return out;
}

// The stall kinds from a stream of their own (the rest of the plan is the
// same with or without them), for the random world only; on in half the
// seeds.
sim::StallPlan DrawStall(uint64_t seed, const SwarmFamilies& families, const WorldShape& shape) {
  if (!families.stall || shape.profile != WorldProfile::kRandom) return {};
  sim::Prng stall_p(seed * 7919 + 5);
  if (stall_p.Below(2) == 0) return {};
  return sim::StallPlan::Draw(stall_p, shape.slice_timeout_ns);
}

}  // namespace

SwarmPlan DrawSwarmPlan(uint64_t seed, const SwarmFamilies& families, WorldProfile profile) {
  SwarmPlan p;
  p.seed = seed;
  p.families = families;
  p.shape = ShapeOf(profile, seed);
  sim::Prng prng(seed * 7919 + 1);
  p.rnic = sim::FaultPlan::Draw(prng);
  // One fork per runner family, in a fixed order, each always drawn.
  sim::Prng restart_p = prng.Fork();
  sim::Prng pause_p = prng.Fork();
  sim::Prng ctrl_p = prng.Fork();
  sim::Prng partition_p = prng.Fork();
  sim::Prng schedule_p = prng.Fork();
  sim::Prng device_p = prng.Fork();  // last: the forks before keep their draws

  using K = sim::FaultKind;
  if (!families.rnic) {
    for (K k : {K::kWrFlush, K::kLateCqe, K::kHungQp, K::kDestroyQpFail, K::kModifyQpFail,
                K::kPostSendEnomem, K::kCqOverrun, K::kPacketLoss, K::kLinkDown, K::kPortFlap})
      p.rnic.Set(k, sim::kNever);
  }
  if (!families.resource_fail) p.rnic.Set(K::kResourceFail, sim::kNever);
  // The runner applies these from the world plan; the fabric ignores them.
  for (K k : {K::kPeerRestart, K::kPausedPeer, K::kCtrlDelay, K::kCtrlLoss, K::kCtrlDup,
              K::kCtrlReorder, K::kCtrlPartition})
    p.rnic.Set(k, sim::kNever);

  WorldPlan& w = p.world;
  const bool restart_on = restart_p.Below(2) == 1;
  const sim::Ratio restart_rate = Pick<sim::Ratio>(restart_p, {{{1, 4}, {1, 16}, {1, 64}}});
  const bool reopen = restart_p.Below(2) == 1;
  if (families.peer_restart && restart_on) {
    w.restart = restart_rate;
    w.reopen_after_peer_restart = reopen;
  }
  const bool pause_on = pause_p.Below(2) == 1;
  const sim::Ratio pause_rate = Pick<sim::Ratio>(pause_p, {{{1, 4}, {1, 16}, {1, 64}}});
  const uint64_t pause_ns = Pick<uint64_t>(pause_p, {{300'000, 3'000'000, 20'000'000}});
  if (families.paused_peer && pause_on) {
    w.pause = pause_rate;
    w.pause_ns = pause_ns;
  }
  const bool ctrl_on = ctrl_p.Below(2) == 1;
  const sim::NetPlan net = sim::NetPlan::Draw(ctrl_p);
  if (families.ctrl && ctrl_on) {
    w.ctrl_rates = true;
    w.net = net;
  }
  const bool part_on = partition_p.Below(2) == 1;
  const sim::Ratio part_rate = Pick<sim::Ratio>(partition_p, {{{1, 4}, {1, 16}, {1, 64}}});
  const uint64_t part_ns = Pick<uint64_t>(partition_p, {{300'000, 3'000'000, 20'000'000}});
  if (families.ctrl && part_on) {
    w.partition = part_rate;
    w.partition_ns = part_ns;
  }
  const bool device_on = device_p.Below(2) == 1;
  const sim::Ratio fatal_rate = Pick<sim::Ratio>(device_p, {{{1, 16}, {1, 64}, {1, 256}}});
  const sim::Ratio gid_rate = Pick<sim::Ratio>(device_p, {{{1, 16}, {1, 64}, {1, 256}}});
  if (families.device && device_on) {
    w.device_fatal = fatal_rate;
    w.gid_change = gid_rate;
  }
  p.schedule = DrawSchedule(w, p.shape, schedule_p, device_p);
  p.stall = DrawStall(seed, families, p.shape);
  return p;
}

std::string_view FailureClassName(FailureClass c) {
  switch (c) {
    case FailureClass::kNone:
      return "ok";
    case FailureClass::kSafety:
      return "safety";
    case FailureClass::kLiveness:
      return "liveness";
  }
  return "?";
}

std::vector<std::string> KnownProbes() {
  std::vector<std::string> out;
  for (std::string_view p : kLifecycleProbes) out.emplace_back(p);
  for (std::string_view p : kCounterProbes) out.emplace_back(p);
  return out;
}

// w.stale_cqes is reachable since the stall family's dup_cqe (a device that
// delivers a CQE twice); error_req still needs a bug to defend against.
std::vector<std::string> DefensiveProbes() { return {"error_req"}; }

void CollectReport(TwoEngines& w, const SwarmPlan& plan, size_t trace_record_max,
                   SwarmReport* report) {
  SwarmReport& r = *report;
  const sim::FabricStats& fs = w.fabric().stats();
  for (size_t k = 0; k < sim::kFaultKinds; ++k) r.faults[k] = fs.faults[k];
  const sim::NetCounters& nc = w.net().counters();
  const WorldCounters& wc = w.world_counters();
  auto fault = [&](sim::FaultKind k) -> uint64_t& { return r.faults[static_cast<size_t>(k)]; };
  fault(sim::FaultKind::kPausedPeer) += wc.pauses;
  fault(sim::FaultKind::kCtrlPartition) += wc.partitions;
  fault(sim::FaultKind::kCtrlLoss) += nc.Dropped(sim::NetDrop::kLoss);
  fault(sim::FaultKind::kCtrlDup) += nc.duplicated;
  fault(sim::FaultKind::kCtrlReorder) += nc.reordered;
  if (plan.world.ctrl_rates) fault(sim::FaultKind::kCtrlDelay) += nc.sent;

  for (const std::string& p : KnownProbes()) r.probes[p] = 0;
  for (const SimObserver* o : w.observers())
    for (const LifecycleRecord& rec : o->records()) {
      if (rec.kind == "post") continue;  // one per WR: not a probe
      ++r.probes[rec.kind];
      r.names[base::Fnv1a64(rec.key)] = rec.key;
    }
  for (const engine::WorkerStats& s : w.worker_stats()) {
    r.probes["w.stale_cqes"] += s.stale_cqes;
    r.probes["w.zombie_escalations"] += s.zombie_escalations;
    r.probes["w.cq_recreated"] += s.cq_recreated;
    r.probes["w.evictions"] += s.evictions;
    r.probes["w.timeout_retires"] += s.timeout_retires;
    r.probes["w.stale_sweep_entries"] += s.stale_sweep_entries;
    r.probes["w.rail_resumes"] += s.rail_resumes;
    r.probes["w.simultaneous_opens"] += s.simultaneous_opens;
    r.probes["w.partial_destroys"] += s.partial_destroys;
    r.probes["w.busy_passed_over"] += s.busy_passed_over;
    r.probes["w.other_incarnation_fails"] += s.other_incarnation_fails;
    r.probes["w.other_incarnation_retires"] += s.other_incarnation_retires;
    r.probes["w.posted_inline"] += s.posted_inline;
  }
  r.probes["rnic.retransmits"] += fs.retransmits;
  r.probes["rnic.retries_suppressed"] += fs.retries_suppressed;
  r.probes["rnic.packets_dropped"] += fs.packets_dropped;
  r.probes["rnic.qpns_reused"] += fs.qpns_reused;
  r.probes["rnic.read_depth_waits"] += fs.read_depth_waits;
  r.probes["world.start_attempts_failed"] += wc.start_attempts_failed;
  r.probes["world.restarts"] += wc.restarts;
  r.probes["world.device_events"] += wc.device_events;
  r.probes["world.cancels_while_posted"] += wc.cancels_while_posted;
  r.probes["world.late_success_after_latch"] += wc.late_success_after_latch;
  r.probes["world.cq_quota_full"] += wc.cq_quota_full;
  r.probes["world.refetch_answers_late"] += w.late_refetch_answers();
  for (const auto& [reason, n] : nc.dropped)
    if (n != 0) r.probes[absl::StrCat("net.drop.", std::string(sim::NetDropName(reason)))] += n;
  for (uint32_t h = 0; h < w.host_count(); ++h) {
    const std::string& a = w.host(h).addr;
    r.names[base::Fnv1a64(a)] = a;
  }
  r.trace_hash = w.trace_hash();
  r.trace_entries = w.trace().entries();
  r.end_ns = w.clock().NowNs();
  if (trace_record_max > 0) {
    r.trace.assign(w.trace().record().begin(), w.trace().record().end());
    r.actor_names = w.actor_names();
  }
}

}  // namespace ferry::simworld
