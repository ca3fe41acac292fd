// sim/world/swarm_run.cc: one swarm run: the world of the seed's shape, the
// two-wave workload and the verdict (see swarm.h for what is judged).
//
// Buffer layout: BufLayout (swarm_shape.h). The fixed profile's run is the
// one every named regression was found on; the random profile adds, from
// its own workload stream (Prng(seed * 7919 + 4), drawn in scheduler order):
// the peer of each batch, sizes (log-uniform from 1 byte, slice-boundary
// sizes too), batch sizes, READ/WRITE, cancels, buffer poison on reuse and
// C8 attempts while tasks are pending; its second wave runs with every fault
// off (the RNIC's seeded kinds too) and must COMPLETE between every pair of
// hosts within kWave2AttemptsMax attempts.
#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/fnv1a.h"
#include "sim/rnic/shadow_memory.h"
#include "sim/world/swarm.h"

namespace ferry::simworld {
namespace {

// First wave: a driver round every SwarmOptions::round_ns during the fault
// window; each live, running process submits into its free slots (a slot is
// reused once its task is terminal and judged).
constexpr uint32_t kTasksPerRoundMaxFixed = 2;
constexpr uint32_t kWave2AttemptsMax = 4;
// Segment opens at the start of a run, each bounded by the engine's open deadline.
constexpr uint32_t kOpenAttemptsMax = 4;
constexpr uint64_t kPoisonTag = 0xdead0000;

struct Item {
  uint32_t h = 0;
  uint32_t peer = 0;
  size_t tracked = 0;  // index into TwoEngines::tracked()
  int32_t slot = -1;   // first-wave slot, -1 in the second wave
  OpKind op = OpKind::kWrite;
  uint64_t local_off = 0, remote_off = 0, len = 0, tag = 0;
  BatchId batch;
  SegmentHandle seg;
  bool judged = false;
};

// A process's view of a peer's segment: which of its own incarnations
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
      : seed_(seed),
        o_(o),
        plan_(plan),
        shape_(plan.shape),
        layout_(LayoutOf(plan.shape)),
        random_(plan.shape.profile == WorldProfile::kRandom),
        r_(r),
        wl_(seed * 7919 + 4),
        slots_(shape_.hosts, std::vector<int32_t>(shape_.slots, -1)),
        segs_(shape_.hosts),
        peers_(shape_.hosts) {
    for (uint32_t h = 0; h < shape_.hosts; ++h) {
      if (!random_) {
        peers_[h] = {1 - h};
        continue;
      }
      std::vector<uint32_t> others;
      for (uint32_t p = 0; p < shape_.hosts; ++p)
        if (p != h) others.push_back(p);
      wl_.Shuffle(std::span<uint32_t>(others));
      others.resize(shape_.peers_per_host);
      std::sort(others.begin(), others.end());
      peers_[h] = others;
    }
  }

  void Go() {
    sim::FabricConfig fc = TwoEngines::MakeFabricConfig();
    fc.plan = plan_.rnic;
    fc.stall = plan_.stall;
    fc.mutations = o_.mutations;
    if (random_) {
      fc.profile = shape_.rnic;
      fc.straggler = shape_.straggler;
      fc.fabric_lifetime_ns = shape_.straggler_ns;
    }
    WorldOptions wo;
    wo.trace_record_max = o_.trace_record_max;
    wo.hosts = shape_.hosts;
    wo.devices_per_host = shape_.nics;
    wo.buf_bytes = layout_.bytes;
    wo.steps_max = o_.steps_max;
    wo.wake = o_.wake;
    wo.wake_probes = o_.wake_probes;
    if (shape_.revocable && o_.windows) {
      MemoryOptions m;
      m.revocable = true;
      for (uint32_t h = 0; h < shape_.hosts; ++h) wo.host_memory[h] = m;
    }
    EngineConfig config = shape_.Config();
    if (!o_.read_depth) config.qp_rd_atomic_max = EngineConfig{}.qp_rd_atomic_max;
    if (!o_.cq_spread) config.cqs_per_worker = 1;
    if (o_.notify) EnableNotify(&config);
    w_ = std::make_unique<TwoEngines>(seed_, plan_.world.net, o_.mutations, config, fc, wo);
    Verdict(WithWakeProbes(Body()));
    Collect();
  }

