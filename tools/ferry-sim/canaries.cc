// tools/ferry-sim/canaries.cc: `ferry-sim-mut --canaries`: the default sweep
// once per test-only switch (base/mutation.h; with --notify on, the
// notification switches, each swept in notification mode), each stopped at the first
// seed that fails; prints per switch the first seed that caught it, its
// class and the start of its message, or "missed" within the seed range.
// Exit 0 when every canary was caught, kExitCanaryMissed otherwise.
//
// What must stay true: a canary is caught by the sweep's own judges (oracle,
// fabric violations, bytes, liveness, crash checks) with no hint of which
// switch is on; the list below is the set docs/simulator.md promises.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "tools/ferry-sim/sim_tool.h"

namespace ferry::tools {
namespace {

struct Canary {
  base::Mutation mutation;
  std::string_view what;
  bool notify = false;  // swept with --notify on (and only then)
  // A rare interleaving: the sweep runs at least this many seeds for it
  // (from the range's first) when the range is shorter.
  uint64_t seeds_min = 0;
};

// The bugs a campaign must find on its own (issue 18's list first, then in
// the order they became catchable; docs/simulator.md section 9.4 has each
// one's first seed).
constexpr Canary kCanaries[] = {
    {base::Mutation::kEngineC1EarlyPublish, "C1 early publish"},
    {base::Mutation::kEngineC4DoubleRelease, "C4 double quota release"},
    {base::Mutation::kEngineC2RepostLatched, "C2 resubmit after timeout/cancel"},
    {base::Mutation::kEngineC3NoStaleCheck, "C3 no still-on-FIFO check"},
    {base::Mutation::kEngineC6AcceptStale, "C6 stale REQ retires a READY endpoint"},
    {base::Mutation::kEngineFailPublishesEarly, "queued slice posted after publish"},
    {base::Mutation::kEngineC9LeakAtShutdown, "C9 leak at shutdown"},
    {base::Mutation::kEngineC4ReleaseFailedDestroy, "C4 quota released at a failed destroy"},
    {base::Mutation::kEngineTimeoutBeforeDeadline, "C2 a task timed out before its deadline"},
    {base::Mutation::kEngineC5NonOwnerCall, "C5 a verbs call off the owner"},
    {base::Mutation::kEngineStaleCqeAnyGeneration, "stale CQE applied to a new slice"},
    {base::Mutation::kEngineCompleteAfterDeadline, "C2 COMPLETED after the deadline passed"},
    {base::Mutation::kEngineC2TimeoutSpills, "C2 a timeout retire fails an innocent slice"},
    {base::Mutation::kEngineEvictBusyAsIdle, "a busy endpoint evicted as idle"},
    {base::Mutation::kEngineC8SkipValidation, "C8 a refused batch enqueues its valid prefix"},
    {base::Mutation::kEngineC7DropFailedBringUp, "C7 a NIC whose bring-up failed is dropped"},
    // Lost wake-ups, judged by the probe wakes (session 36).
    {base::Mutation::kEngineWaitIgnoresDroppable, "asleep with droppable slices queued"},
    {base::Mutation::kEngineReadyKeyIgnoresCooldown, "asleep through a READY key's cooldown", false,
     1000},
    // Notifications (ferry-sim-mut --canaries --notify on).
    {base::Mutation::kEngineNotifyBeforeData, "N1 a notification sent before its data", true},
    {base::Mutation::kEngineNotifyOnFailedBatch, "N2 a failed Submit's notification sent", true},
    {base::Mutation::kEngineNotifyNoDedup, "N3 a resent notification delivered again", true},
    {base::Mutation::kEngineNotifyRecvNoQuota, "N4 receive WRs without CQ quota", true},
    {base::Mutation::kEngineRetireTimerDrainsUnconnected, "asleep past an unconnected QP's destroy",
     true},
};

}  // namespace

int Canaries(const char* argv0, const Args& a) {
  if (!base::Mutations::kCompiledIn) {
    std::fprintf(stderr, "ferry-sim: --canaries needs the test build (ferry-sim-mut)\n");
    return kExitUsage;
  }
  std::printf("canaries: seeds %llu..%llu, profile %s, %u job(s)\n",
              static_cast<unsigned long long>(a.first), static_cast<unsigned long long>(a.last),
              std::string(simworld::WorldProfileName(a.profile)).c_str(), a.jobs);
  std::printf("  %-34s %-8s %-6s %-9s %s\n", "switch", "caught", "seeds", "class", "message");
  uint32_t missed = 0;
  const auto start = std::chrono::steady_clock::now();
  size_t swept = 0;
  for (const Canary& c : kCanaries) {
    if (c.notify != a.notify) continue;
    ++swept;
    Args run = a;
    run.mutations = base::Mutations{};
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
    run.mutations.Enable(c.mutation);
#endif
    run.mutation_name = std::string(base::MutationName(c.mutation));
    if (c.seeds_min > 0) run.last = std::max(run.last, a.first + c.seeds_min - 1);
    ForkPool pool(run);
    uint64_t next = a.first;
    std::optional<SeedResult> caught;
    uint64_t ran = 0;
    while (!caught) {
      while (next <= run.last && pool.in_flight() < a.jobs) pool.Start(next++);
      std::optional<SeedResult> r = pool.Next();
      if (!r) break;
      ++ran;
      if (r->verdict != Verdict::kOk) caught = std::move(r);
    }
    if (!caught) {
      ++missed;
      std::printf("  %-34s %-8s %-6llu %-9s (%s)\n", run.mutation_name.c_str(), "missed",
                  static_cast<unsigned long long>(ran), "-", std::string(c.what).c_str());
    } else {
      std::string msg = caught->message.substr(0, 110);
      std::printf("  %-34s %-8llu %-6llu %-9s %s\n", run.mutation_name.c_str(),
                  static_cast<unsigned long long>(caught->report.seed),
                  static_cast<unsigned long long>(caught->report.seed - a.first + 1),
                  std::string(VerdictName(caught->verdict)).c_str(), msg.c_str());
      std::printf("  %-34s replay: %s\n", "",
                  ReplayCommand(argv0, run, caught->report.seed).c_str());
    }
    std::fflush(stdout);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("canaries: %zu switches, %u missed, %.1f s\n", swept, missed, secs);
  return missed == 0 ? kExitOk : kExitCanaryMissed;
}

}  // namespace ferry::tools
