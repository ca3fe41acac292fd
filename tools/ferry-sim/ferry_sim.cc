// tools/ferry-sim/ferry_sim.cc: ferry-sim, the seed-sweep runner (docs/design.md
// sections 6 and 9): runs the swarm workload of sim/world/swarm.h over a
// range of seeds, prints a progress line, a summary of faults injected and
// probes hit, and for every failure the seed, its class, its message and the
// one command that replays it; replays one seed with a readable trace and a
// Perfetto trace.
//
// Exit codes (docs/simulator.md, "ferry-sim"; the worst class of a sweep
// wins, in this order): 2 safety, 4 crash, 5 nondeterminism, 3 liveness;
// 0 every seed kept every contract; 1 usage; 6 an output file could not be
// written.
//
// Crash attribution: a sweep forks one child per seed (the default): a
// FERRY_CHECK failure or a signal kills only that child, the parent records
// the seed as a crash with the child's last stderr lines and goes on. With
// --no-fork (and for a single --seed, so a debugger sees the crash) seeds
// run in this process; a signal handler then prints the seed that was
// running and its replay command before exiting with the crash code.
//
// Thread safety: single-threaded. What must stay true: a seed's verdict
// depends only on (seed, families, mutation, build); the wall clock is read
// only for the progress line and seeds/s.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/mutation.h"
#include "base/string_view.h"
#include "engine/task.h"
#include "ferry/engine.h"
#include "sim/rnic/fault_plan.h"
#include "sim/world/swarm.h"
#include "sim/world/trace_format.h"

namespace ferry::tools {
namespace {

using simworld::FailureClass;
using simworld::SwarmReport;

constexpr int kExitOk = 0;
constexpr int kExitUsage = 1;
constexpr int kExitSafety = 2;
constexpr int kExitLiveness = 3;
constexpr int kExitCrash = 4;
constexpr int kExitNondeterminism = 5;
constexpr int kExitIo = 6;

constexpr uint64_t kSeedsMax = 100'000'000;
constexpr size_t kCrashTextMax = 2000;

constexpr char kHelp[] = R"(usage: ferry-sim [options]

Runs the swarm workload (sim/world/swarm.h) on two simulated engines with the
oracle on after every step, one seeded fault plan per seed.

  --seeds A..B       sweep seeds A to B inclusive (default 1..100)
  --seed N           run one seed (in this process) and print its plan
  --mode MODE        swarm (default): judge the contracts;
                     determinism: also run each seed twice and compare
                     trace hashes
  --families LIST    fault families a seed may draw (comma-separated, '-'
                     switches one off): rnic, resource_fail, peer_restart,
                     paused_peer, ctrl, device, all, none, default
                     (default: all six)
  --round-ns N       period of the first wave's submit rounds (default
                     1000000; part of the replay key)
  --trace            with --seed: print the run's events, readable
  --trace-draws      with --trace: show PRNG draws too
  --trace-steps      with --trace: show every scheduler step
  --trace-max N      trace entries kept (default 400000; the last N)
  --perfetto FILE    with --seed: write a Chrome/Perfetto JSON trace to FILE
  --no-fork          sweep in this process (a crash ends the sweep)
  --quiet            no progress line
  --help             this text

Exit codes: 0 ok; 1 usage; 2 safety (oracle: shadow memory, quota, double
publish, slice resolved twice, fabric violation, wrong bytes); 3 liveness
(a task not terminal after the faults stopped, open failed, a process that
never came up, a leak at shutdown); 4 crash (FERRY_CHECK failure or a
signal); 5 nondeterminism (--mode determinism: two runs of one seed gave
different trace hashes); 6 an output file could not be written. A sweep
exits with the worst class seen: safety, crash, nondeterminism, liveness.
A test build (ferry-sim-mut) reads FERRY_MUTATION=<name>[,<name>...]
(base/mutation.h).
)";

enum class Mode : uint8_t { kSwarm, kDeterminism };

