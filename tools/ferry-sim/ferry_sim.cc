// tools/ferry-sim/ferry_sim.cc: ferry-sim, the seed-sweep runner (docs/design.md
// sections 6 and 9; docs/simulator.md): arguments, the sweep (sharded,
// parallel, time-bounded, JSONL, probe gate), one seed's replay with a
// readable or Perfetto trace, and the summarize and canary entry points.
// Running a seed and the fork transport: seed_run.cc; the tally, summary
// and JSONL: tally.cc; canaries: canaries.cc.
//
// Exit codes (sim_tool.h; the worst class of a sweep wins, in this order):
// 2 safety, 4 crash, 5 nondeterminism, 3 liveness; 0 every seed kept every
// contract; 1 usage; 6 an output file could not be written; 7 probe gate;
// 8 a canary missed.
//
// With --no-fork (and for a single --seed, so a debugger sees the crash)
// seeds run in this process; a signal handler then prints the seed that was
// running and its replay command before exiting with the crash code.
//
// Thread safety: single-threaded. What must stay true: a seed's verdict
// depends only on (seed, profile, families, budgets, mutation, build); the
// wall clock is read only for progress, seeds/s, wall times and the time
// budget.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/mutation.h"
#include "base/string_view.h"
#include "sim/world/trace_format.h"
#include "tools/ferry-sim/sim_tool.h"

namespace ferry::tools {
namespace {

using base::AV;
using simworld::SwarmReport;

constexpr uint64_t kSeedsMax = 100'000'000;

constexpr char kHelp[] = R"(usage: ferry-sim [options]
       ferry-sim summarize FILE.jsonl...

Runs the swarm workload (sim/world/swarm.h) on simulated engines with the
oracle on after every step, one seeded world and fault plan per seed.

  --seeds A..B       sweep seeds A to B inclusive (default 1..100)
  --seed N           run one seed (in this process) and print its plan
  --profile P        random (default): the world is drawn from the seed
                     (2-8 hosts, 1-4 NICs, workers, QPs, limits, workload);
                     fixed: the two-host world of the named regressions
  --mode MODE        swarm (default): judge the contracts;
                     determinism: also run each seed twice and compare
                     trace hashes
  --families LIST    fault families a seed may draw (comma-separated, '-'
                     switches one off): rnic, resource_fail, peer_restart,
                     paused_peer, ctrl, device, stall (random profile),
                     all, none, default (default: all seven; a seed found
                     before the stall family replays with all,-stall)
  --round-ns N       period of the first wave's submit rounds (default
                     1000000; part of the replay key)
  --terminal-ns N    virtual time a wave may take to become terminal
                     (default 5000000000; part of the replay key)
  --steps-max N      scheduler steps of one run phase (default 5000000;
                     part of the replay key)
  --wake MODEL       cqe (default): a worker with WRs outstanding runs once
                     a CQE is there (an owner asleep on its completion
                     channels); spin: at every step (the model before
                     session 11; part of the replay key)
  --wake-probes on|off
                     on (default): a worker asleep is stepped at drawn
                     times (a spurious wake) and must find nothing to do;
                     one that posts a WR or records an event fails the run
                     as a lost wake-up; off:
                     never (replays a seed found before them, session 36;
                     part of the replay key)
  --notify on|off    off (default); on: engines take notifications and every
                     new batch carries one, judged at delivery (N1-N3) and
                     at the end (N5); part of the replay key
  --windows on|off   on (default): the random profile draws whether buffers
                     are revocable (memory windows); off: never (replays a
                     seed found before windows; part of the replay key)
  --read-depth on|off
                     on (default): the random profile draws the READs a QP
                     may have in flight (qp_rd_atomic_max 1, 2 or 16); off:
                     16 (replays a seed found before the simulated RNIC
                     honoured max_rd_atomic; part of the replay key)
  --cq-spread on|off on (default): the random profile draws the CQs per
                     worker (1, 2 or 3) its endpoints spread over; off: 1
                     (replays a seed found before endpoints were spread;
                     part of the replay key)
  --jobs N           seeds run at once in N forked children, each running
                     seeds one after another (default 1)
  --shard I/N        run only the seeds s of the range with (s - A) % N == I
                     (N machines, disjoint and complete)
  --time-budget-s S  start no seed after S seconds; report the seeds done
  --jsonl FILE       one JSON line per seed (seed, world, plan digest,
                     outcome, faults, probes, tasks, times, trace hash)
  --probe-gate       exit 7 when a probe or a seeded fault kind was never
                     hit (needs at least --probe-gate-seeds seeds, default
                     1000)
  --probe-gate-seeds N
  --canaries         test build only: the sweep once per canary switch,
                     each stopped at its first failing seed (default seeds
                     1..200); exit 8 when one is missed
  --trace            with --seed: print the run's events, readable
  --trace-draws      with --trace: show PRNG draws too
  --trace-steps      with --trace: show every scheduler step
  --trace-max N      trace entries kept (default 400000; the last N)
  --perfetto FILE    with --seed: write a Chrome/Perfetto JSON trace to FILE
  --no-fork          sweep in this process (a crash ends the sweep)
  --quiet            no progress line
  --help             this text

`ferry-sim summarize` merges the JSONL files of several (sharded) runs
into one summary table.

Exit codes: 0 ok; 1 usage; 2 safety (oracle: shadow memory, quota, double
publish, slice resolved twice, evidence, latch, stale accept, fabric
violation, wrong bytes, C8 refusals); 3 liveness (a task not terminal after
the faults stopped, a second wave not COMPLETED with faults off, open
failed, a process that never came up, a leak at shutdown); 4 crash
(FERRY_CHECK failure or a signal); 5 nondeterminism (--mode determinism:
two runs of one seed gave different trace hashes); 6 an output file could
not be written; 7 the probe gate failed; 8 a canary was missed. A sweep
exits with the worst class seen: safety, crash, nondeterminism, liveness.
A test build (ferry-sim-mut) reads FERRY_MUTATION=<name>[,<name>...]
(base/mutation.h).
)";

