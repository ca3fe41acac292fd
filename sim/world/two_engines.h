// sim/world/two_engines.h: a simulated world with two engine processes
// (hosts h0 and h1, one NIC "sim0" each) on one Fabric and one SimNetwork,
// stepped by one Scheduler; helpers for segments, transfers, restarts,
// pauses, partitions, shutdown and the C9 leak check. The sim scenario tests
// (tests/engine/sim) and the ferry-sim runner (tools/ferry-sim) both build on
// it: libferry_simworld_mut for tests, libferry_simworld for the tool.
//
// Thread safety: none (single-threaded simulation).
// What must stay true:
// - Every engine actor is registered once, through a fixed per-host slot
//   that forwards to the host's current runtime, so a restarted process gets
//   new actors without re-planning the scheduler.
// - Determinism (docs/design.md section 7): one root seed (the constructor's)
//   derives every component's Prng in a fixed order; runner faults
//   (ScheduleFaults) fire at virtual times through a scheduler actor, in
//   (time, insertion) order, and each is a trace event.
// - A paused host's actors are neither runnable nor waking; its RNIC still
//   serves one-sided operations (the Fabric is its own actor) and its control
//   endpoint queues inbound messages (SimNetwork::Pause).
//
// The oracle (docs/design.md section 6) runs after every scheduler step of
// RunUntil: a task submitted through Submit() has its local buffer Claim()ed
// in the fabric's shadow memory and Release()d in the step it publishes (so a
// DMA after publish is a `local_after_release` violation naming the task);
// its published status never changes and no slice word leaves a final state
// (each slice resolves once, each task publishes once); and for every CQ of
// every live engine, CQEs present + producible <= engine quota <= CQ size.
// At each publish, every WR on the task's buffer must have its completion
// consumed or its QP destroyed (published_without_evidence, C1). While a
// task is latched (TIMEOUT or CANCELED) and unpublished, no WR on its
// buffer may be posted after the latch (posted_after_latch, C2). At each
// "timeout_retire" event, judged on the engine's own step, the retired QP
// must still hold an unconsumed WR of the timed-out task
// (retire_without_wr, C3).
// Tasks of a process that restarted died with it: they are marked dead and
// their buffers released (the RNIC closed that process's contexts, so no DMA
// may touch them afterwards); the oracle no longer judges them.
// The first failure is kept in oracle_failure() (with the virtual time).
#ifndef FERRY_SIM_WORLD_TWO_ENGINES_H_
#define FERRY_SIM_WORLD_TWO_ENGINES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutation.h"
#include "engine/inspect.h"
#include "sim/entropy.h"
#include "sim/net/sim_network.h"
#include "sim/prng.h"
#include "sim/rnic/fabric.h"
#include "sim/rnic/shadow_memory.h"
#include "sim/scheduler.h"
#include "sim/trace.h"
#include "sim/virtual_clock.h"
#include "sim/world/engine_runtime.h"
#include "sim/world/process_verbs.h"
#include "sim/world/zeroed_buffer.h"

namespace ferry::simworld {

// The engine config every sim scenario starts from: small queues and short
// timeouts so faults and retires happen within little virtual time.
EngineConfig ScenarioConfig();
// ScenarioConfig with a 20 ms slice timeout, a 2 ms drain and a ~4 ms ACK
// timeout, so timeouts and transport errors happen within a short random
// run (the engine-state property and the fault-schedule fuzzer).
EngineConfig RandomRunConfig();

inline constexpr size_t kBufBytes = 1 << 20;
inline constexpr uint32_t kHosts = 2;
// Bring-up attempts per process start when resource creation can fail.
inline constexpr uint32_t kStartAttemptsMax = 64;

struct HostState {
  std::string addr;
  std::unique_ptr<hal::Verbs> verbs;         // the host's RNIC (every incarnation)
  std::unique_ptr<ProcessVerbs> proc_verbs;  // the current process's view of it
  std::unique_ptr<sim::SimControlNet> net;
  std::unique_ptr<sim::SimEntropy> entropy;
  std::unique_ptr<SimObserver> obs;
  std::unique_ptr<engine::SteppedEngine> engine;
  std::unique_ptr<SimRuntime> rt;
  ZeroedBuffer buf;
  bool registered = false;   // buf registered with the current engine
  bool paused = false;       // process stopped: its actors are not stepped
  uint32_t incarnation = 0;  // restarts of this host so far
};

// Forwards to actor `i` of a host's current runtime (or sleeps when none,
// when the runtime is dead, or while the host is paused).
class SlotActor final : public sim::Actor {
 public:
  SlotActor(HostState* h, size_t i, std::string name) : h_(h), i_(i), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  bool Runnable() override { return A() != nullptr && A()->Runnable(); }
  uint64_t Step() override { return A()->Step(); }
  std::optional<uint64_t> NextWakeNs() override {
    return A() == nullptr ? std::nullopt : A()->NextWakeNs();
  }
  bool HasWork() override { return A() != nullptr && A()->HasWork(); }

