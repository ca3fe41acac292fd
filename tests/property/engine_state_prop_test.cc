// tests/property/engine_state_prop_test.cc: a RapidCheck state machine over
// the public engine API on the simulated RNIC (rc::state; docs/testing.md).
//
// Owns: the model (the user's ledger: which tasks were submitted, from which
// host and buffer slot, which were invalid, canceled, reused, and which host
// processes restarted) and ten commands over a simulated world of three
// hosts (sim/world/two_engines.h, oracle on at every scheduler step): the
// model's two hosts h0 and h1, and h2, a bystander whose transfers into
// h0 or h1 evict their endpoints. Submit (a READ or WRITE of 1 byte..64
// KiB, some invalid), Advance (virtual time), Inject (a scripted RNIC fault
// on a live QP or a device: flush, late CQE, hung QP, failed destroy or
// modify, loss, port flap, a hung QP that recovers, a held move to ERR, a
// CQE delivered twice, a fatal device, a GID change), NetFaults (the
// control network duplicates, reorders and delays for a while), Cancel,
// ReuseBuffer (poison the local buffer of a terminal task), RestartPeer,
// Evict (h2 writes into h0 or h1: a passive accept there, which evicts when
// the case drew a store of one endpoint), and Unregister, CloseSegment and
// FreeBatch (each refused while a task is pending). Each case draws its
// owners per context (1 or 2) and endpoint store capacity (1 or 32).
// After every command: the oracle and the fabric hold (DMA after publish,
// evidence at publish, posts after a latch, quota, pairing), a published
// status never changes, an invalid submit created nothing. At the end a
// Drain stops the faults and asserts liveness: every task of a live process
// terminal within bounded virtual time (h2's too), then a clean shutdown
// with no leak.
//
// Shrinking is stable: the world is a deterministic function of the values
// drawn per case and the commands, and each command carries its own
// sub-seed that reseeds every random stream of the world before it runs
// (Cmd below), so removing a command does not change what the others draw.
// RC_TAG reports which paths a case exercised (timeouts, partial destroys,
// reconnects, cancels, restarts, evictions, control-network faults).
// FERRY_MUTATION=<switch> proves the property catches a broken contract
// (meson tests property_engine_state_mut_*). FERRY_PROP_DUMP=1 prints, for
// a failing case, every lifecycle record, the tracked tasks and the fabric's
// violations (with RC_PARAMS="reproduce=..." to replay one case).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutation.h"
#include "engine/endpoint.h"
#include "sim/world/two_engines.h"
#include "tests/property/prop_env.h"

namespace ferry::property {
namespace {

using simworld::TwoEngines;

constexpr uint64_t kSlotBytes = 64 * 1024;
constexpr uint32_t kSlots = 8;  // per host: local slots at [0, 512 KiB), remote at [512 KiB, 1 MiB)
constexpr uint64_t kRemoteBase = kSlots * kSlotBytes;
// h2's transfers: 4 KiB each, from h2's slot k at [k * 4 KiB) into the
// target's [1 MiB + k * 4 KiB), which the model's tasks never touch.
constexpr uint32_t kEvictsMax = 16;
constexpr uint64_t kEvictBytes = 4096;
constexpr uint64_t kEvictBase = 1 << 20;
constexpr size_t kWorldBufBytes = 2 << 20;

struct ModelTask {
  uint32_t host = 0;
  uint32_t incarnation = 0;
  uint32_t slot = 0;
};
struct Model {
  std::vector<ModelTask> tasks;
  uint32_t next_slot[2] = {0, 0};
  uint32_t incarnation[2] = {0, 0};
  uint32_t restarts = 0;
  uint32_t evicts = 0;
};

struct Sut {
  std::unique_ptr<TwoEngines> w;
  SegmentHandle seg[2];
  std::vector<TaskId> ids;                             // by model task index
  std::vector<TaskStatus> seen;                        // last status read, by model task index
  std::vector<bool> reused;                            // poisoned after terminal
  std::vector<SegmentHandle> task_seg;                 // the segment each task targets
  std::optional<SegmentHandle> seg2[2];                // h2's open segments of h0, h1
  std::vector<std::pair<uint32_t, TaskId>> evict_ids;  // h2's tasks (target, id)
  bool timeouts = false, partial_destroy = false, cancels = false, reconnects = false,
       evictions = false, net_faults = false;

