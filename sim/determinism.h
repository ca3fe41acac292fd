// sim/determinism.h: the determinism check: run one seed twice, each with a
// fresh Trace, and compare; on a difference, find the first diverging trace
// entry (seq, virtual time and both texts).
//
// How the first divergence is found with a bounded record: both runs record
// a window of `window_entries` entries starting at seq 0; the first entry
// whose text or rolling hash differs is the divergence (the hash covers every
// earlier entry too). If the whole window matches and both runs went past
// it, the pair is run again with the next window, and so on (at most
// `rounds_max` pairs). A run that is nondeterministic may diverge at a
// different place in each pair; the report says what the last pair showed.
//
// Thread safety: none (runs the function on the calling thread).
// What must stay true: `run` builds its whole world from `seed` (no state
// carried between calls); the check never reports OK unless both runs
// produced the same result, the same number of entries and the same hash.
#ifndef FERRY_SIM_DETERMINISM_H_
#define FERRY_SIM_DETERMINISM_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "sim/trace.h"

namespace ferry::sim {

// Runs the world of `seed` to its end, reporting every draw and event to
// `trace`; returns a digest of its final state (compared between runs).
using TracedRun = std::function<uint64_t(uint64_t seed, Trace* trace)>;

struct DeterminismOptions {
  size_t window_entries = 4096;  // > 0
  uint32_t rounds_max = 64;      // > 0; pairs of runs at most
};

struct Divergence {
  uint64_t seq = 0;  // first entry that differs
  uint64_t time_a_ns = 0;
  uint64_t time_b_ns = 0;
  std::string text_a;  // "<end of trace>" when run A had no entry there
  std::string text_b;
};

struct DeterminismReport {
  uint64_t seed = 0;
  bool deterministic = false;
  uint64_t result_a = 0, result_b = 0;
  uint64_t hash_a = 0, hash_b = 0;
  uint64_t entries_a = 0, entries_b = 0;
  uint32_t pairs_run = 0;
  // Set when a differing entry was found; unset with !deterministic means
  // the traces matched but the results differed, or the divergence lies
  // before the compared window (see `detail`).
  std::optional<Divergence> divergence;
  std::string detail;
  // One line for OK ("determinism OK seed=.. entries=.. hash=0x.."), else
  // "determinism FAILED seed=..: first diverging step seq=.. ..." with both
  // texts on their own lines.
  std::string ToString() const;
};

// Errors: InvalidArgument for a null `run` or zero options.
absl::StatusOr<DeterminismReport> CheckDeterminism(uint64_t seed, const TracedRun& run,
                                                   const DeterminismOptions& options = {});

}  // namespace ferry::sim

#endif  // FERRY_SIM_DETERMINISM_H_