 private:
  uint32_t hosts() const { return shape_.hosts; }

  // Returns "" or the failure (class in cls_).
  std::string Body() {
    TwoEngines& w = *w_;
    if (!w.start_failure().empty()) return Live(w.start_failure());
    for (uint32_t h = 0; h < hosts(); ++h) {
      for (uint32_t p : peers_[h]) {
        // An open that runs out of time under heavy control-network loss
        // (every resend or its answer lost: seed 836182297, loss 16/100) is
        // the engine's right answer; the workload retries as a user would.
        const uint32_t attempts =
            o_.mutations.on(base::Mutation::kSwarmOpenOnce) ? 1 : kOpenAttemptsMax;
        absl::StatusOr<SegmentHandle> seg = absl::UnknownError("not opened");
        for (uint32_t a = 0; a < attempts; ++a) {
          if (a > 0) ++r_->open_retries;
          seg = w.Open(h, p);
          if (seg.ok() || seg.status().code() != absl::StatusCode::kDeadlineExceeded) break;
        }
        if (!seg.ok())
          return Live(absl::StrCat("h", h, " open of h", p, " failed: ", seg.status().ToString()));
        segs_[h][p] = PeerSegment{*seg, std::nullopt, 0, 0};
      }
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
    if (std::string e = random_ ? Wave2Random() : Wave2Fixed(); !e.empty()) return e;
    if (random_) {
      if (std::string e = Wave3Rails(); !e.empty()) return e;
    }
    if (o_.notify) {
      // N5: a notification COMPLETED at its sender was delivered, once the
      // receiver polled its CQ (a restarted receiver excepted).
      w.RunUntil([&] { return w.NotifiesUndelivered().empty(); }, 100'000'000);
      if (std::string u = w.NotifiesUndelivered(); !u.empty()) return Safe(u);
    }
    if (std::string l = w.ShutdownAndCheckLeaks(); !l.empty()) {
      if (std::string v = w.OracleAndViolations(); !v.empty())
        return Safe("oracle at shutdown: " + v);
      return Live("leak: " + l);
    }
    if (std::string v = w.OracleAndViolations(); !v.empty())
      return Safe("oracle at shutdown: " + v);
    return "";
  }

  // Wave 2 of the fixed profile, after the runner's faults stopped: both
  // processes up, fresh descriptors (a restarted peer has new rkeys), one
  // WRITE and one READ each way, every task terminal (the RNIC's seeded
  // kinds stay on: terminal, not COMPLETED).
  std::string Wave2Fixed() {
    TwoEngines& w = *w_;
    items_.clear();
    for (uint32_t h = 0; h < hosts(); ++h)
      if (w.host(h).engine == nullptr) return Live(absl::StrCat("h", h, " is down after faults"));
    for (uint32_t h = 0; h < hosts(); ++h) {
      auto seg = w.Open(h, 1 - h);
      if (!seg.ok())
        return Live(absl::StrCat("wave 2: h", h, " open failed: ", seg.status().ToString()));
      for (uint32_t i = 0; i < 2; ++i) {
        const uint64_t tag = 9000 + 10 * h + i;
        if (std::string e =
                Submit(h, 1 - h, *seg,
                       {Task(h, 1 - h, i % 2 == 0 ? OpKind::kWrite : OpKind::kRead,
                             layout_.W2Local(i), layout_.W2Remote(h, i), tag, FixedLen(tag), -1)});
            !e.empty())
          return e;
      }
    }
    if (!RunToTerminal()) return Live("wave 2: " + NotTerminal());
    if (std::string v = w.OracleAndViolations(); !v.empty()) return Safe("oracle: " + v);
    for (Item& it : items_)
      if (std::string b = Judge(it); !b.empty()) return Safe(b);
    return "";
  }

  // Wave 2 of the random profile: every fault off (the RNIC's seeded kinds
  // and stragglers too), then between every ordered pair of hosts one
  // WRITE and one READ, resubmitted after a non-COMPLETED end (an endpoint
  // hung or broken in wave 1 retires on its first timeout), until COMPLETED
  // with the right bytes; a pair that does not get there in
  // kWave2AttemptsMax attempts is a liveness failure. The pairs go in the
  // rounds of a round-robin tournament (each host has one peer per round,
  // both directions at once): a store smaller than peers x rails thrashes
  // under all-to-all load by design (eviction is judged locally; the target
  // of a one-sided op cannot know it is busy), and liveness asks that each
  // pair can transfer, not that an undersized store serves all at once.
  std::string Wave2Random() {
    TwoEngines& w = *w_;
    w.fabric().StopSeededFaults();
    for (uint32_t h = 0; h < hosts(); ++h)
      if (w.host(h).engine == nullptr) return Live(absl::StrCat("h", h, " is down after faults"));
    // Every rail paused in wave 1 comes back within rail_cooldown_ns_max
    // (and a link taken down comes up): let that much virtual time pass.
    (void)w.RunUntil([] { return false; }, shape_.rail_cooldown_ns_max + 10'000'000);
    if (std::string v = w.OracleAndViolations(); !v.empty()) return Safe("oracle: " + v);
    // Circle method: n (even, with a bye when odd) players, n - 1 rounds.
    const uint32_t n = hosts() + hosts() % 2;
    for (uint32_t round = 0; round + 1 < n; ++round) {
      std::vector<Item> todo;
      for (uint32_t k = 0; k < n / 2; ++k) {
        const uint32_t a = k == 0 ? n - 1 : (round + k) % (n - 1);
        const uint32_t b = (round + n - 1 - k) % (n - 1);
        if (a >= hosts() || b >= hosts()) continue;  // the bye
        for (const auto& [h, p] : {std::pair{a, b}, std::pair{b, a}}) {
          auto seg = w.Open(h, p);
          if (!seg.ok())
            return Live(absl::StrCat("wave 2: h", h, " open of h", p,
                                     " failed: ", seg.status().ToString()));
          for (uint32_t i = 0; i < 2; ++i) {
            const uint64_t tag = 9000 + 100 * h + 10 * p + i;
            todo.push_back(Task(h, p, i == 0 ? OpKind::kWrite : OpKind::kRead,
                                layout_.W2Local(2 * p + i), layout_.W2Remote(h, i), tag,
                                1024 + 1024 * (tag % 8), -1));
            todo.back().seg = *seg;
          }
        }
      }
      if (std::string e = Wave2Until(std::move(todo)); !e.empty()) return e;
    }
    return "";
  }

  // Liveness on every rail (random profile, after wave 2): a task's rail is
  // its index in its batch (local context i % contexts, the peer's device
  // i % its devices). Each host in turn sends the next host 1 KiB WRITEs
  // into one batch, one at a time (each terminal before the next: two
  // rails that land on one owner of the peer with a store of one endpoint
  // would evict each other, the documented limit of passive accepts), the
  // one at index i until COMPLETED with its bytes, within kWave2AttemptsMax
  // attempts (a retry starts a fresh batch and replays indices 0..i-1).
  // The engine's post records must then show a post on every rail it
  // holds: every rail paused in wave 1 is back and carries a fresh transfer.
  std::string Wave3Rails() {
    TwoEngines& w = *w_;
    const uint32_t n = hosts();
    for (uint32_t h = 0; h < n; ++h) {
      const uint32_t p = (h + 1) % n;
      auto seg = w.Open(h, p);
      if (!seg.ok())
        return Live(
            absl::StrCat("wave 3: h", h, " open of h", p, " failed: ", seg.status().ToString()));
      const size_t mark = w.host(h).obs->records().size();
      std::optional<BatchId> batch;
      uint32_t next = 0;  // the batch's next index
      for (uint32_t rail = 0; rail < shape_.nics; ++rail) {
        std::string last;
        for (uint32_t attempt = 1;; ++attempt) {
          if (attempt > kWave2AttemptsMax)
            return Live(absl::StrCat("wave 3: h", h, " -> h", p, " rail index ", rail,
                                     " not COMPLETED within ", kWave2AttemptsMax,
                                     " attempts:", last));
          if (attempt > 1 || !batch) {
            auto b = w.host(h).engine->AllocateBatch(shape_.nics);
            if (!b.ok()) return Live(absl::StrCat("h", h, " batch: ", b.status().ToString()));
            batch = *b;
            next = 0;
          }
          std::optional<TaskStatus> st;
          for (; next <= rail; ++next) {
            const uint64_t tag = 9500 + 10 * h + next;
            items_.clear();
            if (std::string e = SubmitTo(h, p, *seg, *batch,
                                         {Task(h, p, OpKind::kWrite, layout_.W2Local(2 * p),
                                               layout_.W2Remote(h, 0), tag, 1024, -1)});
                !e.empty())
              return e;
            if (items_.size() != 1)
              return Live(absl::StrCat("wave 3: h", h, " submit to h", p, " refused"));
            if (!RunToTerminal()) return Live("wave 3: " + NotTerminal());
            if (std::string v = w.OracleAndViolations(); !v.empty()) return Safe("oracle: " + v);
            if (std::string b = Judge(items_[0]); !b.empty()) return Safe(b);
            st = StatusOf(items_[0]);
          }
          if (st == TaskStatus::kCompleted) break;
          absl::StrAppend(&last, " ",
                          std::string(TaskStatusName(st.value_or(TaskStatus::kPending))));
        }
      }
      // The engine's own records say each local rail posted (the rail of a
      // batch index is the engine's choice; this checks it took them all).
      // A NIC whose bring-up failed is a rail too: its owners bring it up
      // in place once the faults are off (C7), within the rail cooldown
      // bound wave 2 waited out.
      const auto& recs = w.host(h).obs->records();
      for (uint32_t d = 0; d < shape_.nics; ++d) {
        const std::string prefix = absl::StrCat("sim", d, "|");
        const std::optional<uint32_t> ci = w.host(h).engine->ContextIndexOf(absl::StrCat("sim", d));
        if (!ci.has_value())
          return Live(absl::StrCat("wave 3: rail h", h, "/sim", d,
                                   " is no rail of the engine: its bring-up failed and it was "
                                   "dropped, not brought up in place (C7)"));
        if (!w.host(h).engine->ContextUp(*ci))
          return Live(absl::StrCat("wave 3: rail h", h, "/sim", d, " is still down ",
                                   shape_.rail_cooldown_ns_max, " ns after the faults stopped"));
        bool posted = false;
        for (size_t i = mark; i < recs.size() && !posted; ++i)
          posted = recs[i].kind == "post" && absl::StartsWith(recs[i].key, prefix);
        if (!posted) return Live(absl::StrCat("wave 3: nothing posted on rail h", h, "/sim", d));
      }
    }
    return "";
  }

  // Submits `todo` (each task alone in its batch) until every one COMPLETED.
  std::string Wave2Until(std::vector<Item> todo) {
    TwoEngines& w = *w_;
    std::string last;
    for (uint32_t attempt = 1; !todo.empty(); ++attempt) {
      if (attempt > kWave2AttemptsMax)
        return Live(absl::StrCat("wave 2: not COMPLETED within ", kWave2AttemptsMax,
                                 " attempts with every fault off:", last));
      items_.clear();
      r_->wave2_attempts += todo.size();
      for (const Item& it : todo)
        if (std::string e = Submit(it.h, it.peer, it.seg, {it}); !e.empty()) return e;
      if (!RunToTerminal()) return Live("wave 2: " + NotTerminal());
      if (std::string v = w.OracleAndViolations(); !v.empty()) return Safe("oracle: " + v);
      std::vector<Item> again;
      last.clear();
      for (Item& it : items_) {
        if (std::string b = Judge(it); !b.empty()) return Safe(b);
        const std::optional<TaskStatus> st = StatusOf(it);
        if (st == TaskStatus::kCompleted) continue;
        absl::StrAppend(&last, " h", it.h, "->h", it.peer, " tag ", it.tag, " ",
                        std::string(TaskStatusName(st.value_or(TaskStatus::kPending))));
        again.push_back(it);
      }
      todo = std::move(again);
    }
    return "";
  }

  static uint64_t FixedLen(uint64_t tag) { return 8 * 1024 + 4096 * (tag % 7); }

  // A first-wave length of the random profile: a slice-boundary size 1 in
  // 8, else log-uniform in [1, slot_bytes].
  uint64_t DrawLen() {
    const uint64_t s = shape_.slice_bytes, cap = shape_.slot_bytes;
    if (wl_.Below(8) == 0) {
      const std::array<uint64_t, 4> edge = {s - 1, s, s + 1, 2 * s};
      return std::clamp<uint64_t>(edge[wl_.Below(4)], 1, cap);
    }
    uint32_t bits = 0;
    while ((uint64_t{2} << bits) <= cap) ++bits;  // cap = 2^bits for a power of two
    const uint32_t e = static_cast<uint32_t>(wl_.Below(bits + 1));
    const uint64_t lo = e == 0 ? 1 : (uint64_t{1} << (e - 1)) + 1;
    return std::min(cap, wl_.Range(lo, uint64_t{1} << e));
  }

  // A first-wave round (runs inside the world's scheduler actor): each live,
  // running process frees the slots whose task is terminal (judging it),
  // makes sure it holds a segment of its peer, and submits into free slots.
  void Round() {
    TwoEngines& w = *w_;
    ++round_;
    for (uint32_t h = 0; h < hosts() && failure_.empty(); ++h) {
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
        // The consumer reuses the buffer the moment its task is terminal:
        // a later DMA into it is flagged by the shadow memory, and a later
        // READ's bytes would be overwritten.
        if (shape_.poison_on_reuse && st)
          Fill(w, h, it.local_off, it.len, kPoisonTag + static_cast<uint64_t>(s));
        s = -1;
      }
      if (random_) {
        if (wl_.Chance(shape_.cancel)) CancelOne(h);
        if (wl_.Chance(shape_.c8_probe)) {
          if (std::string e = C8Probe(h); !e.empty()) {
            failure_ = Safe(e);
            return;
          }
        }
      }
      const uint32_t peer = random_ ? peers_[h][wl_.Below(peers_[h].size())] : peers_[h][0];
      std::optional<SegmentHandle> seg = Segment(h, peer);
      if (!seg) continue;
      const uint32_t want =
          random_ ? static_cast<uint32_t>(wl_.Range(1, shape_.batch_max)) : kTasksPerRoundMaxFixed;
      std::vector<Item> batch;
      for (uint32_t k = 0; k < shape_.slots && batch.size() < want; ++k) {
        const uint32_t slot = static_cast<uint32_t>((round_ + k) % shape_.slots);
        if (slots_[h][slot] >= 0) continue;
        if (!RemoteQuiet(peer, layout_.W1Remote(h, slot, shape_.slot_bytes), shape_.slot_bytes))
          continue;
        const OpKind op = random_ ? (wl_.Below(2) == 0 ? OpKind::kWrite : OpKind::kRead)
                          : (round_ + slot) % 2 == 0 ? OpKind::kWrite
                                                     : OpKind::kRead;
        const uint64_t tag = next_tag_++;
        batch.push_back(Task(h, peer, op, layout_.W1Local(slot, shape_.slot_bytes),
                             layout_.W1Remote(h, slot, shape_.slot_bytes), tag,
                             random_ ? DrawLen() : FixedLen(tag), static_cast<int32_t>(slot)));
      }
      if (batch.empty()) continue;
      if (std::string e = Submit(h, peer, *seg, batch); !e.empty()) {
        failure_ = e;
        return;
      }
    }
  }