 private:
  sim::Actor* A() const;
  HostState* h_;
  size_t i_;
  std::string name_;
};

// A fault the runner (not the RNIC) applies to the world at a virtual time.
enum class WorldFaultKind : uint8_t {
  kRestart,      // the host's process exits; a new incarnation starts at once
  kPause,        // the host's process stops for duration_ns (then kResume)
  kResume,       // scheduled by kPause
  kPartition,    // the control network between h0 and h1 is cut (dir) for duration_ns
  kHeal,         // scheduled by kPartition
  kStopFaults,   // end of the fault window: resume, heal, clean net plan, drop the rest
  kDeviceFatal,  // the host's RNIC reports DEVICE_FATAL (the engine closes and re-opens it)
  kGidChange,    // the host's RNIC reports GID_CHANGE (the engine reconnects)
};
std::string_view WorldFaultKindName(WorldFaultKind k);

struct WorldFault {
  uint64_t at_ns = 0;
  WorldFaultKind kind = WorldFaultKind::kRestart;
  uint32_t host = 0;  // kRestart, kPause, kResume; for kPartition: the cut's source
  uint64_t duration_ns = 0;
  sim::PartitionDir dir = sim::PartitionDir::kBoth;
  // kPartition, kHeal: the other side of the cut (only used in worlds of more
  // than two hosts; with two it is the source's peer).
  uint32_t peer = 1;
  uint32_t device = 0;  // kDeviceFatal, kGidChange: sim<device> of the host
  std::string ToString() const;
};

// What the runner faults did (the summary of ferry-sim).
struct WorldCounters {
  uint64_t restarts = 0;
  uint64_t pauses = 0;
  uint64_t partitions = 0;
  uint64_t device_events = 0;          // DEVICE_FATAL and GID_CHANGE injected
  uint64_t start_attempts_failed = 0;  // bring-up or registration attempts that failed
  uint64_t faults_dropped_at_stop = 0;
  // Rare paths seen from the ground truth (campaign probes).
  uint64_t cancels_while_posted = 0;      // Cancel of a task with a WR on the RNIC
  uint64_t late_success_after_latch = 0;  // a TIMEOUT/CANCELED task with a slice that succeeded
  uint64_t cq_quota_full = 0;             // oracle checks that found a CQ quota at cqe_limit
};

struct WorldOptions {
  // Trace entries kept for a readable replay (0: hash only).
  size_t trace_record_max = 0;
  // The world's shape: hosts h0..h<hosts-1>, each with NICs sim0..sim<n-1>
  // (the engines use every NIC: multi-rail striping), and each host's
  // registered buffer. The defaults are the fixed two-host world.
  uint32_t hosts = kHosts;
  uint32_t devices_per_host = 1;
  size_t buf_bytes = kBufBytes;
  uint64_t steps_max = 5'000'000;  // scheduler steps of one RunUntil
  // How an owner with WRs outstanding waits (engine_runtime.h, WakeModel).
  WakeModel wake = WakeModel::kSpin;
  // Probe wakes (engine_runtime.h, WakeProbes): an asleep worker is
  // stepped at drawn times and must find nothing to do. Off: every run
  // found before them replays.
  bool wake_probes = false;
  // Per host: its engine's AuthConfig (instead of the config's) and how its
  // buffer is registered (docs/security.md; the security scenarios).
  std::map<uint32_t, AuthConfig> host_auth;
  std::map<uint32_t, MemoryOptions> host_memory;
  // Per host: its engine's qp_rd_atomic_max (peers that offer different
  // READ depths; tests/engine/sim/qp_attr_scenarios_test.cc).
  std::map<uint32_t, uint8_t> host_rd_atomic_max;
  // Per host: its engine's qps_per_endpoint (peers configured apart).
  std::map<uint32_t, uint32_t> host_qps_per_endpoint;
  // Host h's control address is "<host_prefix><h>:1000" ("h0:1000"...); a
  // longer prefix gives peer paths past std::string's inline size.
  std::string host_prefix = "h";
  // false: the engines get no observer (as in production: no lifecycle
  // records, so no oracle and no trace of engine events; the RNIC's
  // trace stays). For measuring the engine alone (tests/engine/sim/
  // alloc_count_test.cc: the observer's records allocate).
  bool observe_engines = true;
};
inline constexpr uint32_t kHostsMax = 8;
inline constexpr uint32_t kDevicesPerHostMax = 4;

class TwoEngines {
 public:
  TwoEngines(uint64_t seed, sim::NetPlan plan, const base::Mutations& mutations,
             EngineConfig config, sim::FabricConfig fabric_config = MakeFabricConfig(),
             WorldOptions options = {});
  ~TwoEngines();
  TwoEngines(const TwoEngines&) = delete;
  TwoEngines& operator=(const TwoEngines&) = delete;

