// sim/world/swarm_shape.h: the world a swarm seed runs in. Two profiles:
// "fixed" (the two-host world every named regression was found on: one NIC
// each, two workers, two QPs per endpoint, depth 16, a CQ of 1024, sizes
// 8-32 KiB, at most two requests per batch) and "random" (every choice below
// drawn from the seed: 2-8 hosts, 1-4 NICs, 1-8 workers, 1-4 QPs per
// endpoint, small WR depths and CQE limits, a small endpoint store, both
// destroy profiles, short slice timeouts, packet stragglers, and a workload
// of odd sizes, batches up to 64, cancels, buffer reuse and C8 attempts).
//
// Thread safety: pure values and functions.
// What must stay true:
// - DrawShape(seed) depends on the seed alone (its own Prng stream, apart
//   from the fault plan's), and every drawn value is printed by ToString().
// - The fixed shape is exactly the world of the fixed profile: its runs (and
//   trace hashes) do not change when the random profile grows.
// - A shape always gives a config that EngineConfig::Validate accepts, and
//   buffers that fit its layout (static checks in swarm_shape.cc, and
//   SwarmShape.EveryDrawnShapeIsValid).
#ifndef FERRY_SIM_WORLD_SWARM_SHAPE_H_
#define FERRY_SIM_WORLD_SWARM_SHAPE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ferry/config.h"
#include "sim/prng.h"
#include "sim/rnic/fabric.h"

namespace ferry::simworld {

enum class WorldProfile : uint8_t { kFixed, kRandom };
std::string_view WorldProfileName(WorldProfile p);
absl::StatusOr<WorldProfile> ParseWorldProfile(std::string_view text);

struct WorldShape {
  WorldProfile profile = WorldProfile::kFixed;
  uint32_t hosts = 2;
  uint32_t nics = 1;  // per host, every one a rail of every endpoint's peer
  uint32_t workers = 2;
  uint32_t qps = 2;  // per endpoint
  uint32_t wr_depth = 16;
  uint32_t cqe_limit = 1024;
  uint32_t store_capacity = 32;  // endpoints per worker before eviction
  uint32_t zombie_quota_max = 1024;
  sim::RnicProfile rnic = sim::RnicProfile::kMlx5;
  uint64_t slice_bytes = 16 * 1024;
  uint64_t slice_timeout_ns = 30'000'000;
  // Rail pauses (random profile): the first cooldown and its cap, so a
  // paused rail comes back within the liveness phase.
  uint64_t rail_cooldown_ns = 1'000'000'000;
  uint64_t rail_cooldown_ns_max = 300'000'000'000;
  // Packet stragglers: a packet delayed up to straggler_ns (past the ACK
  // timeout and the slice timeout when drawn so), so late successes race
  // timeouts.
  sim::Ratio straggler = sim::kNever;
  uint64_t straggler_ns = 1'000'000;
  // Workload.
  uint32_t slots = 6;                 // first-wave tasks in flight per host
  uint64_t slot_bytes = 64 * 1024;    // the largest first-wave request
  uint32_t batch_max = 2;             // requests per batch
  uint32_t peers_per_host = 1;        // hosts each host opens segments on
  sim::Ratio cancel = sim::kNever;    // per host per round: cancel one pending task
  sim::Ratio c8_probe = sim::kNever;  // per host per round: FreeBatch/Unregister while pending
  bool poison_on_reuse = false;       // a freed slot's buffer is overwritten at once
  // Every host's buffer is registered revocable (MemoryOptions::revocable):
  // peers reach it through memory windows (docs/security.md section 6).
  bool revocable = false;
  // READs in flight per QP (EngineConfig::qp_rd_atomic_max; the sim's
  // requester holds a READ back past it): 1, 2 or the default 16.
  uint8_t rd_atomic = 16;
  // CQs per worker (EngineConfig::cqs_per_worker): 1, 2 or 3; endpoints
  // spread over them.
  uint32_t cqs = 1;

  // The engine config of this shape (from ScenarioConfig()).
  EngineConfig Config() const;
  // Bytes of one host's buffer (sim/world/swarm.cc lays it out).
  uint64_t BufBytes() const;
  std::string ToString() const;
};

// "off" for a zero ratio, else "num/den" (plans print their rates so).
std::string RatioText(sim::Ratio r);

WorldShape FixedShape();
// The random profile's shape of `seed` (Prng(seed * 7919 + 3)).
WorldShape DrawShape(uint64_t seed);
// The shape of a seed under a profile.
WorldShape ShapeOf(WorldProfile profile, uint64_t seed);

// Where a host's buffer keeps what (no two tasks share a byte):
//   [0, zone)                  its own first-wave local buffers (slots)
//   [w2_local, +w2_zone)       its own second-wave local buffers
//   [w1_remote(src), +zone)    source host src's first-wave remote ranges
//   [w2_remote(src), +2 slots) source host src's second-wave remote ranges
// The fixed profile shares one remote zone among sources (it has one).
struct BufLayout {
  uint64_t zone = 0;
  uint64_t w2_slot = 0;
  uint64_t w2_local = 0;
  uint64_t w1_remote_base = 0;
  uint64_t w2_remote_base = 0;
  bool per_source = false;
  uint64_t bytes = 0;
  uint64_t W1Local(uint32_t slot, uint64_t slot_bytes) const { return slot * slot_bytes; }
  uint64_t W1Remote(uint32_t src, uint32_t slot, uint64_t slot_bytes) const {
    return w1_remote_base + (per_source ? src * zone : 0) + slot * slot_bytes;
  }
  uint64_t W2Local(uint32_t i) const { return w2_local + i * w2_slot; }
  uint64_t W2Remote(uint32_t src, uint32_t i) const {
    return w2_remote_base + (per_source ? src * 2 * w2_slot : 0) + i * w2_slot;
  }
};
BufLayout LayoutOf(const WorldShape& s);

}  // namespace ferry::simworld

#endif  // FERRY_SIM_WORLD_SWARM_SHAPE_H_