  // False while a taint overlapping peer's [off, off + len) may still be
  // written by a WRITE that was not COMPLETED; taints found quiet are
  // dropped (counted in remote_waits when a slot had to wait).
  bool RemoteQuiet(uint32_t peer, uint64_t off, uint64_t len) {
    if (o_.mutations.on(base::Mutation::kSwarmReuseUnquietRemote)) return true;
    const uint8_t* base = w_->host(peer).buf.data();
    for (size_t i = 0; i < taints_.size();) {
      const Taint& t = taints_[i];
      if (t.peer != peer || t.off >= off + len || off >= t.off + t.len) {
        ++i;
        continue;
      }
      if (w_->fabric().WriteMayLand(peer, reinterpret_cast<uint64_t>(base + t.off), t.len)) {
        ++r_->remote_waits;
        return false;
      }
      taints_[i] = taints_.back();
      taints_.pop_back();
    }
    return true;
  }

  // Cancels one of host h's pending first-wave tasks (drawn).
  void CancelOne(uint32_t h) {
    std::vector<size_t> pending;
    for (int32_t s : slots_[h]) {
      if (s < 0) continue;
      const Item& it = items_[static_cast<size_t>(s)];
      const std::optional<TaskStatus> st = StatusOf(it);
      if (st && !IsTerminal(*st)) pending.push_back(static_cast<size_t>(s));
    }
    if (pending.empty()) return;
    const Item& it = items_[pending[wl_.Below(pending.size())]];
    ++r_->cancels;
    (void)w_->Cancel(h, w_->tracked()[it.tracked].id);
  }

