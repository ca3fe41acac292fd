// sim/world/swarm.cc: plan drawing, the two-wave workload and the verdict of
// a swarm run (see swarm.h for what is judged).
//
// Buffer layout of each host (kBufBytes = 1 MiB), so no two tasks share a
// byte: [0, 384K) its own first-wave local buffers, [384K, 512K) its own
// second-wave local buffers, [512K, 896K) the peer's first-wave remote
// ranges, [896K, 1M) the peer's second-wave remote ranges.
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
constexpr std::array<std::string_view, 38> kLifecycleProbes = {
    "cq_err",          "cq_recreated", "cqe_error",    "ctx_reenabled", "ctx_resumed",
    "destroy_failed",  "device_fatal", "dup_req",      "ep_create",     "ep_destroyed",
    "ep_evict",        "ep_ready",     "ep_retire",    "error_req",     "gid_change",
    "port_active",     "port_err",     "qp_destroyed", "rail_error",    "rail_pause",
    "rep_dropped",     "rep_recv",     "rep_sent",     "repost",        "req_recv",
    "req_sent",        "retry",        "rtu_dropped",  "rtu_recv",      "rtu_sent",
    "stale_entry",     "stale_recv",   "stale_req",    "timeout",       "timeout_retire",
    "zombie_escalate", "req_parked",   "rep_mismatch",
};

constexpr std::array<std::string_view, 11> kCounterProbes = {
    "w.stale_cqes",     "w.zombie_escalations", "w.cq_recreated",
    "w.evictions",      "w.timeout_retires",    "w.stale_sweep_entries",
    "rnic.retransmits", "rnic.packets_dropped", "world.start_attempts_failed",
    "world.restarts",   "world.device_events",
};

// First wave: a driver round every SwarmOptions::round_ns during the fault window; each
// live, running process submits up to kTasksPerRoundMax tasks into its free
// slots (a slot is reused once its task is terminal and judged).
constexpr uint32_t kSlotsPerHost = 6;
constexpr uint64_t kSlotBytes = 64 * 1024;
constexpr uint32_t kTasksPerRoundMax = 2;
constexpr uint64_t kWave1LocalOff = 0;
constexpr uint64_t kWave1RemoteOff = 512 * 1024;
constexpr uint64_t kWave2LocalOff = 384 * 1024;
constexpr uint64_t kWave2RemoteOff = 896 * 1024;
constexpr uint64_t kTerminalTimeNs = 5'000'000'000;
static_assert(kSlotsPerHost * kSlotBytes <= kWave2LocalOff - kWave1LocalOff);
static_assert(kSlotsPerHost * kSlotBytes <= kWave2RemoteOff - kWave1RemoteOff);

std::string RatioText(sim::Ratio r) {
  return r.num == 0 ? std::string("off") : absl::StrCat(r.num, "/", r.den);
}

// One of three menu entries, drawn whether used or not.
template <typename T>
T Pick(sim::Prng& p, const std::array<T, 3>& menu) {
  return menu[p.Below(menu.size())];
}

struct Item {
  uint32_t h = 0;
  size_t tracked = 0;  // index into TwoEngines::tracked()
  int32_t slot = -1;   // first-wave slot, -1 in the second wave
  OpKind op = OpKind::kWrite;
  uint64_t local_off = 0, remote_off = 0, len = 0, tag = 0;
  bool judged = false;
};

// A process's view of its peer's segment: which of its own incarnations
// opened it, against which incarnation of the peer.
struct PeerSegment {
  std::optional<SegmentHandle> handle;
  std::optional<OpenToken> opening;
  uint32_t own_incarnation = 0;
  uint32_t peer_incarnation = 0;
};

class Run {
 public:
  Run(uint64_t seed, const SwarmOptions& o, const SwarmPlan& plan, SwarmReport* r)
      : seed_(seed), o_(o), plan_(plan), r_(r) {
    for (auto& s : slots_) s.fill(-1);
  }

  void Go() {
    EngineConfig c = ScenarioConfig();
    c.slice_timeout_ns = 30'000'000;
    c.qp_timeout_exp = 10;
    c.qp_retries = 3;
    sim::FabricConfig fc = TwoEngines::MakeFabricConfig();
    fc.plan = plan_.rnic;
    fc.mutations = o_.mutations;
    WorldOptions wo;
    wo.trace_record_max = o_.trace_record_max;
    w_ = std::make_unique<TwoEngines>(seed_, plan_.world.net, o_.mutations, c, fc, wo);
    Verdict(Body());
    Collect();
  }