bool ParseU64(std::string_view s, uint64_t* out) {
  return absl::SimpleAtoi(absl::string_view(s.data(), s.size()), out);
}

std::optional<base::Mutations> MutationsFromEnv(std::string* name, std::string* err) {
  base::Mutations m;
  const char* env = std::getenv("FERRY_MUTATION");
  if (env == nullptr || *env == '\0') return m;
  *name = env;
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  // A comma-separated list: a failure with two causes needs both switches.
  std::string names;
  for (absl::string_view want : absl::StrSplit(env, ',')) {
    bool found = false;
    for (uint32_t i = 0; i < static_cast<uint32_t>(base::Mutation::kCount) && !found; ++i) {
      const auto mu = static_cast<base::Mutation>(i);
      const std::string_view n = base::MutationName(mu);
      // The full name, or the name without its "engine_" / "sim_" prefix.
      const size_t us = n.find('_');
      if (AV(n) == want || (us != std::string_view::npos && AV(n.substr(us + 1)) == want)) {
        m.Enable(mu);
        absl::StrAppend(&names, names.empty() ? "" : ",", AV(n));
        found = true;
      }
    }
    if (!found) {
      *err =
          absl::StrCat("FERRY_MUTATION=", env, ": no such mutation ", want, " (base/mutation.h)");
      return std::nullopt;
    }
  }
  *name = names;
  return m;
#else
  *err = absl::StrCat("FERRY_MUTATION=", env,
                      ": this binary has no mutation switches (use the test build ferry-sim-mut)");
  return std::nullopt;
#endif
}