struct Args {
  uint64_t first = 1, last = 100;
  bool single = false;
  Mode mode = Mode::kSwarm;
  simworld::SwarmFamilies families;
  simworld::WorldProfile profile = simworld::WorldProfile::kRandom;
  bool trace = false, trace_draws = false, trace_steps = false;
  size_t trace_max = 400'000;
  std::string perfetto;
  bool fork = true;
  bool quiet = false;
  uint64_t round_ns = 1'000'000;
  base::Mutations mutations;
  std::string mutation_name;
};

// Verdict of one seed as the sweep sees it (crash and nondeterminism are
// the runner's classes on top of the workload's).
enum class Verdict : uint8_t { kOk, kSafety, kLiveness, kCrash, kNondeterminism };

std::string_view VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kSafety:
      return "safety";
    case Verdict::kLiveness:
      return "liveness";
    case Verdict::kCrash:
      return "crash";
    case Verdict::kNondeterminism:
      return "nondeterminism";
  }
  return "?";
}

int ExitCodeOf(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return kExitOk;
    case Verdict::kSafety:
      return kExitSafety;
    case Verdict::kLiveness:
      return kExitLiveness;
    case Verdict::kCrash:
      return kExitCrash;
    case Verdict::kNondeterminism:
      return kExitNondeterminism;
  }
  return kExitCrash;
}

// Severity for a sweep's exit code: higher wins.
int Severity(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return 0;
    case Verdict::kLiveness:
      return 1;
    case Verdict::kNondeterminism:
      return 2;
    case Verdict::kCrash:
      return 3;
    case Verdict::kSafety:
      return 4;
  }
  return 0;
}

struct SeedResult {
  Verdict verdict = Verdict::kOk;
  std::string message;
  SwarmReport report;  // empty counters after a crash
};

// ------------------------------------------------------------ arguments

using base::AV;

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
    } else if (arg == "--no-fork") {
      a->fork = false;
    } else if (arg == "--quiet") {
      a->quiet = true;
    } else {
      return absl::StrCat("unknown argument '", AV(arg), "' (see --help)");
    }
  }
  if (a->single && seeds_given) return "--seed and --seeds exclude each other";
  if ((a->trace || !a->perfetto.empty() || a->trace_draws || a->trace_steps) && !a->single)
    return "--trace and --perfetto replay one seed: use --seed N";
  std::string err;
  auto m = MutationsFromEnv(&a->mutation_name, &err);
  if (!m) return err;
  a->mutations = *m;
  return "";
}

std::string ReplayCommand(const char* argv0, const Args& a, uint64_t seed) {
  std::string cmd;
  if (!a.mutation_name.empty()) absl::StrAppend(&cmd, "FERRY_MUTATION=", a.mutation_name, " ");
  absl::StrAppend(&cmd, argv0, " --seed ", seed);
  if (a.profile != Args{}.profile)
    absl::StrAppend(&cmd, " --profile ", AV(simworld::WorldProfileName(a.profile)));
  if (!(a.families == simworld::SwarmFamilies{}))
    absl::StrAppend(&cmd, " --families ", a.families.ToString());
  if (a.round_ns != Args{}.round_ns) absl::StrAppend(&cmd, " --round-ns ", a.round_ns);
  if (a.mode == Mode::kDeterminism) absl::StrAppend(&cmd, " --mode determinism");
  absl::StrAppend(&cmd, " --trace");
  return cmd;
}

// ------------------------------------------------------------ one seed