 private:
  // Returns "" or the failure (class in cls_).
  std::string Body() {
    TwoEngines& w = *w_;
    if (!w.start_failure().empty()) return Live(w.start_failure());
    for (uint32_t h = 0; h < kHosts; ++h) {
      auto seg = w.Open(h, 1 - h);
      if (!seg.ok()) return Live(absl::StrCat("h", h, " open failed: ", seg.status().ToString()));
      segs_[h] = PeerSegment{*seg, std::nullopt, 0, 0};
    }
    if (std::string v = w.OracleAndViolations(); !v.empty()) return Safe("oracle: " + v);
    // Wave 1: driver rounds through the fault window.
    const uint64_t now = w.clock().NowNs();
    std::vector<WorldFault> schedule = plan_.schedule;
    for (WorldFault& f : schedule) f.at_ns += now;
    w.ScheduleFaults(schedule);
    const uint64_t window_ns = uint64_t{plan_.world.ticks} * plan_.world.tick_ns;
    for (uint64_t t = 0; t < window_ns; t += o_.round_ns)
      w.ScheduleCall(now + t, [this] { Round(); });
    if (!RunToTerminal()) {
      if (!failure_.empty()) return failure_;
      return Live("wave 1: " + NotTerminal());
    }
    if (std::string v = w.OracleAndViolations(); !v.empty()) return Safe("oracle: " + v);
    for (Item& it : items_)
      if (std::string b = Judge(it); !b.empty()) return Safe(b);
    // Wave 2, after the runner's faults stopped: both processes up, fresh
    // descriptors (a restarted peer has new rkeys), one WRITE and one READ
    // each way, every task terminal.
    items_.clear();
    for (uint32_t h = 0; h < kHosts; ++h)
      if (w.host(h).engine == nullptr) return Live(absl::StrCat("h", h, " is down after faults"));
    for (uint32_t h = 0; h < kHosts; ++h) {
      auto seg = w.Open(h, 1 - h);
      if (!seg.ok())
        return Live(absl::StrCat("wave 2: h", h, " open failed: ", seg.status().ToString()));
      for (uint32_t i = 0; i < 2; ++i) {
        if (std::string e = Submit(h, *seg,
                                   {Task(h, i % 2 == 0 ? OpKind::kWrite : OpKind::kRead,
                                         kWave2LocalOff + kSlotBytes * i,
                                         kWave2RemoteOff + kSlotBytes * i, 9000 + 10 * h + i, -1)});
            !e.empty())
          return e;
      }
    }
    if (!RunToTerminal()) return Live("wave 2: " + NotTerminal());
    if (std::string v = w.OracleAndViolations(); !v.empty()) return Safe("oracle: " + v);
    for (Item& it : items_)
      if (std::string b = Judge(it); !b.empty()) return Safe(b);
    if (std::string l = w.ShutdownAndCheckLeaks(); !l.empty()) {
      if (std::string v = w.OracleAndViolations(); !v.empty())
        return Safe("oracle at shutdown: " + v);
      return Live("leak: " + l);
    }
    if (std::string v = w.OracleAndViolations(); !v.empty())
      return Safe("oracle at shutdown: " + v);
    return "";
  }

  // A first-wave round (runs inside the world's scheduler actor): each live,
  // running process frees the slots whose task is terminal (judging it),
  // makes sure it holds a segment of its peer, and submits into free slots.
  void Round() {
    TwoEngines& w = *w_;
    ++round_;
    for (uint32_t h = 0; h < kHosts && failure_.empty(); ++h) {
      HostState& hs = w.host(h);
      if (hs.engine == nullptr || hs.paused) continue;
      for (int32_t& s : slots_[h]) {
        if (s < 0) continue;
        Item& it = items_[static_cast<size_t>(s)];
        const std::optional<TaskStatus> st = StatusOf(it);
        if (st && !IsTerminal(*st)) continue;
        if (std::string b = Judge(it); !b.empty()) {
          failure_ = Safe(b);
          return;
        }
        s = -1;
      }
      std::optional<SegmentHandle> seg = Segment(h);
      if (!seg) continue;
      std::vector<Item> batch;
      for (uint32_t k = 0; k < kSlotsPerHost && batch.size() < kTasksPerRoundMax; ++k) {
        const uint32_t slot = static_cast<uint32_t>((round_ + k) % kSlotsPerHost);
        if (slots_[h][slot] >= 0) continue;
        const OpKind op = (round_ + slot) % 2 == 0 ? OpKind::kWrite : OpKind::kRead;
        batch.push_back(Task(h, op, kWave1LocalOff + kSlotBytes * slot,
                             kWave1RemoteOff + kSlotBytes * slot, next_tag_++,
                             static_cast<int32_t>(slot)));
      }
      if (batch.empty()) continue;
      if (std::string e = Submit(h, *seg, batch); !e.empty()) {
        failure_ = e;
        return;
      }
    }
  }