  static sim::FabricConfig MakeFabricConfig();

  // One bring-up attempt of host h's process (bind, engine, memory); what
  // an earlier attempt completed is kept. A failed engine bring-up has
  // rolled itself back (C7).
  absl::Status Start(uint32_t h);
  // Start, retried up to attempts_max times (resource creation can fail by
  // plan); the last error when every attempt failed.
  absl::Status StartWithRetries(uint32_t h, uint32_t attempts_max = kStartAttemptsMax);
  // Empty when both processes came up at construction, else why not.
  const std::string& start_failure() const { return start_failure_; }

  // The process on host h dies (as exit: the RNIC closes its contexts, its
  // control endpoint goes away) and a new incarnation starts (with retries).
  absl::Status Restart(uint32_t h);
  // From now on every random stream of the world (fabric, stall kinds,
  // network, scheduler, each live process's runtime and entropy, and the
  // root that later processes fork from) derives from `seed` alone: a
  // property command reseeds with its own sub-seed, so the steps it
  // triggers do not depend on the draws of the commands before it and a
  // shrunk command list keeps each command's randomness.
  void Reseed(uint64_t seed);

  // Runner faults: applied by a scheduler actor at their virtual times.
  void ScheduleFaults(const std::vector<WorldFault>& faults);
  // A workload driver's action at a virtual time, run by the same actor
  // (after the faults due at the same time that were scheduled before it).
  // kStopFaults drops pending faults, never calls.
  void ScheduleCall(uint64_t at_ns, std::function<void()> call);
  // Faults or calls still to come.
  bool faults_pending() const { return !faults_.empty(); }
  const WorldCounters& world_counters() const { return counters_; }

  // Runs the scheduler until done() (checked, with the oracle, after every
  // step) or time_max_ns of virtual time passed; true when done.
  bool RunUntil(const std::function<bool()>& done, uint64_t time_max_ns);

