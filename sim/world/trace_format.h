// sim/world/trace_format.h: turns a swarm run's recorded trace (sim/trace.h
// entries) into a readable event listing and into Chrome/Perfetto JSON.
//
// Thread safety: pure functions of their arguments.
// What must stay true:
// - Attribution: the scheduler traces "step <actor>" after the actor's step,
//   so every event between two steps belongs to the later step's actor,
//   except events inside a "main.begin" .. "main.end" pair (the world's
//   driver: opens, submits, start-up, shutdown) and the scheduler's own
//   events (timers, jump, plan, stall, pct_change).
// - Arguments that are fnv1a64 of a known key or address print as that text.
// - The JSON is one object {"traceEvents": [...], "displayTimeUnit": "ns"},
//   one track (tid) per actor plus "main" and "sched"; strings are escaped;
//   at most `events_max` events are written (the rest counted in metadata).
#ifndef FERRY_SIM_WORLD_TRACE_FORMAT_H_
#define FERRY_SIM_WORLD_TRACE_FORMAT_H_

#include <cstddef>
#include <string>

#include "sim/world/swarm.h"

namespace ferry::simworld {

struct TraceFormat {
  bool draws = false;  // PRNG draws (very many)
  bool steps = false;  // one line per scheduler step
};

// One line per event: "<time ms> <actor> <kind> <args>", with a header that
// names the seed, the entry count and the trace hash.
std::string FormatTrace(const SwarmReport& r, const TraceFormat& format = {});

// Chrome trace-event JSON (loads in ui.perfetto.dev and chrome://tracing).
std::string PerfettoJson(const SwarmReport& r, size_t events_max = 200'000);

}  // namespace ferry::simworld

#endif  // FERRY_SIM_WORLD_TRACE_FORMAT_H_