  // The segment host h submits against, (re)opened asynchronously when h
  // restarted, and, if the plan says so, when its peer restarted.
  std::optional<SegmentHandle> Segment(uint32_t h) {
    TwoEngines& w = *w_;
    PeerSegment& ps = segs_[h];
    const uint32_t own = w.host(h).incarnation, peer = w.host(1 - h).incarnation;
    const bool stale = ps.own_incarnation != own ||
                       (plan_.world.reopen_after_peer_restart && ps.peer_incarnation != peer);
    if (!stale) return ps.handle;
    engine::SteppedEngine& e = *w.host(h).engine;
    if (ps.opening && ps.own_incarnation == own) {
      auto p = e.PollOpenSegment(*ps.opening);
      if (!p.ok()) {
        ps.opening.reset();  // try again next round
        return std::nullopt;
      }
      if (!p->has_value()) return std::nullopt;
      ps.handle = **p;
      ps.opening.reset();
      ps.peer_incarnation = peer;
      return ps.handle;
    }
    auto t = e.OpenSegmentAsync(w.host(1 - h).addr);
    ps.own_incarnation = own;
    ps.handle.reset();
    if (t.ok()) ps.opening = *t;
    return std::nullopt;
  }

  Item Task(uint32_t h, OpKind op, uint64_t loff, uint64_t roff, uint64_t tag, int32_t slot) {
    Item it;
    it.h = h;
    it.op = op;
    it.local_off = loff;
    it.remote_off = roff;
    it.len = 8 * 1024 + 4096 * (tag % 7);
    it.tag = tag;
    it.slot = slot;
    return it;
  }

  std::string Submit(uint32_t h, SegmentHandle seg, std::vector<Item> batch_items) {
    TwoEngines& w = *w_;
    auto batch = w.host(h).engine->AllocateBatch(16);
    if (!batch.ok()) return Live(absl::StrCat("h", h, " batch: ", batch.status().ToString()));
    std::vector<Request> reqs;
    for (const Item& it : batch_items) {
      if (it.op == OpKind::kWrite) {
        Fill(w, h, it.local_off, it.len, it.tag);
      } else {
        Fill(w, 1 - h, it.remote_off, it.len, it.tag);
      }
      reqs.push_back(MakeReq(w, h, seg, it.op, it.local_off, it.remote_off, it.len));
    }
    const size_t tracked0 = w.tracked().size();
    SubmitResult sr = w.Submit(h, *batch, reqs);
    if (!sr.status.ok()) {
      // A segment opened before the peer restarted may be refused: that is
      // the engine's answer, not a broken contract. Nothing was enqueued.
      if (sr.status.code() == absl::StatusCode::kInvalidArgument ||
          sr.status.code() == absl::StatusCode::kNotFound)
        return "";
      return Live(absl::StrCat("h", h, " submit: ", sr.status.ToString()));
    }
    for (size_t i = 0; i < batch_items.size(); ++i) {
      Item it = batch_items[i];
      it.tracked = tracked0 + i;
      if (it.slot >= 0)
        slots_[h][static_cast<size_t>(it.slot)] = static_cast<int32_t>(items_.size());
      items_.push_back(it);
    }
    return "";
  }

  // The task's status, or nullopt when it died pending with its process.
  std::optional<TaskStatus> StatusOf(const Item& it) const {
    const TwoEngines::Tracked& t = w_->tracked()[it.tracked];
    if (t.dead) {
      if (t.published == TaskStatus::kPending) return std::nullopt;
      return t.published;
    }
    return *w_->host(it.h).engine->GetTaskStatus(t.id);
  }

  bool RunToTerminal() {
    TwoEngines& w = *w_;
    return w.RunUntil(
               [&] {
                 if (!failure_.empty()) return true;
                 if (w.faults_pending()) return false;
                 for (const Item& it : items_) {
                   const std::optional<TaskStatus> st = StatusOf(it);
                   if (st && !IsTerminal(*st)) return false;
                 }
                 return true;
               },
               kTerminalTimeNs) &&
           failure_.empty();
  }

