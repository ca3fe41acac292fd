// bench/engine_overhead/engine_overhead_bench.cc: what the engine costs per
// slice (issue 4 "Must show"): slices/s through the engine versus WRs/s of a
// raw HAL post/poll loop, on the same zero-latency simulated RNIC (no link
// latency, no jitter, ~1 ns serialization), same QP count, WR depth and
// slice size, measured in one run and printed as a ratio (goal >= 0.8;
// < 0.5 is a defect).
//
// Raw: 2 connected RC QPs, each kept kDepth WRITE WRs deep; every round
// posts what is free, settles the fabric and polls the CQ in batches of 64.
// Engine: two engines (h0 initiator, h1 target) with 1 worker; the segment
// is opened and the endpoint brought up under the scheduler first, then the
// measured loop is the engine's own: keep kBatches batches of kTasks
// requests of kSlicesPerTask slices submitted, step the owner worker, settle
// the fabric, check batch status. Both loops run on one thread; the
// difference is the engine (submit, validation, slicing, slot table, quota,
// CQE dispatch, task publish, status query).
//
// What must stay true: both sides move the same bytes per unit (one slice
// == one WR of kSliceBytes), every unit is counted only after its
// completion (CQE / COMPLETED task), and a failure aborts the benchmark.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/quantile.h"
#include "bench/raw_rc.h"
#include "bench/zero_latency.h"
#include "benchmark/benchmark.h"
#include "engine/inspect.h"
#include "hal/types.h"
#include "hal/verbs.h"
#include "sim/entropy.h"
#include "sim/net/sim_network.h"
#include "sim/prng.h"
#include "sim/rnic/fabric.h"
#include "sim/scheduler.h"
#include "sim/virtual_clock.h"
#include "sim/world/engine_runtime.h"

namespace ferry::bench {
namespace {

constexpr uint32_t kQps = 2;
constexpr uint32_t kDepth = 64;
constexpr uint64_t kSliceBytes = 4096;
constexpr uint32_t kSlicesPerTask = 16;
constexpr uint32_t kTasks = 8;    // per batch
constexpr uint32_t kBatches = 4;  // in flight
// Both loops move bytes within the same buffer footprint (the raw loop's:
// one slice per WR slot), so neither pays cache misses the other does not.
constexpr uint64_t kFootprintBytes = uint64_t{kQps} * kDepth * kSliceBytes;
static_assert(uint64_t{kSlicesPerTask} * kSliceBytes <= kFootprintBytes);
static_assert(kFootprintBytes % (uint64_t{kSlicesPerTask} * kSliceBytes) == 0);
constexpr uint32_t kAccess =
    hal::kAccessLocalWrite | hal::kAccessRemoteWrite | hal::kAccessRemoteRead;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "engine_overhead: %s\n", what.c_str());
  std::abort();
}

// ------------------------------------------------------------------ raw
struct RawBed {
  sim::VirtualClock clock;
  std::unique_ptr<sim::Fabric> fabric;
  std::unique_ptr<hal::Verbs> v[2];
  hal::CqHandle cq;
  std::vector<uint8_t> buf[2];
  hal::MrInfo mr[2];
  hal::QpHandle qps[kQps];
  uint32_t outstanding[kQps] = {};

  RawBed() {
    fabric = std::make_unique<sim::Fabric>(ZeroLatencyFabric(), sim::Prng(1), &clock);
    hal::ContextHandle ctx[2];
    hal::PdHandle pd[2];
    hal::CqHandle cqs[2];
    for (int s = 0; s < 2; ++s) {
      v[s] = fabric->NewVerbs(s);
      ctx[s] = *v[s]->OpenDevice("sim0");
      pd[s] = *v[s]->AllocPd(ctx[s]);
      cqs[s] = v[s]->CreateCq(ctx[s], 4096, {})->cq;
      buf[s].assign(kFootprintBytes, 1);
      mr[s] = *v[s]->RegMr(pd[s], buf[s].data(), buf[s].size(), kAccess);
    }
    cq = cqs[0];
    const RcSide side[2] = {{v[0].get(), ctx[0], pd[0], cqs[0]},
                            {v[1].get(), ctx[1], pd[1], cqs[1]}};
    for (uint32_t q = 0; q < kQps; ++q) {
      auto pair = ConnectRcPair(side, kDepth, kAccess);
      if (!pair.ok()) Fail(pair.status().ToString());
      qps[q] = (*pair)[0];
    }
  }