  // C8 while a task is pending: FreeBatch of its batch, UnregisterMemory of
  // the buffer it reads or writes, and CloseSegment of its segment are all
  // refused with kFailedPrecondition and change nothing; and a batch whose
  // second request is invalid is refused whole (C8InvalidBatch).
  std::string C8Probe(uint32_t h) {
    engine::SteppedEngine& e = *w_->host(h).engine;
    for (int32_t s : slots_[h]) {
      if (s < 0) continue;
      const Item& it = items_[static_cast<size_t>(s)];
      const std::optional<TaskStatus> st = StatusOf(it);
      if (!st || IsTerminal(*st)) continue;
      ++r_->c8_probes;
      const std::pair<std::string_view, absl::Status> calls[] = {
          {"FreeBatch", e.FreeBatch(it.batch)},
          {"UnregisterMemory", e.UnregisterMemory(w_->host(h).buf.data())},
          {"CloseSegment", e.CloseSegment(it.seg)},
      };
      for (const auto& [name, status] : calls) {
        // The task may have published inside the call before it (never
        // here: the probes run within one driver step, no engine step
        // between them), so a pending task's refusal is required.
        if (status.code() != absl::StatusCode::kFailedPrecondition)
          return absl::StrCat("c8_while_pending: h", h, " ", std::string(name), " with task ",
                              w_->tracked()[it.tracked].label, " pending returned ",
                              status.ToString(), " (kFailedPrecondition expected)");
      }
      return C8InvalidBatch(h, it);
    }
    return "";
  }