  std::string NotTerminal() {
    TwoEngines& w = *w_;
    std::string out = absl::StrCat("not all terminal within ", kTerminalTimeNs, " ns (",
                                   std::string(sim::RunOutcomeName(w.last_run().outcome)), " ",
                                   w.last_run().detail, "): ");
    for (const Item& it : items_) {
      const std::optional<TaskStatus> st = StatusOf(it);
      if (st && !IsTerminal(*st)) absl::StrAppend(&out, "h", it.h, " tag ", it.tag, " pending; ");
    }
    for (uint32_t h = 0; h < kHosts; ++h) {
      if (w.host(h).engine == nullptr) continue;
      const engine::SteppedEngine& e = *w.host(h).engine;
      for (uint32_t k = 0; k < e.worker_count(); ++k)
        for (const std::string& r : e.PendingReasons(k))
          absl::StrAppend(&out, "h", h, " ", r, "; ");
    }
    return out;
  }

  // Counts a terminal (or dead) task once and checks a COMPLETED task's
  // bytes. "" when right.
  std::string Judge(Item& it) {
    if (it.judged) return "";
    const std::optional<TaskStatus> st = StatusOf(it);
    if (st && !IsTerminal(*st)) return "";
    it.judged = true;
    if (!st) {
      ++r_->tasks_dead;
      return "";
    }
    ++r_->status[static_cast<size_t>(*st) & 7];
    if (*st != TaskStatus::kCompleted) return "";
    TwoEngines& w = *w_;
    const uint32_t at_host = it.op == OpKind::kWrite ? 1 - it.h : it.h;
    const uint64_t at_off = it.op == OpKind::kWrite ? it.remote_off : it.local_off;
    const std::span<const uint8_t> got(w.host(at_host).buf.data() + at_off, it.len);
    const size_t bad = sim::FirstNotAttributable(got, it.tag, 0);
    if (bad == it.len) return "";
    size_t bad_end = bad;
    while (bad_end < it.len &&
           sim::FirstNotAttributable(got.subspan(bad_end, 1), it.tag, bad_end) == 0)
      ++bad_end;
    return absl::StrCat("wrong bytes: COMPLETED ", it.op == OpKind::kWrite ? "WRITE" : "READ",
                        " of h", it.h, " task ", w.tracked()[it.tracked].label, " tag ", it.tag,
                        " (", it.len, " bytes): h", at_host, " bytes [", bad, ", ", bad_end,
                        ") of the range are not the task's (first: 0x",
                        absl::Hex(got[bad], absl::kZeroPad2), ")");
  }

  std::string Safe(std::string m) {
    cls_ = FailureClass::kSafety;
    return m;
  }
  std::string Live(std::string m) {
    cls_ = FailureClass::kLiveness;
    return m;
  }
  void Verdict(std::string m) {
    // A safety violation seen by the oracle wins over whatever stopped the run.
    if (cls_ == FailureClass::kLiveness) {
      if (std::string v = w_->OracleAndViolations(); !v.empty()) {
        cls_ = FailureClass::kSafety;
        m = "oracle: " + v + " (then: " + m + ")";
      }
    }
    r_->failure = m.empty() ? FailureClass::kNone : cls_;
    r_->message = std::move(m);
  }

  void Collect() {
    TwoEngines& w = *w_;
    SwarmReport& r = *r_;
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
    if (plan_.world.ctrl_rates) fault(sim::FaultKind::kCtrlDelay) += nc.sent;

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
    }
    r.probes["rnic.retransmits"] += fs.retransmits;
    r.probes["rnic.packets_dropped"] += fs.packets_dropped;
    r.probes["world.start_attempts_failed"] += wc.start_attempts_failed;
    r.probes["world.restarts"] += wc.restarts;
    r.probes["world.device_events"] += wc.device_events;
    for (const auto& [reason, n] : nc.dropped)
      if (n != 0) r.probes[absl::StrCat("net.drop.", std::string(sim::NetDropName(reason)))] += n;
    for (uint32_t h = 0; h < kHosts; ++h) {
      const std::string& a = w.host(h).addr;
      r.names[base::Fnv1a64(a)] = a;
    }
    r.trace_hash = w.trace_hash();
    r.trace_entries = w.trace().entries();
    r.end_ns = w.clock().NowNs();
    if (o_.trace_record_max > 0) {
      r.trace.assign(w.trace().record().begin(), w.trace().record().end());
      r.actor_names = w.actor_names();
    }
  }

  uint64_t seed_;
  const SwarmOptions& o_;
  const SwarmPlan& plan_;
  SwarmReport* r_;
  std::unique_ptr<TwoEngines> w_;
  std::vector<Item> items_;
  std::array<std::array<int32_t, kSlotsPerHost>, kHosts> slots_;  // item index or -1
  std::array<PeerSegment, kHosts> segs_;
  uint64_t round_ = 0;
  uint64_t next_tag_ = 1;
  std::string failure_;  // set by a round (runs inside the scheduler)
  FailureClass cls_ = FailureClass::kNone;
};

}  // namespace