  // ---------------------------------------------------------------- oracle
  struct Tracked {
    uint32_t host = 0;
    uint32_t incarnation = 0;  // of the submitting process
    TaskId id;
    uint64_t label = 0;  // shadow owner id
    const uint8_t* addr = nullptr;
    uint64_t len = 0;
    std::shared_ptr<const engine::Task> task;
    TaskStatus published = TaskStatus::kPending;
    uint64_t publish_ns = 0;
    bool dead = false;  // its process restarted before it published
    std::vector<bool> slice_final;
    // When the step in which the oracle saw a slice become final began
    // (the engine's own clock in that step; the step's cost comes after).
    uint64_t last_final_ns = 0;
    // Fabric post count when the task latched TIMEOUT or CANCELED: a WR on
    // its buffer posted at or after it is a repost after the latch.
    std::optional<uint64_t> latch_mark;
    // Fabric post count at the last posted_after_latch check: WRs posted
    // before it were already judged (a WR never becomes unconsumed again).
    uint64_t latch_checked_posts = 0;
    // What the RNIC writes for it: a READ its local range, a WRITE the
    // peer's [remote, remote + len) (the notification oracle's overlap
    // test); a notification's task writes nothing remote.
    OpKind op = OpKind::kRead;
    const uint8_t* remote = nullptr;
    bool notify = false;
  };
  // A notification the world submitted, and what its deliveries are judged
  // against (OnNotifyDelivered): N1 every WRITE of its Submit placed at the
  // receiver, N2 every data task COMPLETED at the sender, N3 once.
  struct TrackedNotify {
    uint32_t host = 0;         // the sender
    uint32_t to = 0;           // the receiver
    uint64_t incarnation = 0;  // the sender engine's
    uint64_t seq = 0;
    size_t notify = 0;         // tracked_ index of the notification task
    std::vector<size_t> data;  // tracked_ indices of the Submit's data tasks
    struct Write {
      size_t tracked = 0;
      std::vector<uint8_t> bytes;  // the local bytes at submit
    };
    std::vector<Write> writes;
    uint32_t to_incarnation = 0;  // the receiver's restarts at submit
    // The receiver process the sequence number was drawn for (the
    // segment's descriptor's incarnation: one sequence space each).
    uint64_t to_engine = 0;
    size_t to_records = 0;  // the receiver's lifecycle records at submit
    uint32_t delivered = 0;
    uint32_t writes_unjudged = 0;  // deliveries' WRITEs another task overlapped
  };

  // Submits through host h's engine and tracks each accepted task.
  SubmitResult Submit(uint32_t h, BatchId batch, const std::vector<Request>& reqs);
  // A Submit with a notification (SendNotify when `reqs` is empty) from
  // host h to host `to`'s segment `seg` (every request must address it):
  // tracked as Submit, the notification's task too (its send slot is
  // claimed in the ground truth), and each delivery judged (TrackedNotify).
  SubmitResult SubmitNotify(uint32_t h, BatchId batch, const std::vector<Request>& reqs,
                            uint32_t to, SegmentHandle seg, std::string_view message);
  const std::vector<TrackedNotify>& notifies() const { return notifies_; }
  // "" when every notification COMPLETED at its sender was delivered (the
  // receiver's process unchanged since), else "notify_completed_undelivered:
  // ..." naming the first that was not.
  std::string NotifiesUndelivered() const;
  // Cancels through host h's engine and records a "cancel" oracle record
  // (key "task <label>", a: 1 when accepted) in host h's event order.
  absl::Status Cancel(uint32_t h, TaskId id);
  void OracleStep();
  // Every tracked task and every quota, now (OracleStep does this every
  // kFullSweepSteps steps; RunUntil at its end).
  void OracleSweep();
  void Fail(std::string why);
  // At a FAILED publish: failed_without_cause unless a slice failed for good.
  void CheckFailedForCause(const Tracked& t);
  const std::string& oracle_failure() const { return oracle_failure_; }
  const std::vector<Tracked>& tracked() const { return tracked_; }
  const Tracked* TrackedOf(uint32_t h, TaskId id) const;
  uint64_t max_quota() const { return max_quota_; }
  // Rolling hash of every traced event and PRNG draw (docs/design.md section 7).
  uint64_t trace_hash() const { return trace_.hash(); }
  const sim::Trace& trace() const { return trace_; }
  // Everything the oracle and fabric saw: "" when clean.
  std::string OracleAndViolations() const;
  std::string Violations() const;

  // Opens host `to`'s segment from host `from` (running the world).
  absl::StatusOr<SegmentHandle> Open(uint32_t from, uint32_t to);

  // Shuts both engines down and returns "" when nothing leaked (C9), else
  // what leaked.
  std::string ShutdownAndCheckLeaks();

  // Scheduler actor names, by scheduler index (for trace printing).
  const std::vector<std::string>& actor_names() const { return actor_names_; }
  // Every lifecycle record of every incarnation (dead ones first).
  std::vector<const SimObserver*> observers() const;
  // Worker counters of every incarnation: the dead ones' as they were when
  // their process exited, then the live engines'.
  std::vector<engine::WorkerStats> worker_stats() const;
  // Refetch answers that arrived after their refetch ended, every process
  // of the run (the exited ones too).
  uint64_t late_refetch_answers() const;

