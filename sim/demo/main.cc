// sim/demo/main.cc: ferry-sim-demo, the scheduler demo.
//
// Usage: ferry-sim-demo [--seed N] [--mode uniform|swarm|pct] [--messages N]
//                       [--drop-message K] [--trace N] [--trace-from S]
//                       [--check-determinism]
// Prints the seed, the plan, the outcome (steps, end virtual time) and the
// trace hash; --trace prints N readable trace entries from seq S (a replay);
// --check-determinism runs the seed twice more and prints OK or the first
// diverging step. Exit: 0 OK, 1 deadlock/limit or determinism failure,
// 2 bad usage.
// What must stay true: the output is a function of the arguments only (same
// seed, same output); this binary links the production sim core, so no
// mutation can be enabled.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <system_error>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "sim/demo/demo_world.h"
#include "sim/determinism.h"
#include "sim/trace.h"

namespace ferry::sim::demo {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr size_t kTracePrintMax = 100000;

struct Args {
  uint64_t seed = kDefaultSeed;
  DemoOptions options;
  size_t trace_entries = 0;
  uint64_t trace_from = 0;
  bool check_determinism = false;
};

absl::StatusOr<uint64_t> ParseU64(absl::string_view flag, absl::string_view text) {
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    text.remove_prefix(2);
  }
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value, base);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", text, "' is not an unsigned 64-bit integer"));
  }
  return value;
}

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view flag = argv[i];
    auto value = [&]() -> absl::StatusOr<uint64_t> {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
      return ParseU64(flag, argv[++i]);
    };
    if (flag == "--check-determinism") {
      args.check_determinism = true;
    } else if (flag == "--seed") {
      FERRY_ASSIGN_OR_RETURN(args.seed, value());
    } else if (flag == "--messages") {
      FERRY_ASSIGN_OR_RETURN(uint64_t n, value());
      if (n == 0 || n > 10000) return absl::InvalidArgumentError("--messages: 1..10000");
      args.options.messages_per_producer = static_cast<uint32_t>(n);
    } else if (flag == "--drop-message") {
      FERRY_ASSIGN_OR_RETURN(uint64_t k, value());
      args.options.drop_message = k;
    } else if (flag == "--trace") {
      FERRY_ASSIGN_OR_RETURN(uint64_t n, value());
      if (n > kTracePrintMax) {
        return absl::InvalidArgumentError(absl::StrCat("--trace: at most ", kTracePrintMax));
      }
      args.trace_entries = static_cast<size_t>(n);
    } else if (flag == "--trace-from") {
      FERRY_ASSIGN_OR_RETURN(args.trace_from, value());
    } else if (flag == "--mode") {
      if (i + 1 >= argc) return absl::InvalidArgumentError("--mode needs a value");
      const absl::string_view mode = argv[++i];
      if (mode == "uniform") {
        args.options.force_mode = PickMode::kUniform;
      } else if (mode == "swarm") {
        args.options.force_mode = PickMode::kSwarm;
      } else if (mode == "pct") {
        args.options.force_mode = PickMode::kPct;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--mode: '", mode, "' is not uniform, swarm or pct"));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown argument '", flag, "'"));
    }
  }
  return args;
}

int Main(int argc, char** argv) {
  absl::StatusOr<Args> parsed = ParseArgs(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "ferry-sim-demo: %s\n", std::string(parsed.status().message()).c_str());
    std::fprintf(stderr,
                 "usage: ferry-sim-demo [--seed N] [--mode uniform|swarm|pct] [--messages N]\n"
                 "       [--drop-message K] [--trace N] [--trace-from S] "
                 "[--check-determinism]\n");
    return kExitUsage;
  }
  const Args& args = *parsed;

  Trace trace(args.trace_entries);
  if (args.trace_entries > 0) trace.RecordFrom(args.trace_from);
  const DemoResult r = RunDemo(args.seed, &trace, args.options);
  std::printf("ferry-sim-demo seed=%llu\n", static_cast<unsigned long long>(args.seed));
  std::printf("actors: %s\n", r.actor_names.c_str());
  std::printf("plan: %s\n", r.plan.ToString().c_str());
  std::printf("outcome=%s steps=%llu end_time_ns=%llu messages=%llu/%llu\n",
              std::string(RunOutcomeName(r.run.outcome)).c_str(),
              static_cast<unsigned long long>(r.run.steps),
              static_cast<unsigned long long>(r.run.end_time_ns),
              static_cast<unsigned long long>(r.consumed),
              static_cast<unsigned long long>(r.expected));
  if (!r.run.detail.empty()) std::printf("detail: %s\n", r.run.detail.c_str());
  std::printf("trace entries=%llu hash=0x%016llx digest=0x%016llx\n",
              static_cast<unsigned long long>(trace.entries()),
              static_cast<unsigned long long>(trace.hash()),
              static_cast<unsigned long long>(r.digest));
  for (const TraceEntry& e : trace.record()) {
    std::printf("  #%llu @%lluns %s\n", static_cast<unsigned long long>(e.seq),
                static_cast<unsigned long long>(e.time_ns), e.text.c_str());
  }
  int exit_code = r.run.outcome == RunOutcome::kDone ? kExitOk : kExitFailed;

  if (args.check_determinism) {
    const DemoOptions options = args.options;
    absl::StatusOr<DeterminismReport> report = CheckDeterminism(
        args.seed,
        [&options](uint64_t seed, Trace* t) { return RunDemo(seed, t, options).digest; });
    if (!report.ok()) {
      std::fprintf(stderr, "ferry-sim-demo: %s\n", std::string(report.status().message()).c_str());
      return kExitFailed;
    }
    std::printf("%s\n", report->ToString().c_str());
    if (!report->deterministic) exit_code = kExitFailed;
  }
  return exit_code;
}

}  // namespace
}  // namespace ferry::sim::demo

int main(int argc, char** argv) { return ferry::sim::demo::Main(argc, argv); }