std::string SwarmFamilies::ToString() const {
  std::vector<std::string> on;
  if (rnic) on.push_back("rnic");
  if (resource_fail) on.push_back("resource_fail");
  if (peer_restart) on.push_back("peer_restart");
  if (paused_peer) on.push_back("paused_peer");
  if (ctrl) on.push_back("ctrl");
  if (device) on.push_back("device");
  return on.empty() ? std::string("none") : absl::StrJoin(on, ",");
}

absl::StatusOr<SwarmFamilies> SwarmFamilies::Parse(std::string_view text) {
  SwarmFamilies f;
  f.rnic = f.resource_fail = f.peer_restart = f.paused_peer = f.ctrl = f.device = false;
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
      f.rnic = f.resource_fail = f.peer_restart = f.paused_peer = f.ctrl = f.device = v;
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
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown fault family '", part,
          "' (families: rnic, resource_fail, peer_restart, paused_peer, ctrl, device, all, "
          "none, "
          "default)"));
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
  absl::StrAppend(&out, rnic.ToString(), world.ToString());
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
std::vector<WorldFault> DrawSchedule(const WorldPlan& w, sim::Prng& schedule_p,
                                     sim::Prng& device_p) {
  std::vector<WorldFault> out;
  // The schedule: per tick, per host, the chances above (each Chance is
  // drawn unconditionally so the schedule's draws do not depend on which
  // families are on).
  uint32_t restarts = 0;
  for (uint32_t t = 0; t < w.ticks; ++t) {
    const uint64_t at = uint64_t{t} * w.tick_ns + schedule_p.Below(w.tick_ns);
    for (uint32_t h = 0; h < kHosts; ++h) {
      const bool r = schedule_p.Chance(w.restart);
      const bool pz = schedule_p.Chance(w.pause);
      if (r && restarts < w.restarts_max) {
        ++restarts;
        out.push_back(WorldFault{at, WorldFaultKind::kRestart, h, 0, {}});
      }
      if (pz) out.push_back(WorldFault{at, WorldFaultKind::kPause, h, w.pause_ns, {}});
    }
    const bool cut = schedule_p.Chance(w.partition);
    const uint32_t from = static_cast<uint32_t>(schedule_p.Below(kHosts));
    const bool both = schedule_p.Below(2) == 1;
    if (cut)
      out.push_back(WorldFault{at, WorldFaultKind::kPartition, from, w.partition_ns,
                               both ? sim::PartitionDir::kBoth : sim::PartitionDir::kOneWay});
  }
  // Device events from their own stream (kept apart so the schedule above
  // is the same whether or not this family is on).
  for (uint32_t t = 0; t < w.ticks; ++t) {
    const uint64_t at = uint64_t{t} * w.tick_ns + device_p.Below(w.tick_ns);
    for (uint32_t h = 0; h < kHosts; ++h) {
      if (device_p.Chance(w.device_fatal))
        out.push_back(WorldFault{at, WorldFaultKind::kDeviceFatal, h, 0, {}});
      if (device_p.Chance(w.gid_change))
        out.push_back(WorldFault{at, WorldFaultKind::kGidChange, h, 0, {}});
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const WorldFault& a, const WorldFault& b) { return a.at_ns < b.at_ns; });
  out.push_back(WorldFault{uint64_t{w.ticks} * w.tick_ns, WorldFaultKind::kStopFaults, 0, 0, {}});
  return out;
}

}  // namespace

SwarmPlan DrawSwarmPlan(uint64_t seed, const SwarmFamilies& families) {
  SwarmPlan p;
  p.seed = seed;
  p.families = families;
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
  p.schedule = DrawSchedule(w, schedule_p, device_p);
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

SwarmReport RunSwarm(uint64_t seed, const SwarmOptions& options) {
  SwarmReport r;
  r.seed = seed;
  const SwarmPlan plan = DrawSwarmPlan(seed, options.families);
  r.plan_text = plan.ToString();
  Run run(seed, options, plan, &r);
  run.Go();
  return r;
}

}  // namespace ferry::simworld