SeedResult RunSeed(uint64_t seed, const Args& a, size_t trace_record_max) {
  simworld::SwarmOptions o;
  o.profile = a.profile;
  o.families = a.families;
  o.mutations = a.mutations;
  o.trace_record_max = trace_record_max;
  o.round_ns = a.round_ns;
  SeedResult r;
  r.report = simworld::RunSwarm(seed, o);
  switch (r.report.failure) {
    case FailureClass::kNone:
      r.verdict = Verdict::kOk;
      break;
    case FailureClass::kSafety:
      r.verdict = Verdict::kSafety;
      break;
    case FailureClass::kLiveness:
      r.verdict = Verdict::kLiveness;
      break;
  }
  r.message = r.report.message;
  if (a.mode == Mode::kDeterminism) {
    o.trace_record_max = 0;
    const SwarmReport again = simworld::RunSwarm(seed, o);
    if (again.trace_hash != r.report.trace_hash || again.failure != r.report.failure) {
      r.verdict = Verdict::kNondeterminism;
      r.message = absl::StrFormat(
          "two runs differ: trace hash 0x%016x (%d entries, %s) then 0x%016x (%d entries, %s)",
          r.report.trace_hash, r.report.trace_entries, simworld::FailureClassName(r.report.failure),
          again.trace_hash, again.trace_entries, simworld::FailureClassName(again.failure));
    }
  }
  return r;
}

// ------------------------------------------------------------ fork transport
// The child writes its result to its stderr pipe after a marker line; what
// precedes the marker is whatever the child printed (a FERRY_CHECK message).
constexpr std::string_view kMarker = "\n@@ferry-sim-result@@\n";

void PutField(std::string* out, std::string_view name, std::string_view value) {
  absl::StrAppend(out, AV(name), " ", value.size(), "\n", AV(value), "\n");
}

std::string Serialize(const SeedResult& r) {
  std::string out;
  PutField(&out, "verdict", absl::StrCat(static_cast<int>(r.verdict)));
  PutField(&out, "message", r.message);
  PutField(&out, "plan", r.report.plan_text);
  std::string faults;
  for (uint64_t f : r.report.faults) absl::StrAppend(&faults, f, " ");
  PutField(&out, "faults", faults);
  std::string status;
  for (uint64_t s : r.report.status) absl::StrAppend(&status, s, " ");
  PutField(&out, "status", status);
  std::string probes;
  for (const auto& [k, v] : r.report.probes) absl::StrAppend(&probes, k, " ", v, " ");
  PutField(&out, "probes", probes);
  PutField(&out, "dead", absl::StrCat(r.report.tasks_dead));
  PutField(&out, "hash", absl::StrCat(r.report.trace_hash));
  PutField(&out, "entries", absl::StrCat(r.report.trace_entries));
  PutField(&out, "end", absl::StrCat(r.report.end_ns));
  return out;
}

bool Deserialize(std::string_view in, uint64_t seed, SeedResult* r) {
  std::map<std::string, std::string> fields;
  size_t pos = 0;
  for (int n = 0; n < 32 && pos < in.size(); ++n) {
    const size_t sp = in.find(' ', pos);
    const size_t nl = in.find('\n', pos);
    if (sp == std::string_view::npos || nl == std::string_view::npos || sp > nl) return false;
    uint64_t len = 0;
    if (!ParseU64(in.substr(sp + 1, nl - sp - 1), &len) || nl + 1 + len + 1 > in.size())
      return false;
    fields[std::string(in.substr(pos, sp - pos))] = std::string(in.substr(nl + 1, len));
    pos = nl + 1 + len + 1;
  }
  uint64_t v = 0;
  if (!ParseU64(fields["verdict"], &v) || v > static_cast<uint64_t>(Verdict::kNondeterminism))
    return false;
  r->verdict = static_cast<Verdict>(v);
  r->message = fields["message"];
  r->report.seed = seed;
  r->report.plan_text = fields["plan"];
  size_t i = 0;
  for (absl::string_view s : absl::StrSplit(fields["faults"], ' ', absl::SkipEmpty()))
    if (i < r->report.faults.size()) (void)absl::SimpleAtoi(s, &r->report.faults[i++]);
  i = 0;
  for (absl::string_view s : absl::StrSplit(fields["status"], ' ', absl::SkipEmpty()))
    if (i < r->report.status.size()) (void)absl::SimpleAtoi(s, &r->report.status[i++]);
  std::vector<absl::string_view> pr = absl::StrSplit(fields["probes"], ' ', absl::SkipEmpty());
  for (size_t k = 0; k + 1 < pr.size(); k += 2)
    (void)absl::SimpleAtoi(pr[k + 1], &r->report.probes[std::string(pr[k])]);
  (void)ParseU64(fields["dead"], &r->report.tasks_dead);
  (void)ParseU64(fields["hash"], &r->report.trace_hash);
  (void)ParseU64(fields["entries"], &r->report.trace_entries);
  (void)ParseU64(fields["end"], &r->report.end_ns);
  return true;
}