  HostState& host(uint32_t h) { return hosts_[h]; }
  uint32_t host_count() const { return static_cast<uint32_t>(hosts_.size()); }
  uint32_t devices_per_host() const { return devices_per_host_; }
  sim::Fabric& fabric() { return fabric_; }
  // Probe wakes taken and lost wake-ups found (all zero when off).
  const WakeProbes& wake_probes() const { return wake_probes_; }
  sim::SimNetwork& net() { return net_; }
  sim::VirtualClock& clock() { return clock_; }
  sim::Scheduler& scheduler() { return sched_; }
  const sim::RunResult& last_run() const { return last_run_; }

 private:
  class FaultActor;
  class MainScope;
  static sim::FabricConfig Shaped(sim::FabricConfig fc, const WorldOptions& o);
  static constexpr uint64_t kFullSweepSteps = 256;
  // The scheduler's actors in order: the fabric, the network, then each
  // host's workers, listener and async reader (host-major), then the world.
  static constexpr size_t kFabricActor = 0;
  static constexpr size_t kNetActor = 1;
  static constexpr size_t kDeviceActors = 2;
  static constexpr uint64_t kAllHosts = ~uint64_t{0};
  void CheckTracked(Tracked& t);
  // Quotas vs ground truth of the hosts whose bit is set in `hosts`.
  void CheckQuotas(uint64_t hosts = kAllHosts);
  void ApplyFault(const WorldFault& f);
  void OnEngineEvent(uint32_t h, const LifecycleRecord& r, const engine::Task* task);
  // Tracks one accepted task of host h (local range addr/len).
  void TrackTask(uint32_t h, TaskId id, const uint8_t* addr, uint64_t len, OpKind op,
                 const uint8_t* remote, bool notify);
  // A "notify_delivered" record of host h (two_engines_notify.cc).
  void OnNotifyDelivered(uint32_t h, const LifecycleRecord& r);
  bool OverlapsOther(const TrackedNotify& n, const uint8_t* p, uint64_t len) const;
  bool ReceiverLostCqes(uint32_t h, size_t from) const;
  void CheckStaleAccept(uint32_t h, const LifecycleRecord& r);
  void CheckIdleEviction(uint32_t h, const LifecycleRecord& r);
  void StopFaults();
  void Resume(uint32_t h);
  bool Alive(uint32_t h) const {
    return hosts_[h].rt != nullptr && !hosts_[h].rt->dead() && hosts_[h].engine != nullptr;
  }