// Returns an error text, or "" with `a` filled.
std::string ParseArgs(int argc, char** argv, Args* a, bool* help) {
  bool seeds_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    auto value = [&](std::string_view* v) -> bool {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    std::string_view v;
    if (arg == "--help" || arg == "-h") {
      *help = true;
      return "";
    } else if (arg == "--seeds") {
      if (!value(&v)) return "--seeds needs A..B";
      const size_t dots = v.find("..");
      if (dots == std::string_view::npos || !ParseU64(v.substr(0, dots), &a->first) ||
          !ParseU64(v.substr(dots + 2), &a->last) || a->first > a->last)
        return absl::StrCat("--seeds ", AV(v), ": want A..B with A <= B");
      if (a->last - a->first >= kSeedsMax) return absl::StrCat("--seeds: at most ", kSeedsMax);
      seeds_given = true;
    } else if (arg == "--seed") {
      if (!value(&v) || !ParseU64(v, &a->first)) return "--seed needs a number";
      a->last = a->first;
      a->single = true;
    } else if (arg == "--mode") {
      if (!value(&v)) return "--mode needs swarm or determinism";
      if (v == "swarm") {
        a->mode = Mode::kSwarm;
      } else if (v == "determinism") {
        a->mode = Mode::kDeterminism;
      } else {
        return absl::StrCat("--mode ", AV(v), ": want swarm or determinism");
      }
    } else if (arg == "--families") {
      if (!value(&v)) return "--families needs a list";
      auto f = simworld::SwarmFamilies::Parse(v);
      if (!f.ok()) return std::string(f.status().message());
      a->families = *f;
    } else if (arg == "--profile") {
      if (!value(&v)) return "--profile needs fixed or random";
      auto p = simworld::ParseWorldProfile(v);
      if (!p.ok()) return std::string(p.status().message());
      a->profile = *p;
    } else if (arg == "--trace") {
      a->trace = true;
    } else if (arg == "--trace-draws") {
      a->trace_draws = true;
    } else if (arg == "--trace-steps") {
      a->trace_steps = true;
    } else if (arg == "--trace-max") {
      uint64_t n = 0;
      if (!value(&v) || !ParseU64(v, &n) || n == 0 || n > 50'000'000)
        return "--trace-max needs a number in [1, 50000000]";
      a->trace_max = n;
    } else if (arg == "--perfetto") {
      if (!value(&v) || v.empty()) return "--perfetto needs a file name";
      a->perfetto = std::string(v);
    } else if (arg == "--round-ns") {
      if (!value(&v) || !ParseU64(v, &a->round_ns) || a->round_ns < 1000 ||
          a->round_ns > 1'000'000'000)
        return "--round-ns needs a number in [1000, 1000000000]";
    } else if (arg == "--terminal-ns") {
      if (!value(&v) || !ParseU64(v, &a->terminal_ns) || a->terminal_ns < 1'000'000)
        return "--terminal-ns needs a number >= 1000000";
    } else if (arg == "--steps-max") {
      if (!value(&v) || !ParseU64(v, &a->steps_max) || a->steps_max < 1000)
        return "--steps-max needs a number >= 1000";
    } else if (arg == "--wake") {
      if (!value(&v) || (v != "cqe" && v != "spin")) return "--wake needs cqe or spin";
      a->wake = v == "cqe" ? simworld::WakeModel::kCqe : simworld::WakeModel::kSpin;
    } else if (arg == "--notify") {
      if (!value(&v) || (v != "on" && v != "off")) return "--notify needs on or off";
      a->notify = v == "on";
    } else if (arg == "--wake-probes") {
      if (!value(&v) || (v != "on" && v != "off")) return "--wake-probes needs on or off";
      a->wake_probes = v == "on";
    } else if (arg == "--read-depth") {
      if (!value(&v) || (v != "on" && v != "off")) return "--read-depth needs on or off";
      a->read_depth = v == "on";
    } else if (arg == "--cq-spread") {
      if (!value(&v) || (v != "on" && v != "off")) return "--cq-spread needs on or off";
      a->cq_spread = v == "on";
    } else if (arg == "--windows") {
      if (!value(&v) || (v != "on" && v != "off")) return "--windows needs on or off";
      a->windows = v == "on";
    } else if (arg == "--jobs") {
      uint64_t n = 0;
      if (!value(&v) || !ParseU64(v, &n) || n == 0 || n > kJobsMax)
        return absl::StrCat("--jobs needs a number in [1, ", kJobsMax, "]");
      a->jobs = static_cast<uint32_t>(n);
    } else if (arg == "--shard") {
      if (!value(&v)) return "--shard needs I/N";
      const size_t slash = v.find('/');
      uint64_t i = 0, n = 0;
      if (slash == std::string_view::npos || !ParseU64(v.substr(0, slash), &i) ||
          !ParseU64(v.substr(slash + 1), &n) || n == 0 || n > 1'000'000 || i >= n)
        return absl::StrCat("--shard ", AV(v), ": want I/N with 0 <= I < N");
      a->shard_index = static_cast<uint32_t>(i);
      a->shard_count = static_cast<uint32_t>(n);
    } else if (arg == "--time-budget-s") {
      if (!value(&v) || !ParseU64(v, &a->time_budget_s) || a->time_budget_s == 0)
        return "--time-budget-s needs a number of seconds > 0";
    } else if (arg == "--jsonl") {
      if (!value(&v) || v.empty()) return "--jsonl needs a file name";
      a->jsonl = std::string(v);
    } else if (arg == "--probe-gate") {
      a->probe_gate = true;
    } else if (arg == "--probe-gate-seeds") {
      if (!value(&v) || !ParseU64(v, &a->probe_gate_seeds_min))
        return "--probe-gate-seeds needs a number";
    } else if (arg == "--canaries") {
      a->canaries = true;
    } else if (arg == "--no-fork") {
      a->fork = false;
    } else if (arg == "--quiet") {
      a->quiet = true;
    } else {
      return absl::StrCat("unknown argument '", AV(arg), "' (see --help)");
    }
  }
  if (a->single && seeds_given) return "--seed and --seeds exclude each other";
  if (a->canaries && !seeds_given) {
    a->first = 1;
    a->last = 200;
  }
  if (a->canaries && (a->single || a->probe_gate || !a->jsonl.empty() || a->shard_count != 1))
    return "--canaries runs its own sweeps: no --seed, --probe-gate, --jsonl or --shard";
  if (!a->fork && a->jobs != 1) return "--no-fork runs one seed at a time: no --jobs";
  if ((a->trace || !a->perfetto.empty() || a->trace_draws || a->trace_steps) && !a->single)
    return "--trace and --perfetto replay one seed: use --seed N";
  std::string err;
  auto m = MutationsFromEnv(&a->mutation_name, &err);
  if (!m) return err;
  a->mutations = *m;
  return "";
}

// ------------------------------------------------------------ in-process crash note
// The one mutable global of the tool: the text a signal handler writes when
// a seed run in this process crashes (a handler can only reach globals).
char g_crash_note[512];

extern "C" void OnCrashSignal(int sig) {
  const char head[] = "\nferry-sim: crash: signal ";
  (void)!write(STDERR_FILENO, head, sizeof(head) - 1);
  char num[8];
  int n = 0;
  for (int s = sig; n < 7 && (n == 0 || s > 0); s /= 10) num[n++] = static_cast<char>('0' + s % 10);
  for (int i = n - 1; i >= 0; --i) (void)!write(STDERR_FILENO, &num[i], 1);
  (void)!write(STDERR_FILENO, g_crash_note, strnlen(g_crash_note, sizeof(g_crash_note)));
  _exit(kExitCrash);
}

void InstallCrashHandlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnCrashSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) sigaction(sig, &sa, nullptr);
}