bool WriteAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

SeedResult RunSeedForked(uint64_t seed, const Args& a) {
  SeedResult r;
  r.report.seed = seed;
  int fds[2];
  if (pipe(fds) != 0) {
    r.verdict = Verdict::kCrash;
    r.message = absl::StrCat("pipe: ", std::strerror(errno));
    return r;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    r.verdict = Verdict::kCrash;
    r.message = absl::StrCat("fork: ", std::strerror(errno));
    return r;
  }
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    dup2(fds[1], STDOUT_FILENO);
    close(fds[1]);
    const SeedResult child = RunSeed(seed, a, 0);
    std::fflush(stdout);
    std::fflush(stderr);
    const std::string out = absl::StrCat(AV(kMarker), Serialize(child));
    _exit(WriteAll(STDERR_FILENO, out) ? 0 : 70);
  }
  close(fds[1]);
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const size_t mark = text.rfind(kMarker);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && mark != std::string::npos &&
      Deserialize(std::string_view(text).substr(mark + kMarker.size()), seed, &r)) {
    return r;
  }
  r.verdict = Verdict::kCrash;
  std::string tail = text.substr(0, mark == std::string::npos ? text.size() : mark);
  if (tail.size() > kCrashTextMax) tail = "..." + tail.substr(tail.size() - kCrashTextMax);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
  const std::string how = WIFSIGNALED(status)
                              ? absl::StrCat("killed by signal ", WTERMSIG(status), " (",
                                             strsignal(WTERMSIG(status)), ")")
                              : absl::StrCat("exited with status ", WEXITSTATUS(status));
  r.message = absl::StrCat(how, tail.empty() ? "" : ": ", tail);
  r.report.plan_text = simworld::DrawSwarmPlan(seed, a.families, a.profile).ToString();
  return r;
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

// ------------------------------------------------------------ summary

struct Tally {
  uint64_t seeds = 0;
  std::array<uint64_t, 5> verdicts{};
  std::array<uint64_t, sim::kFaultKinds> faults{};
  std::array<uint64_t, sim::kFaultKinds> fault_seeds{};
  std::map<std::string, uint64_t> probes;
  std::map<std::string, uint64_t> probe_seeds;
  std::array<uint64_t, 8> status{};
  uint64_t dead = 0;
  std::vector<SeedResult> failures;
  Verdict worst = Verdict::kOk;

  void Add(SeedResult r) {
    ++seeds;
    ++verdicts[static_cast<size_t>(r.verdict)];
    for (size_t k = 0; k < sim::kFaultKinds; ++k) {
      faults[k] += r.report.faults[k];
      fault_seeds[k] += r.report.faults[k] != 0;
    }
    for (const auto& [k, v] : r.report.probes) {
      probes[k] += v;
      probe_seeds[k] += v != 0;
    }
    for (size_t k = 0; k < status.size(); ++k) status[k] += r.report.status[k];
    dead += r.report.tasks_dead;
    if (Severity(r.verdict) > Severity(worst)) worst = r.verdict;
    if (r.verdict != Verdict::kOk) failures.push_back(std::move(r));
  }
};

