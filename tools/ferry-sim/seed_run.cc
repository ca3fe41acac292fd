// tools/ferry-sim/seed_run.cc: one seed's run and verdict, in this process
// or in forked children (ForkPool), and the replay command (sim_tool.h).
//
// Crash attribution: each child runs one seed; a FERRY_CHECK failure or a
// signal kills only that child, and the parent records the seed as a crash
// with the child's last output lines. The child writes its result to its
// stderr pipe after a marker line; what precedes the marker is whatever the
// child printed.
#include <errno.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/check.h"
#include "base/string_view.h"
#include "tools/ferry-sim/sim_tool.h"

namespace ferry::tools {

using base::AV;
using simworld::FailureClass;
using simworld::SwarmReport;

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

std::optional<Verdict> ParseVerdict(std::string_view name) {
  for (Verdict v : {Verdict::kOk, Verdict::kSafety, Verdict::kLiveness, Verdict::kCrash,
                    Verdict::kNondeterminism})
    if (VerdictName(v) == name) return v;
  return std::nullopt;
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

simworld::SwarmOptions OptionsOf(const Args& a) {
  simworld::SwarmOptions o;
  o.profile = a.profile;
  o.families = a.families;
  o.mutations = a.mutations;
  o.round_ns = a.round_ns;
  o.terminal_ns = a.terminal_ns;
  o.steps_max = a.steps_max;
  return o;
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
  if (a.terminal_ns != Args{}.terminal_ns) absl::StrAppend(&cmd, " --terminal-ns ", a.terminal_ns);
  if (a.steps_max != Args{}.steps_max) absl::StrAppend(&cmd, " --steps-max ", a.steps_max);
  if (a.mode == Mode::kDeterminism) absl::StrAppend(&cmd, " --mode determinism");
  absl::StrAppend(&cmd, " --trace");
  return cmd;
}

SeedResult RunSeed(uint64_t seed, const Args& a, size_t trace_record_max) {
  const auto start = std::chrono::steady_clock::now();
  simworld::SwarmOptions o = OptionsOf(a);
  o.trace_record_max = trace_record_max;
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
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

namespace {

constexpr size_t kCrashTextMax = 2000;

bool ParseU64(std::string_view s, uint64_t* out) {
  return absl::SimpleAtoi(absl::string_view(s.data(), s.size()), out);
}

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
  PutField(
      &out, "shape",
      absl::StrCat(r.report.shape.hosts, " ", r.report.shape.nics, " ", r.report.shape.workers));
  PutField(&out, "wall_us", absl::StrCat(static_cast<uint64_t>(r.wall_s * 1e6)));
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
  std::vector<absl::string_view> shape = absl::StrSplit(fields["shape"], ' ', absl::SkipEmpty());
  if (shape.size() == 3) {
    (void)absl::SimpleAtoi(shape[0], &r->report.shape.hosts);
    (void)absl::SimpleAtoi(shape[1], &r->report.shape.nics);
    (void)absl::SimpleAtoi(shape[2], &r->report.shape.workers);
  }
  uint64_t wall_us = 0;
  (void)ParseU64(fields["wall_us"], &wall_us);
  r->wall_s = static_cast<double>(wall_us) / 1e6;
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

}  // namespace

// ------------------------------------------------------------ ForkPool

struct ForkPool::Child {
  uint64_t seed = 0;
  pid_t pid = -1;
  int fd = -1;
  std::string text;
  bool eof = false;
  std::optional<SeedResult> failed_start;  // fork or pipe failed
};

ForkPool::ForkPool(const Args& a) : a_(a) {}

ForkPool::~ForkPool() {
  while (Next().has_value()) {
  }
}

void ForkPool::Start(uint64_t seed) {
  FERRY_CHECK_GE(a_.jobs, 1u);
  while (children_.size() >= a_.jobs) PumpOnce();
  children_.push_back(std::make_unique<Child>());
  Child* c = children_.back().get();
  c->seed = seed;
  int fds[2];
  // A pipe or fork that fails makes the seed a crash result (with errno).
  auto failed = [&](std::string_view what) {
    SeedResult r;
    r.report.seed = seed;
    r.verdict = Verdict::kCrash;
    r.message = absl::StrCat(AV(what), ": ", std::strerror(errno));
    c->failed_start = std::move(r);
    c->eof = true;
  };
  if (pipe(fds) != 0) {
    failed("pipe");
    return;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    failed("fork");
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    dup2(fds[1], STDOUT_FILENO);
    close(fds[1]);
    const SeedResult child = RunSeed(seed, a_, 0);
    std::fflush(stdout);
    std::fflush(stderr);
    const std::string out = absl::StrCat(AV(kMarker), Serialize(child));
    _exit(WriteAll(STDERR_FILENO, out) ? 0 : 70);
  }
  close(fds[1]);
  c->pid = pid;
  c->fd = fds[0];
}

// Reads what any running child wrote (blocks until one has output or ends).
void ForkPool::PumpOnce() {
  std::vector<pollfd> pfds;
  std::vector<Child*> who;
  for (const std::unique_ptr<Child>& c : children_) {
    if (c->eof) continue;
    pfds.push_back(pollfd{c->fd, POLLIN, 0});
    who.push_back(c.get());
  }
  if (pfds.empty()) return;
  if (poll(pfds.data(), pfds.size(), -1) < 0) return;  // EINTR: the caller pumps again
  char buf[65536];
  for (size_t i = 0; i < pfds.size(); ++i) {
    if (pfds[i].revents == 0) continue;
    Child* c = who[i];
    const ssize_t n = read(c->fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      c->text.append(buf, static_cast<size_t>(n));
      continue;
    }
    c->eof = true;
    close(c->fd);
  }
}

std::optional<SeedResult> ForkPool::Next() {
  if (children_.empty()) return std::nullopt;
  while (!children_.front()->eof) PumpOnce();
  const std::unique_ptr<Child> c = std::move(children_.front());
  children_.erase(children_.begin());
  if (c->failed_start) return std::move(*c->failed_start);
  int status = 0;
  while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR) {
  }
  SeedResult r;
  r.report.seed = c->seed;
  const std::string& text = c->text;
  const size_t mark = text.rfind(kMarker);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && mark != std::string::npos &&
      Deserialize(std::string_view(text).substr(mark + kMarker.size()), c->seed, &r)) {
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
  r.report.plan_text = simworld::DrawSwarmPlan(c->seed, a_.families, a_.profile).ToString();
  r.report.shape = simworld::ShapeOf(a_.profile, c->seed);
  return r;
}

}  // namespace ferry::tools
