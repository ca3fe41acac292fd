// tests/engine/sim/scenario.h: a small builder for the sim scenarios: the
// two-engine world on one RNIC profile, a segment from h0 to h1, an
// optional warm-up WRITE (so h0's endpoint toward h1 exists), scripted QP
// faults by QP index, one-request submits, runs with a per-step check, and
// the event log of h0 with order assertions by record index.
//
// A scenario returns "" on success or what broke; every check reads the
// oracle first (Oracle()), so a mutation shows as the oracle's message and
// not as a later symptom.
//
// Thread safety: none (single-threaded simulation).
// What must stay true: every Run* goes through TwoEngines::RunUntil, so the
// oracle judges every scheduler step; order assertions compare record
// indices of h0's observer (engine events and the oracle's "publish" and
// "cancel" records share one sequence), never virtual times alone.
#ifndef FERRY_TESTS_ENGINE_SIM_SCENARIO_H_
#define FERRY_TESTS_ENGINE_SIM_SCENARIO_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/engine/sim/two_engines.h"

namespace ferry::engine::testing {

struct ScenarioSpec {
  uint64_t seed = 1;
  sim::RnicProfile profile = sim::RnicProfile::kMlx5;
  EngineConfig config = ScenarioConfig();
  sim::FabricConfig fabric = TwoEngines::MakeFabricConfig();
  base::Mutations mutations;
  bool warm_up = true;  // one 16 KiB WRITE at offset 0 before the scenario
  // How owners with WRs outstanding wait (sim/world/engine_runtime.h).
  simworld::WakeModel wake = simworld::WakeModel::kSpin;
  // Hosts h0..h<hosts-1>; the scenario's segment is h1's (a third host is
  // a second peer on the same rails).
  uint32_t hosts = simworld::kHosts;
};

inline std::string ProfileName(sim::RnicProfile p) { return std::string(sim::RnicProfileName(p)); }

// One step in an expected order: a record kind, on the scenario's key or
// its device's ("sim0|"), or on "task <label>" for "publish" and
// "cancel"; optionally with payload a.
struct Ev {
  Ev(const char* k) : kind(k) {}  // NOLINT(google-explicit-constructor): {"timeout"} reads best
  Ev(std::string k, std::optional<uint64_t> a_in, std::optional<uint64_t> label = std::nullopt)
      : kind(std::move(k)), a(a_in), task_label(label) {}
  std::string kind;
  std::optional<uint64_t> a;
  std::optional<uint64_t> task_label;  // for publish / cancel records
};

// Returns early with the oracle's verdict (or the per-step failure) first:
// a broken contract shows as its own message, not a later symptom.
// (For a scenario function returning std::string.)
#define FERRY_SCENARIO_CHECK(sc)                                \
  do {                                                          \
    if (std::string o_ = (sc).Oracle(); !o_.empty()) return o_; \
    if (!(sc).failure().empty()) return (sc).failure();         \
  } while (0)

class Scenario {
 public:
  explicit Scenario(ScenarioSpec spec) : spec_(std::move(spec)) {
    spec_.fabric.profile = spec_.profile;
    simworld::WorldOptions wo;
    wo.wake = spec_.wake;
    wo.hosts = spec_.hosts;
    w_ = std::make_unique<TwoEngines>(spec_.seed, sim::NetPlan{}, spec_.mutations, spec_.config,
                                      spec_.fabric, wo);
    if (!w_->start_failure().empty()) {
      setup_ = "start: " + w_->start_failure();
      return;
    }
    auto seg = w_->Open(0, 1);
    if (!seg.ok()) {
      setup_ = "open: " + std::string(seg.status().message());
      return;
    }
    seg_ = *seg;
    if (spec_.warm_up) {
      Fill(*w_, 0, 0, 16 * 1024, 1);
      auto [st, id] = Run1(*w_, 0, MakeReq(*w_, 0, seg_, OpKind::kWrite, 0, 0, 16 * 1024));
      (void)id;
      if (st != TaskStatus::kCompleted || !Holds(*w_, 1, 0, 16 * 1024, 1))
        setup_ = absl::StrCat("warm-up ended ", std::string(TaskStatusName(st)));
    }
    Mark();
  }

  // "" when the world came up, the segment opened and the warm-up landed.
  const std::string& setup() const { return setup_; }
  TwoEngines& w() { return *w_; }
  SteppedEngine& e() { return *w_->host(0).engine; }
  SegmentHandle seg() const { return seg_; }
  const EngineConfig& config() const { return spec_.config; }
  sim::RnicProfile profile() const { return spec_.profile; }