void NoteRunning(const char* argv0, const Args& a, uint64_t seed) {
  const std::string note = absl::StrCat(" while running seed ", seed,
                                        "\n  replay: ", ReplayCommand(argv0, a, seed), "\n");
  const size_t n = std::min(note.size(), sizeof(g_crash_note) - 1);
  std::memcpy(g_crash_note, note.data(), n);
  g_crash_note[n] = '\0';
}

// ------------------------------------------------------------ sweep

bool InShard(const Args& a, uint64_t seed) {
  return (seed - a.first) % a.shard_count == a.shard_index;
}

int Sweep(const char* argv0, const Args& a) {
  const bool tty = isatty(STDERR_FILENO) == 1;
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  uint64_t total = 0;
  for (uint64_t s = a.first; s <= a.last && s >= a.first; ++s) {
    if (InShard(a, s)) ++total;
    if (s == a.last) break;
  }
  std::ofstream jsonl;
  if (!a.jsonl.empty()) {
    jsonl.open(a.jsonl, std::ios::out | std::ios::trunc);
    if (!jsonl) {
      std::fprintf(stderr, "ferry-sim: cannot write %s: %s\n", a.jsonl.c_str(),
                   std::strerror(errno));
      return kExitIo;
    }
  }
  Tally t;
  t.stall_gated = a.profile == simworld::WorldProfile::kRandom && a.families.stall;
  bool budget_hit = false;
  auto elapsed_s = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto take = [&](SeedResult r) {
    if (jsonl.is_open()) jsonl << JsonlLine(a, r) << "\n";
    t.Add(std::move(r));
    const auto now = std::chrono::steady_clock::now();
    const bool last = t.seeds == total;
    if (!a.quiet && (last || now - last_progress > std::chrono::milliseconds(tty ? 200 : 5000))) {
      last_progress = now;
      const double secs = elapsed_s();
      std::fprintf(stderr, "%sferry-sim: %llu/%llu seeds, %llu failures, %.1f seeds/s%s",
                   tty ? "\r" : "", static_cast<unsigned long long>(t.seeds),
                   static_cast<unsigned long long>(total),
                   static_cast<unsigned long long>(t.failures.size()),
                   secs > 0 ? static_cast<double>(t.seeds) / secs : 0.0, tty && !last ? "" : "\n");
    }
  };
  if (!a.fork) {
    InstallCrashHandlers();
    for (uint64_t seed = a.first;; ++seed) {
      if (InShard(a, seed)) {
        if (a.time_budget_s != 0 && elapsed_s() >= static_cast<double>(a.time_budget_s)) {
          budget_hit = true;
          break;
        }
        NoteRunning(argv0, a, seed);
        SeedResult r = RunSeed(seed, a, 0);
        r.report.seed = seed;
        take(std::move(r));
      }
      if (seed == a.last) break;
    }
  } else {
    ForkPool pool(a);
    for (uint64_t seed = a.first;; ++seed) {
      if (InShard(a, seed)) {
        if (a.time_budget_s != 0 && elapsed_s() >= static_cast<double>(a.time_budget_s)) {
          budget_hit = true;
          break;
        }
        if (pool.in_flight() >= a.jobs) take(*pool.Next());
        pool.Start(seed);
      }
      if (seed == a.last) break;
    }
    while (std::optional<SeedResult> r = pool.Next()) take(std::move(*r));
  }
  if (jsonl.is_open()) {
    jsonl.close();
    if (!jsonl) {
      std::fprintf(stderr, "ferry-sim: writing %s failed\n", a.jsonl.c_str());
      return kExitIo;
    }
  }
  PrintSummary(argv0, a, t, elapsed_s());
  if (budget_hit)
    std::printf("time budget: stopped after %llu s with %llu of %llu seeds done (%llu..%llu)\n",
                static_cast<unsigned long long>(a.time_budget_s),
                static_cast<unsigned long long>(t.seeds), static_cast<unsigned long long>(total),
                static_cast<unsigned long long>(t.seeds == 0 ? a.first : t.first_seed),
                static_cast<unsigned long long>(t.seeds == 0 ? a.first : t.last_seed));
  if (a.shard_count != 1)
    std::printf("shard %u/%u of %llu..%llu\n", a.shard_index, a.shard_count,
                static_cast<unsigned long long>(a.first), static_cast<unsigned long long>(a.last));
  int rc = ExitCodeOf(t.worst);
  if (a.probe_gate) {
    const std::string never = t.NeverHit();
    if (t.seeds < a.probe_gate_seeds_min) {
      std::printf("probe gate: FAILED: %llu seeds run, the gate needs at least %llu\n",
                  static_cast<unsigned long long>(t.seeds),
                  static_cast<unsigned long long>(a.probe_gate_seeds_min));
      if (rc == kExitOk) rc = kExitProbeGate;
    } else if (!never.empty()) {
      std::printf("probe gate: FAILED: never hit: %s\n", never.c_str());
      if (rc == kExitOk) rc = kExitProbeGate;
    } else {
      std::printf("probe gate: every probe and seeded fault kind was hit\n");
    }
  }
  return rc;
}