  // A fresh batch of two READs into the pending task's buffer, the second
  // of length 0: Submit must refuse it whole (an error at index 1, no task,
  // nothing tracked) and leave the batch empty, so FreeBatch succeeds. The
  // first request is never enqueued, so its READ never touches the buffer
  // the pending task owns.
  std::string C8InvalidBatch(uint32_t h, const Item& it) {
    engine::SteppedEngine& e = *w_->host(h).engine;
    auto batch = e.AllocateBatch(2);
    if (!batch.ok()) return "";  // no batch to spare now: nothing to probe
    const Request good =
        MakeReqTo(*w_, h, it.peer, it.seg, OpKind::kRead, it.local_off, it.remote_off, it.len);
    Request bad = good;
    bad.length_bytes = 0;
    const size_t tracked = w_->tracked().size();
    const SubmitResult sr = w_->Submit(h, *batch, {good, bad});
    const absl::Status freed = e.FreeBatch(*batch);
    if (!sr.status.ok() && sr.tasks.empty() && w_->tracked().size() == tracked &&
        sr.per_request.size() == 2 && !sr.per_request[1].ok() && freed.ok()) {
      return "";
    }
    return absl::StrCat("c8_partial_submit: h", h,
                        " a batch whose request 1 has length 0 returned ", sr.status.ToString(),
                        " with ", sr.tasks.size(), " task(s) enqueued; FreeBatch of it returned ",
                        freed.ToString());
  }

