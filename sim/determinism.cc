// sim/determinism.cc: runs a seed twice and locates the first divergence.
//
// Owns: the window walk described in sim/determinism.h. What must stay true:
// memory is bounded by two windows of entries; at most rounds_max pairs of
// runs; a report is "deterministic" only if one pair matched in result,
// entry count and hash on the first try.
#include "sim/determinism.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"

namespace ferry::sim {
namespace {

constexpr std::string_view kEndOfTrace = "<end of trace>";

}  // namespace

std::string DeterminismReport::ToString() const {
  if (deterministic) {
    return absl::StrFormat("determinism OK: seed=%u entries=%u hash=0x%016x result=0x%016x", seed,
                           entries_a, hash_a, result_a);
  }
  std::string out = absl::StrFormat("determinism FAILED: seed=%u", seed);
  if (divergence.has_value()) {
    absl::StrAppendFormat(&out,
                          "\n  first diverging step: seq=%u\n  run A @%uns: %s\n  run B @%uns: %s",
                          divergence->seq, divergence->time_a_ns, divergence->text_a,
                          divergence->time_b_ns, divergence->text_b);
  }
  if (!detail.empty()) absl::StrAppend(&out, "\n  ", detail);
  absl::StrAppendFormat(&out,
                        "\n  hash 0x%016x vs 0x%016x, entries %u vs %u, result 0x%016x vs "
                        "0x%016x, pairs run %u",
                        hash_a, hash_b, entries_a, entries_b, result_a, result_b, pairs_run);
  return out;
}

namespace {

// Compares one window of two unequal runs' traces, from entry `from`.
// True when that decided the report (a divergence, or a detail saying why
// none can be named); false when the window matched and the traces go on
// past it (compare the next window).
bool CompareWindow(const Trace& a, const Trace& b, uint64_t from, size_t window,
                   DeterminismReport* out) {
  DeterminismReport& report = *out;
  const auto& ra = a.record();
  const auto& rb = b.record();
  FERRY_CHECK_LE(ra.size(), window);
  FERRY_CHECK_LE(rb.size(), window);
  const size_t common = std::min(ra.size(), rb.size());
  for (size_t i = 0; i < common; ++i) {
    FERRY_CHECK_EQ(ra[i].seq, from + i);
    FERRY_CHECK_EQ(rb[i].seq, from + i);
    if (ra[i].text == rb[i].text && ra[i].hash_after == rb[i].hash_after) continue;
    if (ra[i].text == rb[i].text && i == 0 && from > 0) {
      report.detail = absl::StrCat("this pair diverged before seq ", from,
                                   " (outside the compared window): nondeterministic");
      return true;
    }
    report.divergence = Divergence{from + i, ra[i].time_ns, rb[i].time_ns, ra[i].text, rb[i].text};
    return true;
  }
  if (ra.size() != rb.size()) {
    const bool a_ended = ra.size() < rb.size();
    const TraceEntry& longer = a_ended ? rb[common] : ra[common];
    Divergence d;
    d.seq = from + common;
    d.time_a_ns = a_ended ? 0 : longer.time_ns;
    d.time_b_ns = a_ended ? longer.time_ns : 0;
    d.text_a = a_ended ? std::string(kEndOfTrace) : longer.text;
    d.text_b = a_ended ? longer.text : std::string(kEndOfTrace);
    report.divergence = d;
    return true;
  }
  const bool went_past =
      ra.size() == window && (report.entries_a > from + window || report.entries_b > from + window);
  if (!went_past) {
    report.detail = "traces are identical but the results differ";
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<DeterminismReport> CheckDeterminism(uint64_t seed, const TracedRun& run,
                                                   const DeterminismOptions& options) {
  if (run == nullptr) return absl::InvalidArgumentError("CheckDeterminism: run is null");
  if (options.window_entries == 0 || options.rounds_max == 0) {
    return absl::InvalidArgumentError(absl::StrCat("CheckDeterminism: window_entries (",
                                                   options.window_entries, ") and rounds_max (",
                                                   options.rounds_max, ") must be > 0"));
  }
  DeterminismReport report;
  report.seed = seed;
  const size_t window = options.window_entries;
  uint64_t from = 0;
  for (uint32_t round = 0; round < options.rounds_max; ++round) {
    Trace a(window);
    a.RecordFrom(from);
    report.result_a = run(seed, &a);
    Trace b(window);
    b.RecordFrom(from);
    report.result_b = run(seed, &b);
    ++report.pairs_run;
    report.hash_a = a.hash();
    report.hash_b = b.hash();
    report.entries_a = a.entries();
    report.entries_b = b.entries();
    const bool same = report.hash_a == report.hash_b && report.entries_a == report.entries_b &&
                      report.result_a == report.result_b;
    if (same) {
      report.deterministic = round == 0;
      if (round > 0) {
        report.detail = absl::StrCat("an earlier pair of runs diverged after seq ", from,
                                     " but pair ", round + 1, " matched: nondeterministic");
      }
      return report;
    }

    if (CompareWindow(a, b, from, window, &report)) return report;
    from += window;
  }
  report.detail = absl::StrCat("no diverging entry in the first ", from, " entries (",
                               options.rounds_max, " windows compared)");
  return report;
}

}  // namespace ferry::sim