  sim::VirtualClock clock_;
  sim::Trace trace_;
  sim::Prng root_;
  sim::Fabric fabric_;
  sim::SimNetwork net_;
  sim::Scheduler sched_;
  base::Mutations mutations_;
  EngineConfig config_;
  std::map<uint32_t, AuthConfig> host_auth_;
  std::map<uint32_t, uint8_t> host_rd_atomic_max_;
  std::map<uint32_t, uint32_t> host_qps_per_endpoint_;
  std::map<uint32_t, MemoryOptions> host_memory_;
  sim::NetPlan net_plan_;
  uint32_t devices_per_host_ = 1;
  uint64_t steps_max_ = 5'000'000;
  WakeModel wake_ = WakeModel::kSpin;
  bool wake_probes_on_ = false;
  WakeProbes wake_probes_;  // every incarnation's runtime records here
  bool observe_engines_ = true;
  std::vector<HostState> hosts_;  // sized once at construction (slots point into it)
  std::vector<std::unique_ptr<SlotActor>> slots_;
  std::unique_ptr<FaultActor> fault_actor_;
  std::vector<std::string> actor_names_;
  std::vector<std::unique_ptr<SimObserver>> dead_obs_;
  // Worker counters of engines whose process exited (the engines are freed
  // at the exit, their teardown against a dead ProcessVerbs).
  std::vector<engine::WorkerStats> dead_stats_;
  uint64_t dead_late_refetch_answers_ = 0;
  uint32_t restarts_ = 0;
  sim::RunResult last_run_;
  std::vector<Tracked> tracked_;
  std::vector<TrackedNotify> notifies_;
  std::vector<size_t> open_;  // tracked_ indices not yet published (nor dead)
  uint64_t oracle_steps_ = 0;
  // Set by MainScope and at the start of RunUntil: code outside an actor
  // step ran, so the next OracleStep judges every host.
  bool main_touched_ = true;
  std::string oracle_failure_;
  std::string start_failure_;
  uint64_t max_quota_ = 0;
  std::vector<int64_t> last_timeout_;  // per host: tracked_ index of its last "timeout" task, or -1
  // (host, incarnation, segment handle) -> the highest descriptor version a
  // refetch of it started from or applied (refetch_not_newer).
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, uint64_t> refetch_versions_;
  // Per host: the last "req_recv" and what its key's endpoint recorded then
  // (CheckStaleAccept).
  struct PendingReq {
    bool set = false;
    uint32_t worker = 0;
    std::string key;
    uint32_t peer = 0;
    uint64_t req_incarnation = 0, req_generation = 0;
    uint64_t live_incarnation = 0, live_generation = 0;  // the peer's current endpoint
    uint64_t at_ns = 0;
    std::optional<engine::SteppedEngine::PeerRecord> before;
  };
  std::vector<PendingReq> last_req_;
  // Per host: (key, peer incarnation) pairs its endpoints recorded.
  std::vector<std::set<std::pair<std::string, uint64_t>>> known_incarnations_;
  // Runner faults and driver calls by (at_ns, insertion seq).
  struct Pending {
    WorldFault fault;
    std::function<void()> call;  // set: a driver call, not a fault
  };
  std::map<std::pair<uint64_t, uint64_t>, Pending> faults_;
  uint64_t fault_seq_ = 0;
  uint32_t fault_steps_ = 0;  // > 0 while the fault actor steps
  WorldCounters counters_;
};

// Code that runs outside an actor step (a driver's Submit, Cancel, ...):
// traced, and the next OracleStep judges every host.
class TwoEngines::MainScope {
 public:
  explicit MainScope(TwoEngines* w) : w_(w->fault_steps_ == 0 ? w : nullptr) {
    w->main_touched_ = true;
    if (w_ != nullptr) w_->trace_.Event("main.begin");
  }
  ~MainScope() {
    if (w_ != nullptr) w_->trace_.Event("main.end");
  }
  MainScope(const MainScope&) = delete;
  MainScope& operator=(const MainScope&) = delete;

 private:
  TwoEngines* w_;
};

// Workload helpers shared by the swarm and the scenario tests.
// A request from host `from` to host `to`: local and remote addresses are
// offsets into the two hosts' buffers.
inline Request MakeReqTo(TwoEngines& w, uint32_t from, uint32_t to, SegmentHandle seg, OpKind op,
                         uint64_t local_off, uint64_t remote_off, uint64_t len) {
  Request r;
  r.opcode = op;
  r.local_addr = reinterpret_cast<uint64_t>(w.host(from).buf.data()) + local_off;
  r.length_bytes = len;
  r.segment = seg;
  r.remote_addr = reinterpret_cast<uint64_t>(w.host(to).buf.data()) + remote_off;
  return r;
}
// A request from host `from` to its peer (1 - from) in a two-host world.
inline Request MakeReq(TwoEngines& w, uint32_t from, SegmentHandle seg, OpKind op,
                       uint64_t local_off, uint64_t remote_off, uint64_t len) {
  return MakeReqTo(w, from, 1 - from, seg, op, local_off, remote_off, len);
}
// Writes attributable bytes of `tag` (sim/rnic/shadow_memory.h) into host h.
inline void Fill(TwoEngines& w, uint32_t h, uint64_t off, uint64_t len, uint64_t tag) {
  sim::FillAttributable(std::span<uint8_t>(w.host(h).buf.data() + off, len), tag, 0);
}
// True if host h's [off, off + len) holds exactly `tag`'s bytes.
inline bool Holds(TwoEngines& w, uint32_t h, uint64_t off, uint64_t len, uint64_t tag) {
  return sim::FirstNotAttributable(std::span<const uint8_t>(w.host(h).buf.data() + off, len), tag,
                                   0) == len;
}

}  // namespace ferry::simworld

#endif  // FERRY_SIM_WORLD_TWO_ENGINES_H_