  // Fills every QP to kDepth, settles, polls everything. Returns CQEs.
  [[gnu::noinline]] uint64_t Round() {
    hal::SendWr chain[kDepth];
    for (uint32_t q = 0; q < kQps; ++q) {
      const uint32_t n = kDepth - outstanding[q];
      for (uint32_t i = 0; i < n; ++i) {
        const uint64_t off = (uint64_t{q} * kDepth + i) * kSliceBytes;
        hal::SendWr& w = chain[i];
        w = hal::SendWr{};
        w.wr_id = (uint64_t{q} << 32) | i;
        w.opcode = hal::Opcode::kRdmaWrite;
        w.send_flags = hal::kSendSignaled;
        w.num_sge = 1;
        w.sg_list[0] = hal::Sge{reinterpret_cast<uint64_t>(buf[0].data()) + off,
                                static_cast<uint32_t>(kSliceBytes), mr[0].lkey};
        w.remote_addr = reinterpret_cast<uint64_t>(buf[1].data()) + off;
        w.rkey = mr[1].rkey;
      }
      if (n > 0 && !v[0]->PostSend(qps[q], absl::MakeConstSpan(chain, n)).status.ok()) Fail("post");
      outstanding[q] += n;
    }
    fabric->Settle(1'000'000'000);
    uint64_t got = 0;
    hal::WorkCompletion wc[64];
    for (int guard = 0; guard < 1024; ++guard) {
      auto n = v[0]->PollCq(cq, absl::MakeSpan(wc, 64));
      if (!n.ok()) Fail("poll");
      if (*n == 0) break;
      for (uint32_t i = 0; i < *n; ++i) {
        if (wc[i].status != hal::WcStatus::kSuccess) Fail("raw CQE error");
        --outstanding[wc[i].wr_id >> 32];
      }
      got += *n;
    }
    return got;
  }
};

void BM_RawHalPostPoll(benchmark::State& state) {
  RawBed bed;
  uint64_t units = 0;
  for (auto _ : state) units += bed.Round();
  state.counters["slices_per_s"] =
      benchmark::Counter(static_cast<double>(units), benchmark::Counter::kIsRate);
  state.counters["slices"] = static_cast<double>(units);  // exact, for scripts/bench-ir
  state.counters["packets_per_slice"] =
      static_cast<double>(bed.fabric->stats().packets_sent) / static_cast<double>(units);
}

// ------------------------------------------------------------------ engine
struct EngineBed {
  sim::VirtualClock clock;
  sim::Prng root{7};
  sim::Fabric fabric{ZeroLatencyFabric(), root.Fork(), &clock, nullptr};
  sim::SimNetwork net{root.Fork(), &clock, nullptr, sim::NetPlan{}};
  sim::Scheduler sched{root.Fork(), &clock, nullptr};
  struct Host {
    std::unique_ptr<hal::Verbs> verbs;
    std::unique_ptr<sim::SimControlNet> ctl;
    std::unique_ptr<sim::SimEntropy> entropy;
    std::unique_ptr<engine::SteppedEngine> engine;
    std::unique_ptr<simworld::SimRuntime> rt;
    std::vector<uint8_t> buf;
  } hosts[2];
  SegmentHandle seg;
  std::vector<BatchId> inflight;
  uint64_t iteration = 0;

