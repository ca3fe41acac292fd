// bench/zero_latency.h: the simulated RNIC the benchmarks measure the
// engine on: two hosts, no link latency, no jitter, ~1 ns serialization per
// packet, so what a benchmark times is software (the engine's, or the
// simulated RNIC's own per WR and packet), never the wire.
// Header-only; no state.
#ifndef FERRY_BENCH_ZERO_LATENCY_H_
#define FERRY_BENCH_ZERO_LATENCY_H_

#include "sim/rnic/fabric.h"

namespace ferry::bench {

inline sim::FabricConfig ZeroLatencyFabric() {
  sim::FabricConfig c;
  c.hosts = 2;
  c.link_latency_ns = 0;
  c.link_jitter_ns = 0;
  c.cqe_jitter_ns = 0;
  c.link_gbps = 1'000'000;
  return c;
}

}  // namespace ferry::bench

#endif  // FERRY_BENCH_ZERO_LATENCY_H_