  std::string Peer() { return w_->host(1).addr + "@sim0"; }
  std::string Key() { return "sim0|" + Peer(); }
  uint32_t Owner() { return e().OwnerOf(0, Peer()); }
  // h0's live endpoint toward h1, or nullptr.
  const Endpoint* Ep() { return e().FindEndpoint(Owner(), 0, Peer()); }
  // QP number `index` of the live endpoint (0 when none).
  uint32_t Qpn(uint32_t index) {
    const Endpoint* ep = Ep();
    return ep == nullptr || index >= ep->qpns().size() ? 0 : ep->qpns()[index];
  }
  // The QP index the next post on the endpoint tries first.
  uint32_t NextQp() {
    const Endpoint* ep = Ep();
    return ep == nullptr ? 0 : ep->round_robin;
  }

  // Arms `times` scripted faults of `kind` (now) on h0's QP `qpn`;
  // `duration_ns` for the kinds that take one (sim::FaultTakesDuration).
  std::string Arm(sim::FaultKind kind, uint32_t qpn, uint32_t times = 1, uint64_t duration_ns = 0) {
    for (uint32_t i = 0; i < times; ++i) {
      sim::ScriptedFault f;
      f.at_ns = w_->clock().NowNs();
      f.kind = kind;
      f.target.kind = sim::TargetKind::kQp;
      f.target.host = 0;
      f.target.device = "sim0";
      f.target.number = qpn;
      f.duration_ns = duration_ns;
      if (absl::Status s = w_->fabric().Inject(f); !s.ok())
        return absl::StrCat("inject ", std::string(sim::FaultKindName(kind)), " on qpn ", qpn, ": ",
                            s.message());
    }
    return "";
  }
  // ... on every QP of the live endpoint.
  std::string ArmAll(sim::FaultKind kind, uint32_t times = 1, uint64_t duration_ns = 0) {
    const Endpoint* ep = Ep();
    if (ep == nullptr) return "no endpoint to arm";
    for (uint32_t qpn : ep->qpns())
      if (std::string f = Arm(kind, qpn, times, duration_ns); !f.empty()) return f;
    return "";
  }
  // Ends the scripted faults still armed on these QPs (a hung QP stays hung).
  std::string Disarm(const std::vector<uint32_t>& qpns) {
    for (uint32_t qpn : qpns)
      if (absl::Status s = w_->fabric().ClearQpScript(0, "sim0", qpn); !s.ok())
        return absl::StrCat("disarm qpn ", qpn, ": ", s.message());
    return "";
  }

  // One request h0 -> h1 in a batch of its own; the local range is filled
  // with `tag`'s bytes first (WRITE) so the peer's copy can be checked.
  absl::StatusOr<TaskId> Submit(OpKind op, uint64_t local_off, uint64_t remote_off, uint64_t len,
                                uint64_t tag = 0) {
    if (op == OpKind::kWrite && tag != 0) Fill(*w_, 0, local_off, len, tag);
    if (op == OpKind::kRead && tag != 0) Fill(*w_, 1, remote_off, len, tag);
    auto batch = e().AllocateBatch(1);
    if (!batch.ok()) return batch.status();
    SubmitResult sr =
        w_->Submit(0, *batch, {MakeReq(*w_, 0, seg_, op, local_off, remote_off, len)});
    if (!sr.status.ok()) return sr.status;
    submit_ns_[Label(sr.tasks[0])] = w_->clock().NowNs();
    return sr.tasks[0];
  }
  TaskStatus Status(TaskId id) { return *e().GetTaskStatus(id); }
  std::shared_ptr<const Task> TaskOf(TaskId id) { return e().TaskOf(id); }
  uint64_t Label(TaskId id) {
    const auto* t = w_->TrackedOf(0, id);
    return t == nullptr ? 0 : t->label;
  }
  uint64_t SubmitNs(TaskId id) { return submit_ns_[Label(id)]; }
  uint64_t PublishNs(TaskId id) {
    const auto* t = w_->TrackedOf(0, id);
    return t == nullptr ? 0 : t->publish_ns;
  }

  // Runs until `done` (checked after every step, after the oracle) or
  // time_max_ns; `each` (optional) runs first at every step and may record
  // a failure in failure().
  bool RunUntil(const std::function<bool()>& done, uint64_t time_max_ns,
                const std::function<void()>& each = nullptr) {
    return w_->RunUntil(
        [&] {
          if (each) each();
          return done();
        },
        time_max_ns);
  }
  void RunFor(uint64_t ns, const std::function<void()>& each = nullptr) {
    RunUntil([] { return false; }, ns, each);
  }
  bool RunUntilTerminal(std::initializer_list<TaskId> ids, uint64_t time_max_ns,
                        const std::function<void()>& each = nullptr) {
    std::vector<TaskId> v(ids);
    return RunUntil(
        [&] {
          for (TaskId id : v)
            if (!IsTerminal(Status(id))) return false;
          return true;
        },
        time_max_ns, each);
  }
  // Records "" -> why once (the per-step checks use it).
  void Flag(std::string why) {
    if (failure_.empty()) failure_ = std::move(why);
  }
  const std::string& failure() const { return failure_; }