  engine::SteppedEngine& E(uint32_t h) { return *w->host(h).engine; }
  // The oracle's verdict and the statuses' stability, after every command.
  void Check(const Model& m) {
    const std::string v = w->OracleAndViolations();
    RC_ASSERT(v == "");
    for (size_t i = 0; i < ids.size(); ++i) {
      if (m.tasks[i].incarnation != m.incarnation[m.tasks[i].host]) continue;  // died
      auto st = E(m.tasks[i].host).GetTaskStatus(ids[i]);
      RC_ASSERT(st.ok());
      if (IsTerminal(seen[i])) RC_ASSERT(*st == seen[i]);  // published once, never changes
      seen[i] = *st;
      timeouts = timeouts || *st == TaskStatus::kTimeout;
    }
  }
  absl::Status Reopen() {
    for (uint32_t h = 0; h < 2; ++h) {
      auto s = w->Open(h, 1 - h);
      if (!s.ok()) return s.status();
      seg[h] = *s;
      if (seg2[h].has_value()) {
        auto s2 = w->Open(2, h);  // a restarted peer: h2 opens it again
        if (!s2.ok()) return s2.status();
        seg2[h] = *s2;
      }
    }
    return absl::OkStatus();
  }
};

// Every command carries its own sub-seed: run() reseeds every random stream
// of the world with it first (TwoEngines::Reseed), so what a command's
// simulator steps draw does not depend on the commands before it, and a
// shrunk list keeps each remaining command's randomness.
struct Cmd : rc::state::Command<Model, Sut> {
  uint64_t sub_seed = *rc::gen::arbitrary<uint64_t>();
  void run(const Model& m, Sut& s) const final {
    s.w->Reseed(sub_seed);
    Run(m, s);
  }
  virtual void Run(const Model& m, Sut& s) const = 0;
};

// The task a command's `pick` names (modulo the tasks so far), or nullptr
// when its process has restarted since (its tasks died with it).
const ModelTask* PickLive(const Model& m, uint32_t pick, size_t* index) {
  *index = pick % m.tasks.size();
  const ModelTask& t = m.tasks[*index];
  return t.incarnation == m.incarnation[t.host] ? &t : nullptr;
}

struct Submit : Cmd {
  uint32_t host = *rc::gen::inRange<uint32_t>(0, 2);
  bool write = *rc::gen::arbitrary<bool>();
  uint64_t len = *rc::gen::oneOf(rc::gen::inRange<uint64_t>(1, kSlotBytes + 1),
                                 rc::gen::element<uint64_t>(4096, 16384, 65536));
  // 0: valid; 1: zero length; 2: past the registered range; 3: unknown segment.
  uint32_t invalid = *rc::gen::weightedElement<uint32_t>({{12, 0}, {1, 1}, {1, 2}, {1, 3}});
  void checkPreconditions(const Model& m) const override {
    RC_PRE(invalid != 0 || m.next_slot[host] < kSlots);
  }
  void apply(Model& m) const override {
    if (invalid != 0) return;
    m.tasks.push_back(ModelTask{host, m.incarnation[host], m.next_slot[host]});
    ++m.next_slot[host];
  }
  void Run(const Model& m, Sut& s) const override {
    const uint32_t slot = invalid == 0 ? m.next_slot[host] : 0;
    Request r = simworld::MakeReq(*s.w, host, s.seg[host], write ? OpKind::kWrite : OpKind::kRead,
                                  slot * kSlotBytes, kRemoteBase + slot * kSlotBytes, len);
    if (invalid == 1) r.length_bytes = 0;
    if (invalid == 2) r.local_addr += s.w->host(host).buf.size();
    if (invalid == 3) r.segment = SegmentHandle{9999};
    if (write && invalid == 0)
      simworld::Fill(*s.w, host, slot * kSlotBytes, len, 1 + m.tasks.size());
    // An invalid request goes second, behind a valid READ into slot 0: the
    // batch is refused whole, so that READ never runs.
    std::vector<Request> reqs = {r};
    if (invalid != 0) {
      reqs.insert(reqs.begin(), simworld::MakeReq(*s.w, host, s.seg[host], OpKind::kRead, 0,
                                                  kRemoteBase, kSlotBytes));
    }
    auto batch = s.E(host).AllocateBatch(static_cast<uint32_t>(reqs.size()));
    RC_ASSERT(batch.ok());
    const size_t tracked = s.w->tracked().size();
    SubmitResult sr = s.w->Submit(host, *batch, reqs);
    if (invalid != 0) {
      // C8: a clear error for that request, nothing enqueued, nothing tracked.
      RC_ASSERT(!sr.status.ok());
      RC_ASSERT(sr.tasks.empty());
      RC_ASSERT(sr.per_request.size() == 2u && !sr.per_request[1].ok());
      RC_ASSERT(s.w->tracked().size() == tracked);
      RC_ASSERT(s.E(host).FreeBatch(*batch).ok());
    } else {
      RC_ASSERT(sr.status.ok());
      s.ids.push_back(sr.tasks[0]);
      s.seen.push_back(TaskStatus::kPending);
      s.reused.push_back(false);
      s.task_seg.push_back(r.segment);
    }
    s.Check(nextState(m));
  }
  void show(std::ostream& os) const override {
    os << "Submit(h" << host << (write ? " WRITE " : " READ ") << len << " bytes"
       << (invalid == 0   ? ""
           : invalid == 1 ? ", zero length"
           : invalid == 2 ? ", unregistered"
                          : ", bad segment")
       << (invalid == 0 ? "" : ", behind a valid READ") << ")";
  }
};

struct Advance : Cmd {
  uint64_t ns = *rc::gen::oneOf(rc::gen::inRange<uint64_t>(1'000, 200'000),
                                rc::gen::inRange<uint64_t>(1'000'000, 20'000'000));
  void Run(const Model& m, Sut& s) const override {
    s.w->RunUntil([] { return false; }, ns);
    s.Check(nextState(m));
  }
  void show(std::ostream& os) const override { os << "Advance(" << ns << " ns)"; }
};

struct Inject : Cmd {
  uint32_t host = *rc::gen::inRange<uint32_t>(0, 2);
  sim::FaultKind kind = *rc::gen::element(
      sim::FaultKind::kWrFlush, sim::FaultKind::kLateCqe, sim::FaultKind::kHungQp,
      sim::FaultKind::kDestroyQpFail, sim::FaultKind::kModifyQpFail, sim::FaultKind::kPacketLoss,
      sim::FaultKind::kPortFlap, sim::FaultKind::kHungQpRecover, sim::FaultKind::kQpErrHold,
      sim::FaultKind::kDupCqe, sim::FaultKind::kDeviceFatal, sim::FaultKind::kGidChange);
  uint32_t qp_index = *rc::gen::inRange<uint32_t>(0, 2);
  uint32_t times = *rc::gen::inRange<uint32_t>(1, 6);
  // The stall kinds' length: a hang that recovers, a held move to ERR, a
  // CQE's second copy; up to twice the slice timeout, so late successes
  // race timeouts.
  uint64_t duration_ns = *rc::gen::inRange<uint64_t>(100'000, 40'000'000);
  void Run(const Model& m, Sut& s) const override {
    sim::ScriptedFault f;
    f.at_ns = s.w->clock().NowNs();
    f.kind = kind;
    f.duration_ns = duration_ns;
    f.target.host = host;
    f.target.device = "sim0";
    if (kind == sim::FaultKind::kPortFlap || kind == sim::FaultKind::kDeviceFatal ||
        kind == sim::FaultKind::kGidChange) {
      f.target.kind = sim::TargetKind::kDevice;
    } else {
      const std::string peer = s.w->host(1 - host).addr + "@sim0";
      const engine::Endpoint* ep = s.E(host).FindEndpoint(s.E(host).OwnerOf(0, peer), 0, peer);
      if (ep == nullptr || qp_index >= ep->qpns().size()) return;  // nothing to hit now
      f.target.kind = sim::TargetKind::kQp;
      f.target.number = ep->qpns()[qp_index];
      if (kind == sim::FaultKind::kDestroyQpFail) s.partial_destroy = true;
    }
    for (uint32_t i = 0; i < times; ++i) {
      const absl::Status st = s.w->fabric().Inject(f);
      // A second hang of a QP that hangs already is refused, nothing else.
      RC_ASSERT(st.ok() || (kind == sim::FaultKind::kHungQpRecover &&
                            st.code() == absl::StatusCode::kFailedPrecondition));
    }
    s.Check(nextState(m));
  }
  void show(std::ostream& os) const override {
    os << "Inject(" << sim::FaultKindName(kind) << " x" << times << " on h" << host << " qp#"
       << qp_index << ")";
  }
};

struct Cancel : Cmd {
  uint32_t pick = *rc::gen::arbitrary<uint32_t>();
  void checkPreconditions(const Model& m) const override { RC_PRE(!m.tasks.empty()); }
  void Run(const Model& m, Sut& s) const override {
    size_t i = 0;
    const ModelTask* t = PickLive(m, pick, &i);
    if (t == nullptr) return;
    RC_ASSERT(s.w->Cancel(t->host, s.ids[i]).ok());
    s.cancels = true;
    s.Check(nextState(m));
  }
  void show(std::ostream& os) const override { os << "Cancel(task #" << pick << ")"; }
};

struct ReuseBuffer : Cmd {
  uint32_t pick = *rc::gen::arbitrary<uint32_t>();
  void checkPreconditions(const Model& m) const override { RC_PRE(!m.tasks.empty()); }
  void Run(const Model& m, Sut& s) const override {
    size_t i = 0;
    const ModelTask* t = PickLive(m, pick, &i);
    if (t == nullptr || !IsTerminal(s.seen[i]) || s.reused[i]) return;
    // The caller owns the buffer again: any DMA into it from now on is a
    // shadow-memory violation naming the task.
    simworld::Fill(*s.w, t->host, t->slot * kSlotBytes, kSlotBytes, 0xEE);
    s.reused[i] = true;
    s.Check(nextState(m));
  }
  void show(std::ostream& os) const override { os << "ReuseBuffer(task #" << pick << ")"; }
};

struct RestartPeer : Cmd {
  uint32_t host = *rc::gen::inRange<uint32_t>(0, 2);
  void checkPreconditions(const Model& m) const override { RC_PRE(m.restarts < 2u); }
  void apply(Model& m) const override {
    ++m.incarnation[host];
    ++m.restarts;
    m.next_slot[host] = kSlots;  // the dead process's buffers are not reused by the model
  }
  void Run(const Model& m, Sut& s) const override {
    RC_ASSERT(s.w->Restart(host).ok());
    RC_ASSERT(s.Reopen().ok());
    s.reconnects = true;
    s.Check(nextState(m));
  }
  void show(std::ostream& os) const override { os << "RestartPeer(h" << host << ")"; }
};

// Unregister and FreeBatch are refused while a task touches the memory or
// the batch (C8): the refusal changes nothing.
struct RefusedWhilePending : Cmd {
  uint32_t pick = *rc::gen::arbitrary<uint32_t>();
  void checkPreconditions(const Model& m) const override { RC_PRE(!m.tasks.empty()); }
  void Run(const Model& m, Sut& s) const override {
    size_t i = 0;
    const ModelTask* t = PickLive(m, pick, &i);
    if (t == nullptr) return;
    auto st = s.E(t->host).GetTaskStatus(s.ids[i]);
    RC_ASSERT(st.ok());
    if (IsTerminal(*st)) return;
    RC_ASSERT(s.E(t->host).FreeBatch(s.ids[i].batch).code() ==
              absl::StatusCode::kFailedPrecondition);
    RC_ASSERT(s.E(t->host).UnregisterMemory(s.w->host(t->host).buf.data()).code() ==
              absl::StatusCode::kFailedPrecondition);
    RC_ASSERT(s.E(t->host).CloseSegment(s.task_seg[i]).code() ==
              absl::StatusCode::kFailedPrecondition);
    s.Check(nextState(m));
  }
  void show(std::ostream& os) const override {
    os << "FreeBatchUnregisterCloseSegment(task #" << pick << ")";
  }
};

// The control network duplicates, reorders and delays every message for
// the next `for_ns` of virtual time, then is healthy again: delayed and
// duplicated REQs, REPs and descriptor answers of endpoints given up.
struct NetFaults : Cmd {
  uint32_t dup_pct = *rc::gen::inRange<uint32_t>(10, 60);
  uint64_t jitter_ns = *rc::gen::inRange<uint64_t>(100'000, 3'000'000);
  uint64_t for_ns = *rc::gen::inRange<uint64_t>(1'000'000, 20'000'000);
  void Run(const Model& m, Sut& s) const override {
    sim::NetPlan p;
    p.duplicate = sim::Ratio{dup_pct, 100};
    p.reorder = sim::Ratio{dup_pct, 100};
    p.reorder_jitter_ns_max = jitter_ns;
    RC_ASSERT(s.w->net().SetPlan(p).ok());
    s.w->RunUntil([] { return false; }, for_ns);
    RC_ASSERT(s.w->net().SetPlan(sim::NetPlan{}).ok());
    s.net_faults = true;
    s.Check(nextState(m));
  }
  void show(std::ostream& os) const override {
    os << "NetFaults(dup+reorder " << dup_pct << "%, jitter " << jitter_ns << " ns, for " << for_ns
       << " ns)";
  }
};

// h2 writes 4 KiB into h0 or h1 (opening the segment the first time): the
// target accepts h2's endpoint, evicting one of its own when its store is
// full (a busy one only when none is idle).
struct Evict : Cmd {
  uint32_t target = *rc::gen::inRange<uint32_t>(0, 2);
  void checkPreconditions(const Model& m) const override { RC_PRE(m.evicts < kEvictsMax); }
  void apply(Model& m) const override { ++m.evicts; }
  void Run(const Model& m, Sut& s) const override {
    if (!s.seg2[target].has_value()) {
      auto seg = s.w->Open(2, target);
      if (!seg.ok()) return;  // the target is unreachable for now: nothing to evict
      s.seg2[target] = *seg;
    }
    const uint64_t k = m.evicts;
    simworld::Fill(*s.w, 2, k * kEvictBytes, kEvictBytes, 0x1000 + k);
    Request r = simworld::MakeReqTo(*s.w, 2, target, *s.seg2[target], OpKind::kWrite,
                                    k * kEvictBytes, kEvictBase + k * kEvictBytes, kEvictBytes);
    auto batch = s.w->host(2).engine->AllocateBatch(1);
    RC_ASSERT(batch.ok());
    SubmitResult sr = s.w->Submit(2, *batch, {r});
    RC_ASSERT(sr.status.ok());
    s.evict_ids.push_back({target, sr.tasks[0]});
    s.Check(nextState(m));
  }
  void show(std::ostream& os) const override { os << "Evict(h2 -> h" << target << ")"; }
};

void RunStateMachine() {
  base::Mutations mutations;
  ApplyEnvMutation(mutations);
  const uint64_t seed = *rc::gen::inRange<uint64_t>(1, 1'000'000);
  EngineConfig config = simworld::RandomRunConfig();
  config.workers = *rc::gen::inRange<uint32_t>(1, 3);
  config.endpoint_store_capacity = *rc::gen::element<uint32_t>(1, 32);
  simworld::WorldOptions options;
  options.hosts = 3;
  options.buf_bytes = kWorldBufBytes;
  Sut s;
  s.w = std::make_unique<TwoEngines>(seed, sim::NetPlan{}, mutations, config,
                                     TwoEngines::MakeFabricConfig(), options);
  RC_ASSERT(s.w->start_failure() == "");
  RC_ASSERT(s.Reopen().ok());
  Model m;
  const auto commands = *rc::state::gen::commands(
      m, rc::state::gen::execOneOfWithArgs<Submit, Submit, Advance, Advance, Advance, Inject,
                                           Cancel, ReuseBuffer, RestartPeer, RefusedWhilePending,
                                           NetFaults, Evict>());
  rc::state::runAll(commands, m, s);
  Model end = m;
  for (const auto& c : commands) c->apply(end);
  // Drain: faults stop (the QPs they hit are retired by now or will be:
  // the timeout path gets evidence for each), every live task terminal.
  const bool live = s.w->RunUntil(
      [&] {
        for (size_t i = 0; i < s.ids.size(); ++i)
          if (end.tasks[i].incarnation == end.incarnation[end.tasks[i].host] &&
              !IsTerminal(*s.E(end.tasks[i].host).GetTaskStatus(s.ids[i])))
            return false;
        for (const auto& [target, id] : s.evict_ids)
          if (!IsTerminal(*s.w->host(2).engine->GetTaskStatus(id))) return false;
        return true;
      },
      10'000'000'000);
  if (std::getenv("FERRY_PROP_DUMP") != nullptr && s.w->OracleAndViolations() != "") {
    for (const auto* o : s.w->observers())
      for (const auto& rec : o->records())
        std::fprintf(stderr, "%s t=%llu w%u %s %s a=%llu b=%llu\n", o->tag().c_str(),
                     (unsigned long long)rec.time_ns, rec.worker, rec.kind.c_str(), rec.key.c_str(),
                     (unsigned long long)rec.a, (unsigned long long)rec.b);
    for (const auto& t : s.w->tracked())
      std::fprintf(stderr, "task %llu h%u off=%lld len=%llu status=%s\n",
                   (unsigned long long)t.label, t.host,
                   (long long)(t.addr - s.w->host(t.host).buf.data()), (unsigned long long)t.len,
                   std::string(TaskStatusName(t.published)).c_str());
    for (const auto& v : s.w->fabric().violations())
      std::fprintf(stderr, "violation t=%llu %s\n", (unsigned long long)v.time_ns,
                   v.message.c_str());
  }
  RC_ASSERT(s.w->OracleAndViolations() == "");
  RC_ASSERT(live);
  for (const auto& r : s.w->observers())
    for (const auto& rec : r->records()) {
      if (rec.kind == "destroy_failed") s.partial_destroy = true;
      if (rec.kind == "ep_retire") s.reconnects = true;
      if (rec.kind == "timeout") s.timeouts = true;
      if (rec.kind == "ep_evict") s.evictions = true;
    }
  RC_TAG(s.timeouts ? "timeout" : "no timeout");
  RC_TAG(s.partial_destroy ? "destroy failed" : "no failed destroy");
  RC_TAG(s.reconnects ? "reconnect" : "no reconnect");
  RC_TAG(s.cancels ? "cancel" : "no cancel");
  RC_TAG(end.restarts > 0 ? "restart" : "no restart");
  RC_TAG(s.evictions ? "eviction" : "no eviction");
  RC_TAG(s.net_faults ? "control-network faults" : "no control-network faults");
  const std::string leaks = s.w->ShutdownAndCheckLeaks();
  RC_ASSERT(leaks == "");
  RC_ASSERT(s.w->OracleAndViolations() == "");
}

RC_GTEST_PROP(EngineStateProp, TheEngineKeepsItsContractsUnderRandomUseAndFaults, ()) {
  RunStateMachine();
}

}  // namespace
}  // namespace ferry::property