  // The segment host h submits against on `peer`, (re)opened asynchronously
  // when h restarted, and, if the plan says so, when the peer restarted.
  std::optional<SegmentHandle> Segment(uint32_t h, uint32_t peer) {
    TwoEngines& w = *w_;
    PeerSegment& ps = segs_[h][peer];
    const uint32_t own = w.host(h).incarnation, peer_inc = w.host(peer).incarnation;
    const bool stale = ps.own_incarnation != own ||
                       (plan_.world.reopen_after_peer_restart && ps.peer_incarnation != peer_inc);
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
      ps.peer_incarnation = peer_inc;
      return ps.handle;
    }
    auto t = e.OpenSegmentAsync(w.host(peer).addr);
    ps.own_incarnation = own;
    ps.handle.reset();
    if (t.ok()) ps.opening = *t;
    return std::nullopt;
  }

  static Item Task(uint32_t h, uint32_t peer, OpKind op, uint64_t loff, uint64_t roff, uint64_t tag,
                   uint64_t len, int32_t slot) {
    Item it;
    it.h = h;
    it.peer = peer;
    it.op = op;
    it.local_off = loff;
    it.remote_off = roff;
    it.len = len;
    it.tag = tag;
    it.slot = slot;
    return it;
  }

  // Notification mode: receive slots, bounded RNR retries, and the CQ
  // sized for the receive WRs' quota too.
  static void EnableNotify(EngineConfig* c) {
    c->notify_recv_slots = 2;
    c->qp_rnr_retries = 3;
    const uint64_t need =
        (uint64_t{c->wr_depth} + c->notify_recv_slots) * c->qps_per_endpoint * c->EndpointsPerCq();
    c->cqe_limit = static_cast<uint32_t>(std::max<uint64_t>(c->cqe_limit, need));
    ++c->batch_capacity_max;  // the notification's task
  }

