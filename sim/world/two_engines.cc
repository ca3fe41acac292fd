// sim/world/two_engines.cc: the two-engine simulated world (see
// two_engines.h): construction in a fixed Prng order, process start with
// retries, restart, the runner-fault actor, the oracle and the leak check.
#include "sim/world/two_engines.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"

namespace ferry::simworld {

EngineConfig RandomRunConfig() {
  EngineConfig c = ScenarioConfig();
  c.slice_timeout_ns = 20'000'000;
  c.drain_timeout_ns = 2'000'000;
  c.qp_timeout_exp = 10;
  return c;
}

EngineConfig ScenarioConfig() {
  EngineConfig c;
  c.workers = 2;
  c.qps_per_endpoint = 2;
  c.wr_depth = 16;
  c.cqe_limit = 1024;
  c.slice_size_bytes = 16 * 1024;
  c.handshake_timeout_ns = 1'000'000;
  c.handshake_retries = 8;
  c.slice_timeout_ns = 2'000'000'000;
  c.drain_timeout_ns = 1'000'000;
  c.destroy_backoff_ns_min = 10'000;
  c.destroy_backoff_ns_max = 1'000'000;
  return c;
}

sim::Actor* SlotActor::A() const {
  if (h_->paused || h_->rt == nullptr || h_->rt->dead() || i_ >= h_->rt->actor_count())
    return nullptr;
  return h_->rt->actor(i_);
}

std::string_view WorldFaultKindName(WorldFaultKind k) {
  switch (k) {
    case WorldFaultKind::kRestart:
      return "restart";
    case WorldFaultKind::kPause:
      return "pause";
    case WorldFaultKind::kResume:
      return "resume";
    case WorldFaultKind::kPartition:
      return "partition";
    case WorldFaultKind::kHeal:
      return "heal";
    case WorldFaultKind::kStopFaults:
      return "stop_faults";
    case WorldFaultKind::kDeviceFatal:
      return "device_fatal";
    case WorldFaultKind::kGidChange:
      return "gid_change";
  }
  return "?";
}

std::string WorldFault::ToString() const {
  std::string out = absl::StrCat("at +", at_ns, " ", std::string(WorldFaultKindName(kind)));
  switch (kind) {
    case WorldFaultKind::kRestart:
    case WorldFaultKind::kResume:
    case WorldFaultKind::kDeviceFatal:
    case WorldFaultKind::kGidChange:
      absl::StrAppend(&out, " h", host);
      break;
    case WorldFaultKind::kPause:
      absl::StrAppend(&out, " h", host, " for ", duration_ns, " ns");
      break;
    case WorldFaultKind::kPartition:
      absl::StrAppend(&out, dir == sim::PartitionDir::kBoth ? " both" : " one-way from h", "",
                      dir == sim::PartitionDir::kBoth ? "" : std::to_string(host), " for ",
                      duration_ns, " ns");
      break;
    case WorldFaultKind::kHeal:
    case WorldFaultKind::kStopFaults:
      break;
  }
  return out;
}

// Applies runner faults at their virtual times. Never reports work (a
// pending fault alone is not a deadlock: time jumps to it).
class TwoEngines::FaultActor final : public sim::Actor {
 public:
  explicit FaultActor(TwoEngines* w) : w_(w) {}
  std::string_view name() const override { return "world"; }
  bool Runnable() override {
    return !w_->faults_.empty() && w_->faults_.begin()->first.first <= w_->clock_.NowNs();
  }
  uint64_t Step() override {
    FERRY_CHECK(!w_->faults_.empty());
    Pending p = std::move(w_->faults_.begin()->second);
    w_->faults_.erase(w_->faults_.begin());
    ++w_->fault_steps_;
    if (p.call) {
      p.call();
    } else {
      w_->ApplyFault(p.fault);
    }
    --w_->fault_steps_;
    return 100;
  }
  std::optional<uint64_t> NextWakeNs() override {
    if (w_->faults_.empty()) return std::nullopt;
    return w_->faults_.begin()->first.first;
  }

