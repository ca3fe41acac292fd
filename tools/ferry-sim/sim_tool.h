// tools/ferry-sim/sim_tool.h: what the parts of ferry-sim share: the
// arguments, a seed's verdict and result, running a seed (in process or in
// a forked child, several children at once), the sweep tally with its
// summary, one JSONL line per seed and the JSONL reader of `ferry-sim
// summarize`.
//
// Thread safety: single-threaded (parallelism is forked children).
// What must stay true: a seed's verdict depends only on (seed, profile,
// families, round_ns, budgets, mutation, build); the wall clock is read for
// progress, seeds/s, wall_ms and --time-budget-s only, never for a verdict.
#ifndef FERRY_TOOLS_FERRY_SIM_SIM_TOOL_H_
#define FERRY_TOOLS_FERRY_SIM_SIM_TOOL_H_

#include <array>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutation.h"
#include "sim/rnic/fault_plan.h"
#include "sim/world/swarm.h"

namespace ferry::tools {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 1;
inline constexpr int kExitSafety = 2;
inline constexpr int kExitLiveness = 3;
inline constexpr int kExitCrash = 4;
inline constexpr int kExitNondeterminism = 5;
inline constexpr int kExitIo = 6;
inline constexpr int kExitProbeGate = 7;
inline constexpr int kExitCanaryMissed = 8;

inline constexpr uint32_t kJobsMax = 64;

enum class Mode : uint8_t { kSwarm, kDeterminism };

struct Args {
  uint64_t first = 1, last = 100;
  bool single = false;
  Mode mode = Mode::kSwarm;
  simworld::WorldProfile profile = simworld::WorldProfile::kRandom;
  simworld::SwarmFamilies families;
  bool trace = false, trace_draws = false, trace_steps = false;
  size_t trace_max = 400'000;
  std::string perfetto;
  bool fork = true;
  bool quiet = false;
  uint64_t round_ns = 1'000'000;
  uint64_t terminal_ns = simworld::SwarmOptions{}.terminal_ns;
  uint64_t steps_max = simworld::SwarmOptions{}.steps_max;
  // Owners sleep until a CQE (the library's SwarmOptions keeps kSpin for
  // the named regressions; --wake spin replays a seed found before kCqe).
  simworld::WakeModel wake = simworld::WakeModel::kCqe;
  // --windows off: buffers never revocable (replays a seed found before
  // memory windows).
  bool windows = true;
  // --read-depth off: qp_rd_atomic_max 16 in every world (replays a seed
  // found before the simulated RNIC honoured max_rd_atomic).
  bool read_depth = true;
  // --cq-spread off: cqs_per_worker 1 in every world (replays a seed found
  // before endpoints were spread over an owner's CQs).
  bool cq_spread = true;
  // --notify on: every new batch carries a notification (SwarmOptions::notify).
  bool notify = false;
  // --wake-probes off: no probe wakes (replays a seed found before them;
  // SwarmOptions::wake_probes).
  bool wake_probes = true;
  uint32_t jobs = 1;
  uint32_t shard_index = 0, shard_count = 1;
  uint64_t time_budget_s = 0;  // 0: none
  std::string jsonl;
  bool probe_gate = false;
  uint64_t probe_gate_seeds_min = 1000;
  bool canaries = false;
  base::Mutations mutations;
  std::string mutation_name;
};

// Verdict of one seed as the sweep sees it (crash and nondeterminism are
// the runner's classes on top of the workload's).
enum class Verdict : uint8_t { kOk, kSafety, kLiveness, kCrash, kNondeterminism };
std::string_view VerdictName(Verdict v);
std::optional<Verdict> ParseVerdict(std::string_view name);
int ExitCodeOf(Verdict v);
int Severity(Verdict v);  // higher wins a sweep's exit code

struct SeedResult {
  Verdict verdict = Verdict::kOk;
  std::string message;
  simworld::SwarmReport report;  // empty counters after a crash
  double wall_s = 0;
};

simworld::SwarmOptions OptionsOf(const Args& a);
// Runs one seed in this process.
SeedResult RunSeed(uint64_t seed, const Args& a, size_t trace_record_max);
// The command that replays `seed` with the sweep's settings.
std::string ReplayCommand(const char* argv0, const Args& a, uint64_t seed);

// Runs seeds in forked children, at most `jobs` at once; results come back
// in the order the seeds were started. A child runs one seed at a time and
// then the next it is given (a fresh child per seed paid ~12 % of a sweep
// in page faults of its new address space); a seed's run does not depend
// on the seeds before it in the process (docs/design.md section 7, tested),
// and a child that crashes takes only its current seed with it. A child is
// replaced after kSeedsPerChildMax seeds.
class ForkPool {
 public:
  static constexpr uint32_t kSeedsPerChildMax = 256;
  explicit ForkPool(const Args& a);
  ~ForkPool();
  ForkPool(const ForkPool&) = delete;
  ForkPool& operator=(const ForkPool&) = delete;
  // Hands `seed` to an idle child (waits for one first; forks one while
  // fewer than `jobs` run). A failed fork or pipe makes the seed a crash
  // result.
  void Start(uint64_t seed);
  // The oldest started seed's result once it is ready (blocks), or nullopt
  // when nothing is running or waiting.
  std::optional<SeedResult> Next();
  size_t in_flight() const { return order_.size(); }

