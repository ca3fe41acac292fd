// tools/ferry-sim/seed_run.cc: one seed's run and verdict, in this process
// or in forked children (ForkPool), and the replay command (sim_tool.h).
//
// Crash attribution: a child runs one seed at a time; a FERRY_CHECK failure
// or a signal kills only that child, and the parent records its current
// seed as a crash with the child's output since its last result. The child
// writes each result to its stderr pipe after a marker line and the
// result's length; what precedes the marker is whatever the child printed.
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
#include <vector>

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
  o.wake = a.wake;
  o.windows = a.windows;
  o.read_depth = a.read_depth;
  o.cq_spread = a.cq_spread;
  o.notify = a.notify;
  o.wake_probes = a.wake_probes;
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
  if (a.wake != Args{}.wake) absl::StrAppend(&cmd, " --wake ", AV(simworld::WakeModelName(a.wake)));
  if (a.mode == Mode::kDeterminism) absl::StrAppend(&cmd, " --mode determinism");
  absl::StrAppend(&cmd, " --trace");
  if (!a.windows) absl::StrAppend(&cmd, " --windows off");
  if (!a.read_depth) absl::StrAppend(&cmd, " --read-depth off");
  if (!a.cq_spread) absl::StrAppend(&cmd, " --cq-spread off");
  if (a.notify) absl::StrAppend(&cmd, " --notify on");
  if (!a.wake_probes) absl::StrAppend(&cmd, " --wake-probes off");
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
  PutField(&out, "wake", absl::StrCat(r.report.wake_probes, " ", r.report.lost_wakeups));
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
  std::vector<absl::string_view> wake = absl::StrSplit(fields["wake"], ' ', absl::SkipEmpty());
  if (wake.size() == 2) {
    (void)absl::SimpleAtoi(wake[0], &r->report.wake_probes);
    (void)absl::SimpleAtoi(wake[1], &r->report.lost_wakeups);
  }
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
  pid_t pid = -1;
  int in_fd = -1;   // seeds to run, 8 bytes each (the parent writes)
  int out_fd = -1;  // the child's stdout and stderr, results after kMarker
  std::string text;
  std::optional<uint64_t> ticket;  // the seed it runs now
  uint32_t seeds_given = 0;
  bool eof = false;
};