int Single(const char* argv0, const Args& a) {
  InstallCrashHandlers();
  NoteRunning(argv0, a, a.first);
  std::printf("%s", simworld::DrawSwarmPlan(a.first, a.families, a.profile).ToString().c_str());
  if (!a.mutation_name.empty()) std::printf("mutation: %s\n", a.mutation_name.c_str());
  std::fflush(stdout);
  const bool record = a.trace || !a.perfetto.empty();
  SeedResult r = RunSeed(a.first, a, record ? a.trace_max : 0);
  if (a.trace) {
    simworld::TraceFormat f;
    f.draws = a.trace_draws;
    f.steps = a.trace_steps;
    std::printf("%s", simworld::FormatTrace(r.report, f).c_str());
  }
  int io = kExitOk;
  if (!a.perfetto.empty()) {
    const std::string json = simworld::PerfettoJson(r.report);
    FILE* f = std::fopen(a.perfetto.c_str(), "w");
    if (f == nullptr || std::fwrite(json.data(), 1, json.size(), f) != json.size() ||
        std::fclose(f) != 0) {
      std::fprintf(stderr, "ferry-sim: cannot write %s: %s\n", a.perfetto.c_str(),
                   std::strerror(errno));
      io = kExitIo;
    } else {
      std::printf("perfetto trace: %s (%zu bytes; open in ui.perfetto.dev)\n", a.perfetto.c_str(),
                  json.size());
    }
  }
  Tally t;
  r.report.seed = a.first;
  SwarmReport copy = r.report;
  const uint64_t hash = copy.trace_hash, entries = copy.trace_entries, end_ns = copy.end_ns;
  t.Add(std::move(r));
  std::printf("seed %llu: %s; trace hash 0x%016llx (%llu entries, virtual time %llu ns)\n",
              static_cast<unsigned long long>(a.first), std::string(VerdictName(t.worst)).c_str(),
              static_cast<unsigned long long>(hash), static_cast<unsigned long long>(entries),
              static_cast<unsigned long long>(end_ns));
  PrintSummary(argv0, a, t, 0);
  if (t.worst == Verdict::kOk && io != kExitOk) return io;
  return ExitCodeOf(t.worst);
}

int Main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "summarize") {
    if (argc < 3) {
      std::fprintf(stderr, "ferry-sim: summarize needs one or more JSONL files\n");
      return kExitUsage;
    }
    return Summarize(argv[0], std::vector<std::string>(argv + 2, argv + argc));
  }
  Args a;
  bool help = false;
  const std::string err = ParseArgs(argc, argv, &a, &help);
  if (help) {
    std::printf("%s", kHelp);
    return kExitOk;
  }
  if (!err.empty()) {
    std::fprintf(stderr, "ferry-sim: %s\n", err.c_str());
    return kExitUsage;
  }
  if (a.canaries) return Canaries(argv[0], a);
  return a.single ? Single(argv[0], a) : Sweep(argv[0], a);
}

}  // namespace
}  // namespace ferry::tools

int main(int argc, char** argv) { return ferry::tools::Main(argc, argv); }