 private:
  struct Child;
  struct Started {
    uint64_t seed = 0;
    std::optional<SeedResult> result;
  };
  // An idle child with seeds left, or a new one while fewer than `jobs`
  // live; nullptr when all are busy (*failed: a pipe or fork failed).
  Child* IdleChild(bool* failed);
  void PumpOnce();
  void TakeFrames(Child* c);
  void Reap(Child* c);
  Started* Find(uint64_t ticket);
  const Args& a_;
  std::vector<std::unique_ptr<Child>> children_;
  std::deque<Started> order_;  // start order
  uint64_t next_ticket_ = 0;   // ticket of order_.front() + order_.size()
};

// A sweep's counters and the summary table.
struct Tally {
  uint64_t seeds = 0;
  uint64_t first_seed = UINT64_MAX, last_seed = 0;
  std::array<uint64_t, 5> verdicts{};
  std::array<uint64_t, sim::kFaultKinds> faults{};
  std::array<uint64_t, sim::kFaultKinds> fault_seeds{};
  std::map<std::string, uint64_t> probes;
  std::map<std::string, uint64_t> probe_seeds;
  std::array<uint64_t, 8> status{};
  uint64_t dead = 0;
  std::map<uint32_t, uint64_t> hosts, nics, workers;  // seeds by world shape
  uint64_t stall_seeds = 0;                           // seeds whose plan drew a stall kind
  // The stall kinds are gated (NeverHit) when the sweep could draw them
  // (random profile, stall family) or some seed did.
  bool stall_gated = false;
  double wall_s = 0;  // summed over seeds
  std::vector<SeedResult> failures;
  Verdict worst = Verdict::kOk;

  void Add(SeedResult r);
  // Probes and seeded fault kinds never hit ("" when every one was).
  std::string NeverHit() const;
};

void PrintSummary(const char* argv0, const Args& a, const Tally& t, double secs);

// One JSON object per seed (docs/simulator.md, "Campaigns").
std::string JsonlLine(const Args& a, const SeedResult& r);
// Parses one JSONL line back (the fields the tally needs); false + why.
bool ParseJsonlLine(std::string_view line, SeedResult* r, std::string* profile, std::string* why);

// `ferry-sim summarize FILE...`: the merged table of several JSONL files.
int Summarize(const char* argv0, const std::vector<std::string>& files);
// `ferry-sim --canaries`: one sweep per canary switch, the first seed that
// catches it.
int Canaries(const char* argv0, const Args& a);

}  // namespace ferry::tools

#endif  // FERRY_TOOLS_FERRY_SIM_SIM_TOOL_H_