  EngineBed() {
    EngineConfig cfg;
    cfg.devices = {"sim0"};
    cfg.workers = 1;
    cfg.qps_per_endpoint = kQps;
    cfg.wr_depth = kDepth;
    cfg.slice_size_bytes = kSliceBytes;
    cfg.request_bytes_max = uint64_t{kSlicesPerTask} * kSliceBytes;
    sched.AddActor(&fabric);
    sched.AddActor(&net);
    const uint64_t bytes = kFootprintBytes;
    for (uint32_t h = 0; h < 2; ++h) {
      Host& hs = hosts[h];
      hs.buf.assign(bytes, 1);
      hs.ctl = std::move(*net.Bind(h == 0 ? "h0:1000" : "h1:1000"));
      hs.verbs = fabric.NewVerbs(h);
      hs.entropy = std::make_unique<sim::SimEntropy>(root.Fork());
      EngineEnv env{hs.verbs.get(), hs.ctl.get(), &clock, hs.entropy.get()};
      auto e = engine::SteppedEngine::Create(cfg, env, nullptr, nullptr);
      if (!e.ok()) Fail(e.status().ToString());
      hs.engine = std::move(*e);
      hs.rt = std::make_unique<simworld::SimRuntime>(hs.engine.get(), &fabric, hs.ctl.get(),
                                                     nullptr, 1 + 100 * h, root.Fork());
      hs.rt->AddTo(&sched);
      if (!hs.engine->RegisterMemory(hs.buf.data(), hs.buf.size()).ok()) Fail("register");
    }
    sched.MakePlan(sim::PickMode::kUniform);
    engine::SteppedEngine& e = *hosts[0].engine;
    auto tok = e.OpenSegmentAsync("h1:1000");
    std::optional<SegmentHandle> h;
    sched.Run(
        [&] {
          auto p = e.PollOpenSegment(*tok);
          if (!p.ok()) Fail(p.status().ToString());
          h = *p;
          return h.has_value();
        },
        10'000'000, clock.NowNs() + 10'000'000'000);
    if (!h) Fail("open");
    seg = *h;
    // Warm up under the scheduler: the first batch brings the endpoint up.
    BatchId b = Submit(0);
    sched.Run([&] { return e.GetBatchStatus(b)->overall != TaskStatus::kPending; }, 10'000'000,
              clock.NowNs() + 10'000'000'000);
    if (e.GetBatchStatus(b)->overall != TaskStatus::kCompleted) Fail("warm-up batch");
    (void)e.FreeBatch(b);
  }

  BatchId Submit(uint32_t slot) {
    engine::SteppedEngine& e = *hosts[0].engine;
    auto b = e.AllocateBatch(kTasks);
    if (!b.ok()) Fail("alloc");
    Request reqs[kTasks];
    const uint64_t task_bytes = uint64_t{kSlicesPerTask} * kSliceBytes;
    for (uint32_t i = 0; i < kTasks; ++i) {
      const uint64_t off = (uint64_t{slot} * kTasks + i) * task_bytes % kFootprintBytes;
      reqs[i].opcode = OpKind::kWrite;
      reqs[i].local_addr = reinterpret_cast<uint64_t>(hosts[0].buf.data()) + off;
      reqs[i].remote_addr = reinterpret_cast<uint64_t>(hosts[1].buf.data()) + off;
      reqs[i].length_bytes = task_bytes;
      reqs[i].segment = seg;
    }
    SubmitResult r = e.Submit(*b, absl::MakeConstSpan(reqs, kTasks));
    if (!r.status.ok()) Fail(r.status.ToString());
    return *b;
  }

  // One round of the measured loop; returns slices completed.
  [[gnu::noinline]] uint64_t Round() {
    engine::SteppedEngine& e = *hosts[0].engine;
    if (inflight.empty())
      for (uint32_t s = 0; s < kBatches; ++s) inflight.push_back(Submit(s));
    fabric.set_current_actor(1);  // worker 0 of h0 (SimRuntime's actor ids)
    // As a runtime does: step again at once while the wait set says there
    // is postable work (a step polls after it posts, so the slots freed by
    // its poll are posted by the next step).
    for (int k = 0; k < 4; ++k)
      if (!e.StepWorker(0).work_now) break;
    fabric.set_current_actor(0);
    fabric.Settle(1'000'000'000);
    uint64_t done = 0;
    for (uint32_t s = 0; s < kBatches; ++s) {
      auto st = e.GetBatchStatus(inflight[s]);
      if (!st.ok() || st->overall == TaskStatus::kPending) continue;
      if (st->overall != TaskStatus::kCompleted) Fail("batch not COMPLETED");
      done += uint64_t{kTasks} * kSlicesPerTask;
      (void)e.FreeBatch(inflight[s]);
      inflight[s] = Submit(s);
    }
    return done;
  }
};

void BM_EngineSlices(benchmark::State& state) {
  EngineBed bed;
  uint64_t units = 0;
  for (auto _ : state) units += bed.Round();
  state.counters["slices_per_s"] =
      benchmark::Counter(static_cast<double>(units), benchmark::Counter::kIsRate);
  state.counters["slices"] = static_cast<double>(units);  // exact, for scripts/bench-ir
  state.counters["packets_per_slice"] =
      static_cast<double>(bed.fabric.stats().packets_sent) / static_cast<double>(units);
}

BENCHMARK(BM_RawHalPostPoll)->MinTime(0.5);
BENCHMARK(BM_EngineSlices)->MinTime(0.5);

// Console output plus every repetition's rate per side; the ratio is of
// the medians. Repetitions are interleaved by default (main), so a load
// spike from other processes hits both sides alike.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  // Colours only on a terminal (the default reporter's flag does not reach
  // a reporter passed in).
  RatioReporter() : ConsoleReporter(isatty(fileno(stdout)) ? OO_Color : OO_None) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration) continue;  // aggregates are recomputed here
      auto it = r.counters.find("slices_per_s");
      if (it == r.counters.end()) continue;
      const std::string name = r.benchmark_name();
      if (name.find("BM_RawHalPostPoll") == 0) raw.push_back(it->second.value);
      if (name.find("BM_EngineSlices") == 0) eng.push_back(it->second.value);
    }
  }
  std::vector<double> raw, eng;
};

}  // namespace
}  // namespace ferry::bench

int main(int argc, char** argv) {
  // Defaults (flags on the command line override them): 5 interleaved
  // repetitions of each side.
  std::vector<char*> args(argv, argv + argc);
  std::string reps = "--benchmark_repetitions=5";
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  args.insert(args.begin() + 1, {reps.data(), interleave.data()});
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  ferry::bench::RatioReporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  const double raw = ferry::bench::Median(rep.raw);
  const double eng = ferry::bench::Median(rep.eng);
  if (raw > 0 && eng > 0) {
    std::printf(
        "engine/raw slices per second, medians of %zu/%zu interleaved runs: %.0f / %.0f = %.3f "
        "(goal >= 0.8; < 0.5 is a defect)\n",
        rep.eng.size(), rep.raw.size(), eng, raw, eng / raw);
  }
  benchmark::Shutdown();
  return 0;
}