namespace {

// The child's side: runs each seed it reads, writes kMarker, the result's
// length and the result; exits when the parent closes its end.
[[noreturn]] void ChildLoop(const Args& a, int in_fd) {
  for (;;) {
    uint64_t seed = 0;
    size_t got = 0;
    while (got < sizeof(seed)) {
      const ssize_t n = read(in_fd, reinterpret_cast<char*>(&seed) + got, sizeof(seed) - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(0);
      got += static_cast<size_t>(n);
    }
    const SeedResult r = RunSeed(seed, a, 0);
    std::fflush(stdout);
    std::fflush(stderr);
    const std::string body = Serialize(r);
    if (!WriteAll(STDERR_FILENO, absl::StrCat(AV(kMarker), body.size(), "\n", body))) _exit(70);
  }
}

SeedResult CrashResult(const Args& a, uint64_t seed, std::string message) {
  SeedResult r;
  r.report.seed = seed;
  r.verdict = Verdict::kCrash;
  r.message = std::move(message);
  r.report.plan_text = simworld::DrawSwarmPlan(seed, a.families, a.profile).ToString();
  r.report.shape = simworld::ShapeOf(a.profile, seed);
  return r;
}

}  // namespace

ForkPool::ForkPool(const Args& a) : a_(a) {}

ForkPool::~ForkPool() {
  while (Next().has_value()) {
  }
  for (const std::unique_ptr<Child>& c : children_) {
    if (c->in_fd >= 0) close(c->in_fd);  // the child's read sees EOF and it exits
    c->in_fd = -1;
  }
  while (!children_.empty()) PumpOnce();  // reads to EOF and reaps each
}

ForkPool::Started* ForkPool::Find(uint64_t ticket) {
  const uint64_t first = next_ticket_ - order_.size();
  if (ticket < first || ticket >= next_ticket_) return nullptr;
  return &order_[ticket - first];
}

ForkPool::Child* ForkPool::IdleChild(bool* failed) {
  *failed = false;
  for (const std::unique_ptr<Child>& c : children_)
    if (!c->eof && !c->ticket && c->seeds_given < kSeedsPerChildMax) return c.get();
  // A child that ran its share: close its input so it exits.
  for (const std::unique_ptr<Child>& c : children_) {
    if (!c->ticket && c->in_fd >= 0 && c->seeds_given >= kSeedsPerChildMax) {
      close(c->in_fd);
      c->in_fd = -1;
    }
  }
  size_t live = 0;
  for (const std::unique_ptr<Child>& c : children_) live += c->in_fd >= 0 ? 1 : 0;
  if (live >= a_.jobs) return nullptr;
  *failed = true;  // until the child runs
  int in[2], out[2];
  if (pipe(in) != 0) return nullptr;
  if (pipe(out) != 0) {
    close(in[0]);
    close(in[1]);
    return nullptr;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
    return nullptr;
  }
  if (pid == 0) {
    // Other children's pipe ends stay with the parent only (else a child
    // would keep a sibling's input open past the parent's close).
    for (const std::unique_ptr<Child>& c : children_) {
      if (c->in_fd >= 0) close(c->in_fd);
      if (c->out_fd >= 0) close(c->out_fd);
    }
    close(in[1]);
    close(out[0]);
    dup2(out[1], STDERR_FILENO);
    dup2(out[1], STDOUT_FILENO);
    close(out[1]);
    ChildLoop(a_, in[0]);
  }
  close(in[0]);
  close(out[1]);
  *failed = false;
  children_.push_back(std::make_unique<Child>());
  Child* c = children_.back().get();
  c->pid = pid;
  c->in_fd = in[1];
  c->out_fd = out[0];
  return c;
}

void ForkPool::Start(uint64_t seed) {
  FERRY_CHECK_GE(a_.jobs, 1u);
  const uint64_t ticket = next_ticket_++;
  order_.push_back(Started{seed, std::nullopt});
  // Each PumpOnce blocks on a child's output: the loop ends when a child
  // finishes its seed or ends (at most jobs run, so one does).
  Child* c = nullptr;
  bool failed = false;
  while ((c = IdleChild(&failed)) == nullptr && !failed) PumpOnce();
  const uint64_t bytes = seed;
  if (c == nullptr ||
      !WriteAll(c->in_fd, std::string_view(reinterpret_cast<const char*>(&bytes), sizeof(bytes)))) {
    order_.back().result =
        CrashResult(a_, seed, absl::StrCat("could not start a child: ", std::strerror(errno)));
    return;
  }
  c->ticket = ticket;
  ++c->seeds_given;
}

// Moves every complete result in c->text to its seed.
void ForkPool::TakeFrames(Child* c) {
  for (;;) {
    const size_t mark = c->text.find(kMarker);
    if (mark == std::string::npos) return;
    const size_t len_at = mark + kMarker.size();
    const size_t nl = c->text.find('\n', len_at);
    if (nl == std::string::npos) return;
    uint64_t len = 0;
    if (!ParseU64(std::string_view(c->text).substr(len_at, nl - len_at), &len)) return;
    if (c->text.size() < nl + 1 + len) return;
    FERRY_CHECK(c->ticket.has_value());
    Started* st = Find(*c->ticket);
    FERRY_CHECK(st != nullptr);
    SeedResult r;
    if (!Deserialize(std::string_view(c->text).substr(nl + 1, len), st->seed, &r))
      r = CrashResult(a_, st->seed, "unreadable result from the child");
    st->result = std::move(r);
    c->ticket.reset();
    c->text.erase(0, nl + 1 + len);
  }
}

// Waits for an ended child; its current seed (if any) is a crash with its
// last output.
void ForkPool::Reap(Child* c) {
  int status = 0;
  while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (c->in_fd >= 0) close(c->in_fd);
  if (c->ticket) {
    Started* st = Find(*c->ticket);
    FERRY_CHECK(st != nullptr);
    std::string tail = c->text;
    if (tail.size() > kCrashTextMax) tail = "..." + tail.substr(tail.size() - kCrashTextMax);
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
    const std::string how = WIFSIGNALED(status)
                                ? absl::StrCat("killed by signal ", WTERMSIG(status), " (",
                                               strsignal(WTERMSIG(status)), ")")
                                : absl::StrCat("exited with status ", WEXITSTATUS(status));
    st->result = CrashResult(a_, st->seed, absl::StrCat(how, tail.empty() ? "" : ": ", tail));
  }
  std::erase_if(children_, [c](const std::unique_ptr<Child>& p) { return p.get() == c; });
}

// Reads what any child wrote (blocks until one has output or ends) and
// reaps the children that ended.
void ForkPool::PumpOnce() {
  std::vector<pollfd> pfds;
  std::vector<Child*> who;
  for (const std::unique_ptr<Child>& c : children_) {
    if (c->eof) continue;
    pfds.push_back(pollfd{c->out_fd, POLLIN, 0});
    who.push_back(c.get());
  }
  if (!pfds.empty() && poll(pfds.data(), pfds.size(), -1) >= 0) {  // EINTR: pump again
    char buf[65536];
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      Child* c = who[i];
      const ssize_t n = read(c->out_fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        c->text.append(buf, static_cast<size_t>(n));
        TakeFrames(c);
        continue;
      }
      c->eof = true;
      close(c->out_fd);
      c->out_fd = -1;
    }
  }
  std::vector<Child*> ended;
  for (const std::unique_ptr<Child>& c : children_)
    if (c->eof) ended.push_back(c.get());
  for (Child* c : ended) Reap(c);
}

std::optional<SeedResult> ForkPool::Next() {
  if (order_.empty()) return std::nullopt;
  while (!order_.front().result) PumpOnce();
  SeedResult r = std::move(*order_.front().result);
  order_.pop_front();
  return r;
}

}  // namespace ferry::tools