  // A new batch (the workload's capacity, batch_max or 16; one more for
  // the notification in notification mode).
  std::string Submit(uint32_t h, uint32_t peer, SegmentHandle seg, std::vector<Item> batch_items) {
    const uint32_t capacity = (random_ ? shape_.batch_max : 16) + (o_.notify ? 1 : 0);
    auto batch = w_->host(h).engine->AllocateBatch(capacity);
    if (!batch.ok()) return Live(absl::StrCat("h", h, " batch: ", batch.status().ToString()));
    return SubmitTo(h, peer, seg, *batch, std::move(batch_items), o_.notify);
  }
  // Submit into an existing batch (a task's rail is its index in it).
  std::string SubmitTo(uint32_t h, uint32_t peer, SegmentHandle seg, BatchId batch,
                       std::vector<Item> batch_items, bool notify = false) {
    TwoEngines& w = *w_;
    std::vector<Request> reqs;
    for (const Item& it : batch_items) {
      if (it.op == OpKind::kWrite) {
        Fill(w, h, it.local_off, it.len, it.tag);
      } else {
        Fill(w, peer, it.remote_off, it.len, it.tag);
      }
      reqs.push_back(MakeReqTo(w, h, peer, seg, it.op, it.local_off, it.remote_off, it.len));
    }
    const size_t tracked0 = w.tracked().size();
    SubmitResult sr = notify ? w.SubmitNotify(h, batch, reqs, peer, seg,
                                              absl::StrCat("tags from ", batch_items[0].tag))
                             : w.Submit(h, batch, reqs);
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
      it.batch = batch;
      it.seg = seg;
      it.judged = false;
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
    // Items before `open` are terminal (a terminal task stays terminal and
    // items_ only grows during a run), so each check resumes there.
    size_t open = 0;
    return w.RunUntil(
               [&] {
                 if (!failure_.empty()) return true;
                 if (w.faults_pending()) return false;
                 for (; open < items_.size(); ++open) {
                   const Item& it = items_[open];
                   if (it.judged) continue;  // terminal, counted
                   const std::optional<TaskStatus> st = StatusOf(it);
                   if (st && !IsTerminal(*st)) return false;
                 }
                 return true;
               },
               o_.terminal_ns) &&
           failure_.empty();
  }