void PrintSummary(const char* argv0, const Args& a, const Tally& t, double secs) {
  std::printf("ferry-sim: %llu seeds (%llu..%llu), mode %s, families %s%s%s: %llu ok",
              static_cast<unsigned long long>(t.seeds), static_cast<unsigned long long>(a.first),
              static_cast<unsigned long long>(a.last),
              a.mode == Mode::kSwarm ? "swarm" : "determinism", a.families.ToString().c_str(),
              a.mutation_name.empty() ? "" : ", mutation ", a.mutation_name.c_str(),
              static_cast<unsigned long long>(t.verdicts[0]));
  for (Verdict v :
       {Verdict::kSafety, Verdict::kLiveness, Verdict::kCrash, Verdict::kNondeterminism})
    std::printf(", %llu %s", static_cast<unsigned long long>(t.verdicts[static_cast<size_t>(v)]),
                std::string(VerdictName(v)).c_str());
  std::printf(" in %.1f s (%.1f seeds/s)\n", secs,
              secs > 0 ? static_cast<double>(t.seeds) / secs : 0.0);
  std::printf("faults injected (total, seeds where it fired):\n");
  for (size_t k = 0; k < sim::kSeededFaultKinds; ++k)
    std::printf("  %-18s %10llu  %6llu\n",
                std::string(sim::FaultKindName(static_cast<sim::FaultKind>(k))).c_str(),
                static_cast<unsigned long long>(t.faults[k]),
                static_cast<unsigned long long>(t.fault_seeds[k]));
  std::printf("probes hit (total, seeds where it was hit):\n");
  std::string never;
  for (const auto& [k, v] : t.probes) {
    if (v == 0) {
      absl::StrAppend(&never, never.empty() ? "" : " ", k);
      continue;
    }
    std::printf("  %-28s %10llu  %6llu\n", k.c_str(), static_cast<unsigned long long>(v),
                static_cast<unsigned long long>(t.probe_seeds.at(k)));
  }
  if (!never.empty()) std::printf("  never hit: %s\n", never.c_str());
  std::printf("judged tasks:");
  for (size_t k = 0; k < 6; ++k)
    std::printf(" %s=%llu", std::string(TaskStatusName(static_cast<TaskStatus>(k))).c_str(),
                static_cast<unsigned long long>(t.status[k]));
  std::printf("; died with a restarted process: %llu\n", static_cast<unsigned long long>(t.dead));
  if (!t.failures.empty()) {
    std::printf("failures:\n");
    for (const SeedResult& f : t.failures) {
      std::printf("  seed %llu: %s: %s\n    replay: %s\n",
                  static_cast<unsigned long long>(f.report.seed),
                  std::string(VerdictName(f.verdict)).c_str(), f.message.c_str(),
                  ReplayCommand(argv0, a, f.report.seed).c_str());
    }
  }
  std::printf("exit %d (%s)\n", ExitCodeOf(t.worst), std::string(VerdictName(t.worst)).c_str());
}

int Sweep(const char* argv0, const Args& a) {
  const bool tty = isatty(STDERR_FILENO) == 1;
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  const uint64_t total = a.last - a.first + 1;
  Tally t;
  if (!a.fork) InstallCrashHandlers();
  for (uint64_t seed = a.first;; ++seed) {
    SeedResult r;
    if (a.fork) {
      r = RunSeedForked(seed, a);
    } else {
      NoteRunning(argv0, a, seed);
      r = RunSeed(seed, a, 0);
    }
    r.report.seed = seed;
    t.Add(std::move(r));
    const auto now = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(now - start).count();
    const bool last = seed == a.last;
    if (!a.quiet && (last || now - last_progress > std::chrono::milliseconds(tty ? 200 : 5000))) {
      last_progress = now;
      std::fprintf(stderr, "%sferry-sim: %llu/%llu seeds, %llu failures, %.1f seeds/s%s",
                   tty ? "\r" : "", static_cast<unsigned long long>(t.seeds),
                   static_cast<unsigned long long>(total),
                   static_cast<unsigned long long>(t.failures.size()),
                   secs > 0 ? static_cast<double>(t.seeds) / secs : 0.0, tty && !last ? "" : "\n");
    }
    if (last) break;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PrintSummary(argv0, a, t, secs);
  return ExitCodeOf(t.worst);
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
  return a.single ? Single(argv[0], a) : Sweep(argv[0], a);
}

}  // namespace
}  // namespace ferry::tools

int main(int argc, char** argv) { return ferry::tools::Main(argc, argv); }