 private:
  TwoEngines* w_;
};

// Brackets what the world's driver (not a scheduler actor) does, so a
// readable trace attributes it to "main" (sim/world/trace_format.h). Inside
// a fault actor step it adds nothing: the step is already attributed.

TwoEngines::TwoEngines(uint64_t seed, sim::NetPlan plan, const base::Mutations& mutations,
                       EngineConfig config, sim::FabricConfig fabric_config, WorldOptions options)
    : trace_(options.trace_record_max),
      root_(seed),
      fabric_(Shaped(fabric_config, options), root_.Fork(), &clock_, &trace_),
      net_(root_.Fork(), &clock_, &trace_, plan),
      sched_(root_.Fork(), &clock_, &trace_),
      mutations_(mutations),
      config_(config),
      host_auth_(options.host_auth),
      host_rd_atomic_max_(options.host_rd_atomic_max),
      host_qps_per_endpoint_(options.host_qps_per_endpoint),
      host_memory_(options.host_memory),
      net_plan_(plan),
      devices_per_host_(options.devices_per_host),
      steps_max_(options.steps_max),
      wake_(options.wake),
      wake_probes_on_(options.wake_probes),
      observe_engines_(options.observe_engines),
      hosts_(options.hosts),
      last_timeout_(options.hosts, -1),
      last_req_(options.hosts),
      known_incarnations_(options.hosts) {
  FERRY_CHECK(options.hosts >= 2 && options.hosts <= kHostsMax);
  FERRY_CHECK(options.devices_per_host >= 1 && options.devices_per_host <= kDevicesPerHostMax);
  config_.devices.clear();
  for (uint32_t d = 0; d < options.devices_per_host; ++d)
    config_.devices.push_back(absl::StrCat("sim", d));
  for (uint32_t h = 0; h < host_count(); ++h) {
    hosts_[h].addr = absl::StrCat(options.host_prefix, h, ":1000");
    hosts_[h].buf.Reset(options.buf_bytes);
  }
  sched_.AddActor(&fabric_);
  actor_names_.push_back("rnic");
  sched_.AddActor(&net_);
  actor_names_.push_back("net");
  FERRY_CHECK(actor_names_.size() == kDeviceActors && actor_names_[kNetActor] == "net" &&
              actor_names_[kFabricActor] == "rnic");
  for (uint32_t h = 0; h < host_count(); ++h) {
    for (size_t i = 0; i < config_.workers + 2; ++i) {
      std::string name = i < config_.workers    ? absl::StrCat("h", h, "/worker", i)
                         : i == config_.workers ? absl::StrCat("h", h, "/listener")
                                                : absl::StrCat("h", h, "/async");
      slots_.push_back(std::make_unique<SlotActor>(&hosts_[h], i, name));
      actor_names_.push_back(std::move(name));
    }
  }
  for (auto& s : slots_) sched_.AddActor(s.get());
  fault_actor_ = std::make_unique<FaultActor>(this);
  sched_.AddActor(fault_actor_.get());
  actor_names_.push_back("world");
  sched_.MakePlan(sim::PickMode::kUniform);
  MainScope main(this);
  for (uint32_t h = 0; h < host_count(); ++h) {
    absl::Status s = StartWithRetries(h);
    if (!s.ok() && start_failure_.empty())
      start_failure_ = absl::StrCat("h", h, " did not come up: ", s.ToString());
  }
}

TwoEngines::~TwoEngines() = default;

sim::FabricConfig TwoEngines::Shaped(sim::FabricConfig fc, const WorldOptions& o) {
  fc.hosts = o.hosts;
  fc.devices_per_host = o.devices_per_host;
  return fc;
}

sim::FabricConfig TwoEngines::MakeFabricConfig() {
  sim::FabricConfig fc;
  fc.hosts = kHosts;
  return fc;
}

absl::Status TwoEngines::Start(uint32_t h) {
  FERRY_CHECK_LT(h, host_count());
  HostState& hs = hosts_[h];
  if (hs.net == nullptr) {
    auto bound = net_.Bind(hs.addr);
    if (!bound.ok()) return bound.status();
    hs.net = std::move(*bound);
  }
  if (hs.verbs == nullptr) hs.verbs = fabric_.NewVerbs(h);
  if (hs.engine == nullptr) {
    hs.entropy = std::make_unique<sim::SimEntropy>(root_.Fork());
    const uint32_t base = 1 + 100 * h + 1000 * restarts_;
    hs.obs = std::make_unique<SimObserver>(&fabric_, &trace_, base, hs.addr);
    hs.obs->set_hook([this, h](const LifecycleRecord& r, const engine::Task* task) {
      OnEngineEvent(h, r, task);
    });
    hs.proc_verbs = std::make_unique<ProcessVerbs>(hs.verbs.get());
    EngineEnv env{hs.proc_verbs.get(), hs.net.get(), &clock_, hs.entropy.get()};
    EngineConfig cfg = config_;
    if (auto a = host_auth_.find(h); a != host_auth_.end()) cfg.auth = a->second;
    if (auto r = host_rd_atomic_max_.find(h); r != host_rd_atomic_max_.end())
      cfg.qp_rd_atomic_max = r->second;
    if (auto q = host_qps_per_endpoint_.find(h); q != host_qps_per_endpoint_.end())
      cfg.qps_per_endpoint = q->second;
    auto e = engine::SteppedEngine::Create(cfg, env, &mutations_,
                                           observe_engines_ ? hs.obs.get() : nullptr);
    if (!e.ok()) {
      hs.obs.reset();
      return e.status();
    }
    hs.engine = std::move(*e);
    hs.rt = std::make_unique<SimRuntime>(hs.engine.get(), &fabric_, hs.net.get(), hs.obs.get(),
                                         base, root_.Fork(), wake_,
                                         wake_probes_on_ ? &wake_probes_ : nullptr);
    hs.registered = false;
  }
  if (!hs.registered) {
    auto mo = host_memory_.find(h);
    FERRY_RETURN_IF_ERROR(hs.engine->RegisterMemory(
        hs.buf.data(), hs.buf.size(), mo == host_memory_.end() ? MemoryOptions{} : mo->second));
    hs.registered = true;
  }
  return absl::OkStatus();
}

absl::Status TwoEngines::StartWithRetries(uint32_t h, uint32_t attempts_max) {
  absl::Status last = absl::UnknownError("no attempt");
  for (uint32_t i = 0; i < attempts_max; ++i) {
    last = Start(h);
    if (last.ok()) return last;
    ++counters_.start_attempts_failed;
    trace_.Event("world.start_failed", h, i, 0);
  }
  return last;
}

absl::Status TwoEngines::Restart(uint32_t h) {
  FERRY_CHECK_LT(h, host_count());
  MainScope main(this);
  HostState& hs = hosts_[h];
  if (hs.paused) Resume(h);
  if (hs.rt != nullptr) hs.rt->Kill();
  fabric_.RestartHost(h);
  if (hs.net != nullptr) FERRY_CHECK(net_.Restart(hs.addr).ok());
  // The dead process's verbs objects are gone with it: its ProcessVerbs
  // never reaches the RNIC again, so the engine object is freed here, its
  // teardown a no-op against the RNIC, and nothing it does on the way is
  // recorded or traced (the observer is detached first). Its control
  // endpoint was restarted above, so freeing it unbinds nothing.
  if (hs.proc_verbs != nullptr) hs.proc_verbs->Kill();
  if (hs.obs != nullptr) hs.obs->Detach();
  if (hs.engine != nullptr) {
    for (uint32_t w = 0; w < hs.engine->worker_count(); ++w)
      dead_stats_.push_back(hs.engine->StatsOf(w));
    dead_late_refetch_answers_ += hs.engine->late_refetch_answers();
  }
  hs.rt.reset();
  hs.engine.reset();
  hs.proc_verbs.reset();
  hs.net.reset();
  if (hs.obs != nullptr) dead_obs_.push_back(std::move(hs.obs));
  hs.registered = false;
  // Its tasks die with it. Its contexts are closed: no DMA may touch their
  // buffers from now on, so the shadow memory releases them.
  for (Tracked& t : tracked_) {
    if (t.host != h || t.dead || t.incarnation != hs.incarnation) continue;
    t.dead = true;
    if (t.published == TaskStatus::kPending) fabric_.shadow().Release(t.addr, t.len, t.label);
  }
  ++restarts_;
  ++hs.incarnation;
  ++counters_.restarts;
  return StartWithRetries(h);
}

void TwoEngines::ScheduleFaults(const std::vector<WorldFault>& faults) {
  for (const WorldFault& f : faults)
    faults_.emplace(std::make_pair(f.at_ns, fault_seq_++), Pending{f, nullptr});
}

void TwoEngines::ScheduleCall(uint64_t at_ns, std::function<void()> call) {
  FERRY_CHECK(call != nullptr);
  WorldFault f;
  f.at_ns = at_ns;
  faults_.emplace(std::make_pair(at_ns, fault_seq_++), Pending{f, std::move(call)});
}

void TwoEngines::Resume(uint32_t h) {
  if (!hosts_[h].paused) return;
  hosts_[h].paused = false;
  FERRY_CHECK(net_.Resume(hosts_[h].addr).ok());
}

void TwoEngines::ApplyFault(const WorldFault& f) {
  trace_.Event(absl::StrCat("world.", std::string(WorldFaultKindName(f.kind))), f.host,
               f.duration_ns, static_cast<uint64_t>(f.dir));
  const uint64_t now = clock_.NowNs();
  switch (f.kind) {
    case WorldFaultKind::kRestart: {
      absl::Status s = Restart(f.host);
      if (!s.ok())
        Fail(absl::StrCat("h", f.host, " did not come back after restart: ", s.ToString()));
      return;
    }
    case WorldFaultKind::kPause: {
      HostState& hs = hosts_[f.host];
      if (hs.paused || !Alive(f.host)) return;
      hs.paused = true;
      FERRY_CHECK(net_.Pause(hs.addr).ok());
      ++counters_.pauses;
      WorldFault r;
      r.at_ns = now + f.duration_ns;
      r.kind = WorldFaultKind::kResume;
      r.host = f.host;
      ScheduleFaults({r});
      return;
    }
    case WorldFaultKind::kResume:
      Resume(f.host);
      return;
    case WorldFaultKind::kPartition: {
      const uint32_t from = f.host % host_count();
      const uint32_t to = host_count() == 2 ? 1 - from : f.peer % host_count();
      if (from == to) return;
      FERRY_CHECK(net_.Partition(hosts_[from].addr, hosts_[to].addr, f.dir).ok());
      ++counters_.partitions;
      WorldFault r;
      r.at_ns = now + f.duration_ns;
      r.kind = WorldFaultKind::kHeal;
      // (Two hosts: the heal names h0 and h1, as the fixed world's traces have it.)
      r.host = host_count() == 2 ? 0 : from;
      r.peer = host_count() == 2 ? 1 : to;
      ScheduleFaults({r});
      return;
    }
    case WorldFaultKind::kHeal:
      FERRY_CHECK(
          net_.Heal(hosts_[f.host % host_count()].addr, hosts_[f.peer % host_count()].addr).ok());
      return;
    case WorldFaultKind::kDeviceFatal:
    case WorldFaultKind::kGidChange: {
      if (!Alive(f.host)) return;
      sim::ScriptedFault sf;
      sf.at_ns = now;
      sf.kind = f.kind == WorldFaultKind::kDeviceFatal ? sim::FaultKind::kDeviceFatal
                                                       : sim::FaultKind::kGidChange;
      sf.target.kind = sim::TargetKind::kDevice;
      sf.target.host = f.host;
      sf.target.device = absl::StrCat("sim", f.device % devices_per_host_);
      if (fabric_.Inject(sf).ok()) ++counters_.device_events;
      return;
    }
    case WorldFaultKind::kStopFaults:
      StopFaults();
      return;
  }
}

// The end of the fault window: pending faults are dropped (driver calls
// stay), every host resumes, the network heals and gets a clean plan.
void TwoEngines::StopFaults() {
  for (auto it = faults_.begin(); it != faults_.end();) {
    if (it->second.call) {
      ++it;
      continue;
    }
    ++counters_.faults_dropped_at_stop;
    it = faults_.erase(it);
  }
  for (uint32_t h = 0; h < host_count(); ++h) Resume(h);
  net_.HealAll();
  sim::NetPlan clean;
  clean.inbound_max = net_plan_.inbound_max;
  clean.in_flight_max = net_plan_.in_flight_max;
  FERRY_CHECK(net_.SetPlan(clean).ok());
}

bool TwoEngines::RunUntil(const std::function<bool()>& done, uint64_t time_max_ns) {
  main_touched_ = true;  // the caller may have called an engine directly
  sim::RunResult r = sched_.Run(
      [&] {
        OracleStep();
        return done();
      },
      steps_max_, clock_.NowNs() + time_max_ns);
  OracleSweep();
  last_run_ = r;
  return r.outcome == sim::RunOutcome::kDone;
}

SubmitResult TwoEngines::Submit(uint32_t h, BatchId batch, const std::vector<Request>& reqs) {
  MainScope main(this);
  engine::SteppedEngine& e = *hosts_[h].engine;
  SubmitResult sr = e.Submit(batch, absl::MakeConstSpan(reqs));
  if (!sr.status.ok()) return sr;
  for (size_t i = 0; i < sr.tasks.size(); ++i)
    TrackTask(h, sr.tasks[i], reinterpret_cast<const uint8_t*>(reqs[i].local_addr),
              reqs[i].length_bytes, reqs[i].opcode,
              reinterpret_cast<const uint8_t*>(reqs[i].remote_addr), false);
  return sr;
}

void TwoEngines::TrackTask(uint32_t h, TaskId id, const uint8_t* addr, uint64_t len, OpKind op,
                           const uint8_t* remote, bool notify) {
  engine::SteppedEngine& e = *hosts_[h].engine;
  Tracked t;
  t.host = h;
  t.incarnation = hosts_[h].incarnation;
  t.id = id;
  t.label = tracked_.size() + 1;
  t.addr = addr;
  t.len = len;
  t.op = op;
  t.remote = remote;
  t.notify = notify;
  t.task = e.TaskOf(t.id);
  FERRY_CHECK(t.task != nullptr);
  t.slice_final.assign(t.task->slice_count(), false);
  fabric_.shadow().Claim(t.addr, t.len, t.label, absl::StrCat("h", h, " task ", t.label));
  open_.push_back(tracked_.size());
  tracked_.push_back(std::move(t));
}

// Oracle rules judged at the engine's own events, on its step, before
// any other actor moves (the fabric's state is the state the engine acted
// on): which task a "timeout" is about, and whether the WR behind each
// "timeout_retire" still exists (C3).
void TwoEngines::OnEngineEvent(uint32_t h, const LifecycleRecord& r, const engine::Task* task) {
  if (r.kind == "notify_delivered") {
    OnNotifyDelivered(h, r);
    return;
  }
  if (r.kind == "req_recv" || r.kind == "ep_retire") {
    CheckStaleAccept(h, r);
    return;
  }
  // Any other record of the REQ's worker ends its handling: a later
  // retire in the same step is another cause's (seed 7012247: a GID
  // change re-handshakes right after a stale REQ was answered).
  if (last_req_[h].set && last_req_[h].worker == r.worker) last_req_[h].set = false;
  if (r.kind == "ep_evict") {
    CheckIdleEviction(h, r);
    return;
  }
  if (r.kind == "mw_revoked") {
    // Retiring an endpoint revokes the windows it bound at once
    // (docs/security.md section 6): none stays bound on its QPs.
    const std::string device = r.key.substr(0, r.key.find('|'));
    if (const uint32_t n = fabric_.BoundMwsOnQpn(h, device, static_cast<uint32_t>(r.a)); n > 0)
      Fail(absl::StrCat("window_after_retire: h", h, " ", r.key, " qpn ", r.a, " still has ", n,
                        " memory window(s) bound after its endpoint retired"));
    return;
  }
  if (r.kind == "refetch_start" || r.kind == "refetch_applied") {
    // A refetch answer with a lower or equal version changes nothing: an
    // applied descriptor is newer than every version the segment had.
    uint64_t& seen = refetch_versions_[{h, hosts_[h].incarnation, r.a}];
    if (r.kind == "refetch_applied" && r.b <= seen)
      Fail(absl::StrCat("refetch_not_newer: h", h, " applied version ", r.b, " of segment ", r.a,
                        " (", r.key, "), not newer than version ", seen, " it had"));
    seen = std::max(seen, r.b);
    return;
  }
  if (r.kind == "timeout_task") {
    last_timeout_[h] = -1;
    for (size_t i = 0; i < tracked_.size(); ++i) {
      Tracked& t = tracked_[i];
      if (t.host != h || t.dead || t.task.get() != task) continue;
      last_timeout_[h] = static_cast<int64_t>(i);
      if (!t.latch_mark) t.latch_mark = fabric_.stats().wrs_posted;
      // C2: a task is timed out only once its own deadline passed.
      if (clock_.NowNs() < t.task->geometry().deadline_ns)
        Fail(absl::StrCat("timeout_before_deadline: task ", t.label, " was timed out at ",
                          clock_.NowNs(), " ns, before its deadline ",
                          t.task->geometry().deadline_ns, " ns (C2)"));
    }
    return;
  }
  if (r.kind != "timeout_retire" || last_timeout_[h] < 0) return;
  const Tracked& t = tracked_[static_cast<size_t>(last_timeout_[h])];
  sim::Fabric::WrFilter on_qp;
  on_qp.host = h;
  on_qp.qpn = static_cast<uint32_t>(r.a);
  if (fabric_.UnconsumedWrOn(t.addr, t.len, on_qp).empty())
    Fail(absl::StrCat("retire_without_wr: task ", t.label, "'s timeout retired h", h, " ", r.key,
                      " qpn=", r.a,
                      ", which holds no WR of the task with an unconsumed "
                      "completion (a stale sweep entry)"));
}

// Eviction by ground truth: an endpoint the engine evicts as idle
// ("ep_evict" with b = 1) has no WR on the RNIC that has not completed (the
// engine frees a WR's slot only at its CQE, so an idle endpoint's QPs hold
// none). A busy victim (b = 0) is the store's documented last resort when
// no idle endpoint is left (docs/architecture.md section 6) and is not
// judged here. Judged on the evicting worker's step, before anything else
// moves.
void TwoEngines::CheckIdleEviction(uint32_t h, const LifecycleRecord& r) {
  if (r.b != 1 || hosts_[h].obs == nullptr) return;
  for (const hal::QpHandle qp : hosts_[h].obs->QpsOf(r.worker, r.key, r.a)) {
    const absl::StatusOr<uint64_t> n = fabric_.OutstandingOf(qp);
    if (n.ok() && *n > 0)
      Fail(absl::StrCat("evicted_busy_endpoint: h", h, " evicted ", r.key, " generation ", r.a,
                        " as idle while its qp ", qp.id, " held ", *n,
                        " WR(s) on the RNIC with no completion"));
  }
}

// C6 by ground truth: a REQ that the peer's current endpoint did not send
// (a delayed, duplicated or reordered REQ of an endpoint the peer gave up,
// or of a process that exited) must never retire an endpoint paired with
// the peer's current endpoint. At each "req_recv" the world looks up both
// sides: what the key's endpoint here recorded of its peer, and the
// generation of the peer's current endpoint for the reverse key (its owner
// there) with the peer's live incarnation; an "ep_retire" of that key with
// reason superseded as the worker's very next record is the accept's doing
// (OnReq retires before it records anything else; any other record of
// that worker in between ends the REQ's handling).
void TwoEngines::CheckStaleAccept(uint32_t h, const LifecycleRecord& r) {
  PendingReq& pr = last_req_[h];
  // Keys are "<local device>|h<p>:1000@<peer device>".
  const size_t bar = r.key.find('|');
  if (bar == std::string::npos || r.key.size() < bar + 3 || r.key[bar + 1] != 'h') return;
  if (r.kind == "req_recv") {
    pr = PendingReq{};
    uint32_t peer = 0;
    const size_t colon = r.key.find(':', bar);
    const size_t at = r.key.find('@', bar);
    if (colon == std::string::npos || at == std::string::npos ||
        !absl::SimpleAtoi(r.key.substr(bar + 2, colon - bar - 2), &peer) || peer >= host_count() ||
        !Alive(h) || !Alive(peer))
      return;
    const std::string local_dev = r.key.substr(0, bar), peer_dev = r.key.substr(at + 1);
    engine::SteppedEngine& pe = *hosts_[peer].engine;
    const std::optional<uint32_t> ctx = hosts_[h].engine->ContextIndexOf(local_dev);
    const std::optional<uint32_t> peer_ctx = pe.ContextIndexOf(peer_dev);
    if (!ctx || !peer_ctx) return;
    pr.before = hosts_[h].engine->PeerRecordOf(r.worker, *ctx, r.key.substr(bar + 1));
    if (pr.before && pr.before->has_peer)
      known_incarnations_[h].insert({r.key, pr.before->peer_incarnation});
    const std::string back = absl::StrCat("h", h, ":1000@", local_dev);
    const std::optional<engine::SteppedEngine::PeerRecord> cur =
        pe.PeerRecordOf(pe.OwnerOf(*peer_ctx, back), *peer_ctx, back);
    if (!cur) return;  // the peer holds no endpoint for us: nothing live to break
    pr.set = true;
    pr.worker = r.worker;
    pr.key = r.key;
    pr.peer = peer;
    pr.req_incarnation = r.a;
    pr.req_generation = r.b;
    pr.live_incarnation = pe.incarnation();
    pr.live_generation = cur->generation;
    pr.at_ns = r.time_ns;
    return;
  }
  constexpr uint64_t kSuperseded = 3;  // engine RetireReason::kSuperseded
  if (!pr.set || r.b != kSuperseded || r.worker != pr.worker || r.key != pr.key ||
      r.time_ns != pr.at_ns)
    return;
  pr.set = false;
  if (!pr.before || !pr.before->ready || !pr.before->has_peer) return;
  const bool paired_live = pr.before->peer_incarnation == pr.live_incarnation &&
                           pr.before->peer_generation == pr.live_generation;
  const bool req_live =
      pr.req_incarnation == pr.live_incarnation && pr.req_generation == pr.live_generation;
  // Judged where the protocol lets the engine know the REQ is stale: an
  // older generation of the live process, or a process this key's endpoint
  // was already paired with (replaced since). A delayed REQ of an exited
  // process the engine never heard from looks like a restart (incarnations
  // are unordered random numbers): docs/contract.md, C6, and seed 108033.
  const bool knowable = pr.req_incarnation == pr.live_incarnation ||
                        known_incarnations_[h].contains({r.key, pr.req_incarnation});
  if (paired_live && !req_live && knowable)
    Fail(absl::StrCat("stale_req_accepted: h", h, " retired its READY endpoint ", r.key,
                      " (paired with h", pr.peer, "'s current endpoint: incarnation ",
                      pr.live_incarnation, " generation ", pr.live_generation,
                      ") for a REQ of incarnation ", pr.req_incarnation, " generation ",
                      pr.req_generation, " that the current endpoint did not send (C6)"));
}

absl::Status TwoEngines::Cancel(uint32_t h, TaskId id) {
  MainScope main(this);
  Tracked* t = nullptr;
  for (Tracked& c : tracked_)
    if (c.host == h && !c.dead && c.id.batch.id == id.batch.id && c.id.index == id.index) t = &c;
  if (t != nullptr && !t->latch_mark && !t->task->latched().has_value())
    t->latch_mark = fabric_.stats().wrs_posted;
  if (t != nullptr && t->published == TaskStatus::kPending &&
      !fabric_.UnconsumedWrOn(t->addr, t->len).empty())
    ++counters_.cancels_while_posted;
  absl::Status st = hosts_[h].engine->Cancel(id);
  const uint64_t label = t == nullptr ? 0 : t->label;
  if (hosts_[h].obs != nullptr)
    hosts_[h].obs->RecordOracle("cancel", absl::StrCat("task ", label), st.ok() ? 1 : 0, label);
  return st;
}

void TwoEngines::OracleStep() {
  if (!oracle_failure_.empty()) return;
  // Every step judges the unpublished tasks and the quotas it could change
  // (below); every kFullSweepSteps
  // steps (and at the end of each RunUntil) every task, published ones too
  // (a status that changes after publish, a slice leaving its final state).
  if (++oracle_steps_ % kFullSweepSteps == 0) {
    OracleSweep();
    return;
  }
  // Hosts (bit h) whose tasks and whose CQ quotas the last step could
  // change: a host's actor its own (only engines publish, and one host's
  // step touches only its ledgers and CQs); the RNIC no task, the quotas of
  // the hosts its events touched; the network and a time jump (no actor
  // ran) nothing; the world's actor and code outside a step (main_touched_)
  // everything.
  const std::optional<size_t> actor = sched_.last_actor();
  const uint64_t touched = fabric_.TakeTouchedHosts();
  const size_t per_host = config_.workers + 2;
  uint64_t tasks = kAllHosts, quotas = kAllHosts;
  if (main_touched_) {
    main_touched_ = false;
  } else if (!actor || *actor == kNetActor) {
    tasks = quotas = 0;
  } else if (*actor == kFabricActor) {
    tasks = 0;
    quotas = touched;
  } else if (*actor < kDeviceActors + slots_.size()) {
    tasks = quotas = uint64_t{1} << ((*actor - kDeviceActors) / per_host);
  }
  if (tasks != 0) {
    size_t keep = 0;
    for (size_t i : open_) {
      Tracked& t = tracked_[i];
      if ((tasks >> t.host) & 1) CheckTracked(t);
      if (!t.dead && t.published == TaskStatus::kPending) open_[keep++] = i;
    }
    open_.resize(keep);
  }
  if (quotas != 0) CheckQuotas(quotas);
}

void TwoEngines::OracleSweep() {
  if (!oracle_failure_.empty()) return;
  for (Tracked& t : tracked_) CheckTracked(t);
  CheckQuotas();
}

void TwoEngines::CheckTracked(Tracked& t) {
  if (t.dead || !Alive(t.host)) return;
  const TaskStatus st = t.task->status();
  // C2: nothing of a latched task is posted again. A latch the oracle
  // did not see happen (a shutdown's cancel) is marked when first seen.
  if (t.published == TaskStatus::kPending && t.task->latched().has_value()) {
    const uint64_t posts = fabric_.stats().wrs_posted;
    if (!t.latch_mark) t.latch_mark = posts;
    sim::Fabric::WrFilter after;
    after.posted_from = std::max(*t.latch_mark, t.latch_checked_posts);
    if (after.posted_from < posts) {
      if (std::string who = fabric_.UnconsumedWrOn(t.addr, t.len, after); !who.empty())
        Fail(absl::StrCat("posted_after_latch: task ", t.label, " latched ",
                          std::string(TaskStatusName(*t.task->latched())), " and then ", who,
                          " was posted on its buffer"));
    }
    t.latch_checked_posts = posts;
  }
  for (uint32_t i = 0; i < t.task->slice_count(); ++i) {
    const bool fin = t.task->slice(i).Load().final();
    if (t.slice_final[i] && !fin)
      Fail(absl::StrCat("task ", t.label, " slice ", i, " left its final state"));
    if (fin && !t.slice_final[i])
      t.last_final_ns = sched_.last_actor() ? sched_.last_step_start_ns() : clock_.NowNs();
    t.slice_final[i] = fin;
  }
  if (t.published == TaskStatus::kPending) {
    if (IsTerminal(st)) {
      t.published = st;
      t.publish_ns = clock_.NowNs();
      // C2: a task whose deadline passed before its slices resolved ends
      // TIMEOUT (or CANCELED), never COMPLETED.
      const uint64_t deadline = t.task->geometry().deadline_ns;
      if (st == TaskStatus::kCompleted && t.last_final_ns > deadline)
        Fail(absl::StrCat("completed_after_deadline: task ", t.label,
                          " published COMPLETED; its last slice resolved at ", t.last_final_ns,
                          " ns, after its deadline ", deadline, " ns (C2)"));
      if (st == TaskStatus::kTimeout || st == TaskStatus::kCanceled) {
        for (uint32_t i = 0; i < t.task->slice_count(); ++i) {
          if (t.task->slice(i).Load().outcome == engine::SliceOutcome::kSuccess) {
            ++counters_.late_success_after_latch;
            break;
          }
        }
      }
      if (st == TaskStatus::kFailed) CheckFailedForCause(t);
      if (hosts_[t.host].obs != nullptr)
        hosts_[t.host].obs->RecordOracle("publish", absl::StrCat("task ", t.label),
                                         static_cast<uint64_t>(st), t.label);
      // C1 ground truth: every WR on the buffer has its completion
      // consumed, or its QP is gone.
      if (std::string who = fabric_.UnconsumedWrOn(t.addr, t.len); !who.empty())
        Fail(absl::StrCat("published_without_evidence: task ", t.label, " published ",
                          std::string(TaskStatusName(st)), " while ", who,
                          " on its buffer has no consumed completion"));
      fabric_.shadow().Release(t.addr, t.len, t.label);
    }
  } else if (st != t.published) {
    Fail(absl::StrCat("task ", t.label,
                      " published twice: ", std::string(TaskStatusName(t.published)), " then ",
                      std::string(TaskStatusName(st))));
  }
}

// C2 by its cause: a task fails only when one of its slices failed for
// good: an error docs/design.md section 4 names non-retryable (remote
// access, local protection, invalid request, local length), its retry
// budget (slice_retries) or attempt budget (slice_attempts_max) spent, or
// it could not be posted (withdrawn FAILED). A flush or destroy of an
// endpoint retired for another task's timeout costs a slice nothing.
void TwoEngines::CheckFailedForCause(const Tracked& t) {
  auto non_retryable = [](hal::WcStatus s) {
    return s == hal::WcStatus::kRemAccessErr || s == hal::WcStatus::kLocProtErr ||
           s == hal::WcStatus::kRemInvReqErr || s == hal::WcStatus::kLocLenErr;
  };
  std::string seen;
  for (uint32_t i = 0; i < t.task->slice_count(); ++i) {
    const engine::Slice& sl = t.task->slice(i);
    const engine::SliceWord w = sl.Load();
    if (w.outcome != engine::SliceOutcome::kFailed) continue;
    if (w.state == engine::SliceState::kWithdrawn) return;  // could not be posted
    if ((!sl.last_by_destroy && non_retryable(sl.last_status)) ||
        sl.retries_used >= config_.slice_retries ||
        sl.reposts_used + 1 >= config_.slice_attempts_max)
      return;
    absl::StrAppend(
        &seen, " slice ", i, ": ",
        sl.last_by_destroy ? "destroy evidence" : std::string(hal::WcStatusName(sl.last_status)),
        " after ", sl.retries_used, " retries and ", sl.reposts_used, " reposts;");
  }
  Fail(absl::StrCat("failed_without_cause: task ", t.label,
                    " published FAILED, but no slice failed for good:", seen));
}

void TwoEngines::CheckQuotas(uint64_t hosts) {
  for (uint32_t h = 0; h < host_count(); ++h) {
    if (((hosts >> h) & 1) == 0) continue;
    HostState& hs = hosts_[h];
    if (!Alive(h)) continue;
    hs.engine->ForEachQuota([&](const engine::QuotaView& q) {
      auto truth = fabric_.TruthOf(q.cq);
      if (!truth.ok() || truth->errored) return;
      const uint64_t reserved = static_cast<uint64_t>(q.reserved);
      max_quota_ = std::max(max_quota_, reserved);
      if (reserved >= config_.cqe_limit) ++counters_.cq_quota_full;
      if (truth->present + truth->producible > reserved || reserved > truth->capacity)
        Fail(absl::StrCat("quota: h", h, " w", q.worker, " cq ", q.cq.id,
                          " present=", truth->present, " producible=", truth->producible,
                          " reserved=", reserved, " capacity=", truth->capacity));
    });
  }
}

void TwoEngines::Fail(std::string why) {
  if (oracle_failure_.empty())
    oracle_failure_ = absl::StrCat("oracle at ", clock_.NowNs(), " ns: ", why);
}

const TwoEngines::Tracked* TwoEngines::TrackedOf(uint32_t h, TaskId id) const {
  for (const Tracked& t : tracked_)
    if (t.host == h && t.id.batch.id == id.batch.id && t.id.index == id.index) return &t;
  return nullptr;
}

std::string TwoEngines::OracleAndViolations() const {
  std::string out = oracle_failure_;
  if (std::string v = Violations(); !v.empty()) out += " violations: " + v;
  return out;
}

std::string TwoEngines::Violations() const {
  std::string out;
  for (const auto& v : fabric_.violations())
    out += absl::StrCat(std::string(sim::ViolationKindName(v.kind)), ": ", v.message, "; ");
  return out;
}

absl::StatusOr<SegmentHandle> TwoEngines::Open(uint32_t from, uint32_t to) {
  if (!Alive(from)) return absl::UnavailableError(absl::StrCat("h", from, " is down"));
  engine::SteppedEngine& e = *hosts_[from].engine;
  absl::StatusOr<OpenToken> t;
  {
    MainScope main(this);
    t = e.OpenSegmentAsync(hosts_[to].addr);
  }
  if (!t.ok()) return t.status();
  std::optional<SegmentHandle> h;
  absl::Status err;
  RunUntil(
      [&] {
        auto p = e.PollOpenSegment(*t);
        if (!p.ok()) {
          err = p.status();
          return true;
        }
        h = *p;
        return h.has_value();
      },
      10'000'000'000);
  if (!err.ok()) return err;
  if (!h) return absl::DeadlineExceededError("open did not finish");
  return *h;
}

std::string TwoEngines::ShutdownAndCheckLeaks() {
  {
    MainScope main(this);
    for (uint32_t h = 0; h < host_count(); ++h) Resume(h);
    for (uint32_t h = 0; h < host_count(); ++h)
      if (Alive(h)) hosts_[h].engine->BeginShutdown();
  }
  const bool drained = RunUntil(
      [&] {
        for (uint32_t h = 0; h < host_count(); ++h)
          if (Alive(h) && !hosts_[h].engine->WorkersDrained()) return false;
        return true;
      },
      30'000'000'000);
  std::string out;
  if (!drained) {
    out +=
        absl::StrCat("workers did not drain (", std::string(sim::RunOutcomeName(last_run_.outcome)),
                     " ", last_run_.detail, "): ");
    for (uint32_t h = 0; h < host_count(); ++h) {
      if (!Alive(h)) continue;
      HostState& hs = hosts_[h];
      for (uint32_t w = 0; w < hs.engine->worker_count(); ++w) {
        const engine::WorkerView v = hs.engine->ViewOf(w);
        out += absl::StrCat(hs.addr, " w", v.id, " down=", v.shut_down, " live=", v.live_endpoints,
                            " retiring=", v.retiring_endpoints, " inbox=", v.inbox, "; ");
        for (const std::string& r : hs.engine->PendingReasons(w)) out += hs.addr + " " + r + "; ";
      }
    }
  }
  MainScope main(this);
  for (uint32_t h = 0; h < host_count(); ++h) {
    if (!Alive(h)) continue;
    HostState& hs = hosts_[h];
    hs.rt->Stop();
    absl::Status s = hs.engine->FinishShutdown();
    if (!s.ok()) out += absl::StrCat(hs.addr, " FinishShutdown: ", s.ToString(), "; ");
    if (hs.engine->LiveHandles() != 0)
      out += absl::StrCat(hs.addr, " ledger: ", hs.engine->HandleReport(), "; ");
  }
  for (auto k : {sim::ObjectKind::kContext, sim::ObjectKind::kPd, sim::ObjectKind::kMr,
                 sim::ObjectKind::kCompChannel, sim::ObjectKind::kCq, sim::ObjectKind::kQp,
                 sim::ObjectKind::kMw}) {
    if (fabric_.LiveCount(k) != 0)
      out += absl::StrCat("sim live ", std::string(sim::ObjectKindName(k)), "=",
                          fabric_.LiveCount(k), "; ");
  }
  return out;
}

std::vector<const SimObserver*> TwoEngines::observers() const {
  std::vector<const SimObserver*> out;
  for (const auto& o : dead_obs_) out.push_back(o.get());
  for (const HostState& hs : hosts_)
    if (hs.obs != nullptr) out.push_back(hs.obs.get());
  return out;
}

void TwoEngines::Reseed(uint64_t seed) {
  sim::Prng p(seed);
  const uint64_t fabric_seed = p.Next();
  fabric_.Reseed(fabric_seed, p.Next());
  net_.Reseed(p.Next());
  sched_.Reseed(p.Next());
  root_.Reseed(p.Next());
  for (HostState& hs : hosts_) {
    const uint64_t rt_seed = p.Next(), entropy_seed = p.Next();  // drawn for every host
    if (hs.rt != nullptr) hs.rt->Reseed(rt_seed);
    if (hs.entropy != nullptr) hs.entropy->Reseed(entropy_seed);
  }
}

uint64_t TwoEngines::late_refetch_answers() const {
  uint64_t n = dead_late_refetch_answers_;
  for (const HostState& hs : hosts_)
    if (hs.engine != nullptr) n += hs.engine->late_refetch_answers();
  return n;
}

std::vector<engine::WorkerStats> TwoEngines::worker_stats() const {
  std::vector<engine::WorkerStats> out = dead_stats_;
  for (const HostState& hs : hosts_)
    if (hs.engine != nullptr)
      for (uint32_t w = 0; w < hs.engine->worker_count(); ++w) out.push_back(hs.engine->StatsOf(w));
  return out;
}

}  // namespace ferry::simworld