  std::string NotTerminal() {
    TwoEngines& w = *w_;
    std::string out = absl::StrCat("not all terminal within ", o_.terminal_ns, " ns (",
                                   std::string(sim::RunOutcomeName(w.last_run().outcome)), " ",
                                   w.last_run().detail, "): ");
    for (const Item& it : items_) {
      const std::optional<TaskStatus> st = StatusOf(it);
      if (st && !IsTerminal(*st)) absl::StrAppend(&out, "h", it.h, " tag ", it.tag, " pending; ");
    }
    for (uint32_t h = 0; h < hosts(); ++h) {
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
    if (random_ && it.op == OpKind::kWrite && st != TaskStatus::kCompleted)
      taints_.push_back(Taint{it.peer, it.remote_off, it.len});
    if (!st) {
      ++r_->tasks_dead;
      return "";
    }
    ++r_->status[static_cast<size_t>(*st) & 7];
    if (*st != TaskStatus::kCompleted) return "";
    TwoEngines& w = *w_;
    const uint32_t at_host = it.op == OpKind::kWrite ? it.peer : it.h;
    const uint64_t at_off = it.op == OpKind::kWrite ? it.remote_off : it.local_off;
    const std::span<const uint8_t> got(w.host(at_host).buf.data() + at_off, it.len);
    const size_t bad = sim::FirstNotAttributable(got, it.tag, 0);
    if (bad == it.len) return "";
    // The wrong run ends where 8 bytes in a row are the task's again (a
    // single byte matches by chance one time in 256; 8 in a row do not).
    size_t bad_end = bad + 1;
    while (bad_end < it.len) {
      const size_t n = std::min<size_t>(8, it.len - bad_end);
      if (sim::FirstNotAttributable(got.subspan(bad_end, n), it.tag, bad_end) == n) break;
      ++bad_end;
    }
    return absl::StrCat(
        "wrong bytes: COMPLETED ", it.op == OpKind::kWrite ? "WRITE" : "READ", " of h", it.h,
        random_ ? absl::StrCat(" to h", it.peer) : "", " task ", w.tracked()[it.tracked].label,
        " tag ", it.tag, " (", it.len, " bytes): h", at_host, " bytes [", bad, ", ", bad_end,
        ") of the range are not the task's (first: 0x", absl::Hex(got[bad], absl::kZeroPad2), ")");
  }

  std::string Safe(std::string m) {
    cls_ = FailureClass::kSafety;
    return m;
  }
  std::string Live(std::string m) {
    cls_ = FailureClass::kLiveness;
    return m;
  }
  // A lost wake-up fails a run that kept every other contract (liveness: the
  // work waited for an unrelated wake); beside another failure it is named
  // as a lead.
  std::string WithWakeProbes(std::string m) {
    const WakeProbes& p = w_->wake_probes();
    if (p.lost == 0) return m;
    if (m.empty()) return Live(absl::StrCat(p.first, " (", p.lost, " of ", p.probes, " probes)"));
    return absl::StrCat(m, " (and ", p.first, ")");
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
    CollectReport(*w_, plan_, o_.trace_record_max, r_);
    if (random_) r_->probes["world.remote_waits"] = r_->remote_waits;
    r_->probes["world.open_retries"] = r_->open_retries;
    r_->wake_probes = w_->wake_probes().probes;
    r_->lost_wakeups = w_->wake_probes().lost;
  }

  uint64_t seed_;
  const SwarmOptions& o_;
  const SwarmPlan& plan_;
  const WorldShape shape_;
  const BufLayout layout_;
  const bool random_;
  SwarmReport* r_;
  sim::Prng wl_;  // the random profile's workload draws
  std::unique_ptr<TwoEngines> w_;
  std::vector<Item> items_;
  // Remote ranges a WRITE left not COMPLETED (or died with its process):
  // their bytes are undefined while its packets can still land (the
  // contract's remote caveat), so the random workload does not reuse one
  // until the fabric says no WRITE can land there (RemoteQuiet).
  struct Taint {
    uint32_t peer = 0;
    uint64_t off = 0, len = 0;
  };
  std::vector<Taint> taints_;
  std::vector<std::vector<int32_t>> slots_;            // per host: item index or -1
  std::vector<std::map<uint32_t, PeerSegment>> segs_;  // per host, by peer
  std::vector<std::vector<uint32_t>> peers_;           // per host: first-wave peers
  uint64_t round_ = 0;
  uint64_t next_tag_ = 1;
  std::string failure_;  // set by a round (runs inside the scheduler)
  FailureClass cls_ = FailureClass::kNone;
};

}  // namespace

SwarmReport RunSwarm(uint64_t seed, const SwarmOptions& options) {
  SwarmReport r;
  r.seed = seed;
  const SwarmPlan plan = DrawSwarmPlan(seed, options.families, options.profile);
  r.plan_text = plan.ToString();
  r.shape = plan.shape;
  r.stall_drawn = plan.stall.AnyEnabled();
  Run run(seed, options, plan, &r);
  run.Go();
  return r;
}

}  // namespace ferry::simworld