  // --------------------------------------------------------------- events
  // Order checks look only at records made after the last Mark().
  void Mark() { mark_ = w_->host(0).obs->records().size(); }
  size_t mark() const { return mark_; }
  const std::vector<LifecycleRecord>& records() { return w_->host(0).obs->records(); }
  bool Matches(const LifecycleRecord& r, const Ev& ev) {
    if (r.kind != ev.kind) return false;
    if (ev.task_label) return r.key == absl::StrCat("task ", *ev.task_label);
    // Events of the whole device (zombie_escalate, cq_err, ctx_reenabled)
    // carry the context's key "sim0|".
    if (r.key != Key() && r.key != "sim0|") return false;
    return !ev.a || r.a == *ev.a;
  }
  // Index of the first record matching `ev` at or after `from` (default:
  // the mark), or -1.
  int64_t At(const Ev& ev, std::optional<size_t> from = std::nullopt) {
    const auto& r = records();
    for (size_t i = from.value_or(mark_); i < r.size(); ++i)
      if (Matches(r[i], ev)) return static_cast<int64_t>(i);
    return -1;
  }
  int Count(const Ev& ev, size_t from, size_t to) {
    const auto& r = records();
    int n = 0;
    for (size_t i = from; i < r.size() && i < to; ++i) n += Matches(r[i], ev);
    return n;
  }
  static Ev Publish(uint64_t label) { return Ev{"publish", std::nullopt, label}; }
  static Ev Cancel(uint64_t label) { return Ev{"cancel", std::nullopt, label}; }
  static Ev Flush() { return Ev{"cqe_error", static_cast<uint64_t>(hal::WcStatus::kWrFlushErr)}; }
  // "" when each event occurs after the previous one (each found after the
  // index of the one before), else "order: timeout@12 timeout_retire@14
  // cqe_error@-1 ...". Returns the indices in *at when given.
  std::string InOrder(const std::vector<Ev>& evs, std::vector<int64_t>* at = nullptr) {
    std::vector<int64_t> idx;
    size_t from = mark_;
    bool ok = true;
    for (const Ev& ev : evs) {
      const int64_t i = ok ? At(ev, from) : -1;
      ok = ok && i >= 0;
      idx.push_back(i);
      if (ok) from = static_cast<size_t>(i) + 1;
    }
    if (at != nullptr) *at = idx;
    if (ok) return "";
    std::string out = "order:";
    for (size_t k = 0; k < evs.size(); ++k) {
      absl::StrAppend(&out, " ", evs[k].kind);
      if (evs[k].a) absl::StrAppend(&out, "(", *evs[k].a, ")");
      absl::StrAppend(&out, "@", idx[k]);
    }
    return out;
  }

  // h0's records from `from` on, one per line (for failure messages).
  std::string Dump(size_t from) {
    std::string out;
    for (size_t i = from; i < records().size(); ++i) {
      const LifecycleRecord& r = records()[i];
      absl::StrAppend(&out, i, " t=", r.time_ns, " w", r.worker, " ", r.kind, " ", r.key,
                      " a=", r.a, " b=", r.b, "\n");
    }
    return out;
  }
  // The oracle's (and fabric's) verdict so far, prefixed; "" when clean.
  std::string Oracle() {
    std::string v = w_->OracleAndViolations();
    return v.empty() ? "" : "oracle: " + v;
  }
  // Liveness after the fault: a new WRITE (fresh endpoint if need be)
  // completes and its bytes land.
  std::string NextWriteLands(uint64_t off, uint64_t tag) {
    Fill(*w_, 0, off, 16 * 1024, tag);
    auto [st, id] = Run1(*w_, 0, MakeReq(*w_, 0, seg_, OpKind::kWrite, off, off, 16 * 1024));
    (void)id;
    if (st != TaskStatus::kCompleted)
      return absl::StrCat("next WRITE ended ", std::string(TaskStatusName(st)));
    if (!Holds(*w_, 1, off, 16 * 1024, tag)) return "next WRITE's bytes did not land";
    return "";
  }
  // The end of every scenario: per-step failures, oracle, shutdown + C9.
  std::string Finish() {
    if (!failure_.empty()) return failure_;
    return testing::Finish(*w_);
  }

 private:
  ScenarioSpec spec_;
  std::unique_ptr<TwoEngines> w_;
  std::string setup_;
  SegmentHandle seg_;
  size_t mark_ = 0;
  std::string failure_;
  std::map<uint64_t, uint64_t> submit_ns_;
};

}  // namespace ferry::engine::testing

#endif  // FERRY_TESTS_ENGINE_SIM_SCENARIO_H_
