// sim/world/swarm_shape.cc: the fixed and random world shapes of a swarm
// seed, their engine configs and buffer layouts (see swarm_shape.h).
#include "sim/world/swarm_shape.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "sim/world/two_engines.h"

namespace ferry::simworld {
namespace {

// The random world's memory bound: hosts x buffer bytes stays under it.
constexpr uint64_t kWorldBytesMax = 64ull << 20;
constexpr uint64_t kRequestBytesMax = 4ull << 20;  // the largest request a shape draws
constexpr uint64_t kW2SlotBytes = 16 * 1024;

template <typename T, size_t N>
T Pick(sim::Prng& p, const std::array<T, N>& menu) {
  return menu[p.Below(N)];
}

// The largest power of two <= v (v >= 1).
uint64_t FloorPow2(uint64_t v) {
  uint64_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

}  // namespace

std::string RatioText(sim::Ratio r) {
  return r.num == 0 ? std::string("off") : absl::StrCat(r.num, "/", r.den);
}

std::string_view WorldProfileName(WorldProfile p) {
  return p == WorldProfile::kFixed ? "fixed" : "random";
}

absl::StatusOr<WorldProfile> ParseWorldProfile(std::string_view text) {
  if (text == "fixed") return WorldProfile::kFixed;
  if (text == "random") return WorldProfile::kRandom;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown profile '", std::string(text), "' (profiles: fixed, random)"));
}

EngineConfig WorldShape::Config() const {
  EngineConfig c = ScenarioConfig();
  c.slice_timeout_ns = slice_timeout_ns;
  c.qp_timeout_exp = 10;
  c.qp_retries = 3;
  if (profile == WorldProfile::kFixed) return c;
  c.workers = workers;
  c.qps_per_endpoint = qps;
  c.wr_depth = wr_depth;
  c.cqe_limit = cqe_limit;
  c.endpoint_store_capacity = store_capacity;
  c.zombie_quota_max = zombie_quota_max;
  c.slice_size_bytes = slice_bytes;
  c.request_bytes_max = kRequestBytesMax;
  c.batch_capacity_max = std::max<uint32_t>(64, batch_max);
  c.rail_cooldown_ns = rail_cooldown_ns;
  c.rail_cooldown_ns_max = rail_cooldown_ns_max;
  c.qp_rd_atomic_max = rd_atomic;
  c.cqs_per_worker = cqs;
  return c;
}

BufLayout LayoutOf(const WorldShape& s) {
  BufLayout l;
  if (s.profile == WorldProfile::kFixed) {
    l.zone = 384 * 1024;
    l.w2_slot = 64 * 1024;
    l.w2_local = 384 * 1024;
    l.w1_remote_base = 512 * 1024;
    l.w2_remote_base = 896 * 1024;
    l.per_source = false;
    l.bytes = kBufBytes;
    return l;
  }
  l.zone = uint64_t{s.slots} * s.slot_bytes;
  l.w2_slot = kW2SlotBytes;
  l.w2_local = l.zone;
  l.w1_remote_base = l.w2_local + 2 * uint64_t{s.hosts} * l.w2_slot;
  l.w2_remote_base = l.w1_remote_base + uint64_t{s.hosts} * l.zone;
  l.per_source = true;
  l.bytes = l.w2_remote_base + 2 * uint64_t{s.hosts} * l.w2_slot;
  return l;
}

uint64_t WorldShape::BufBytes() const { return LayoutOf(*this).bytes; }

WorldShape FixedShape() { return WorldShape{}; }

WorldShape DrawShape(uint64_t seed) {
  sim::Prng p(seed * 7919 + 3);
  WorldShape s;
  s.profile = WorldProfile::kRandom;
  s.hosts = static_cast<uint32_t>(p.Range(2, kHostsMax));
  s.nics = static_cast<uint32_t>(p.Range(1, kDevicesPerHostMax));
  s.workers = static_cast<uint32_t>(p.Range(1, 8));
  s.qps = static_cast<uint32_t>(p.Range(1, 4));
  s.wr_depth = Pick<uint32_t, 4>(p, {2, 4, 8, 16});
  s.store_capacity = Pick<uint32_t, 4>(p, {1, 2, 3, 8});
  s.cqe_limit = s.wr_depth * s.qps * s.store_capacity * Pick<uint32_t, 3>(p, {1, 2, 4});
  s.zombie_quota_max = Pick<uint32_t, 3>(
      p, {s.cqe_limit, std::max(1u, s.cqe_limit / 2), std::min(s.cqe_limit, s.wr_depth)});
  s.rnic = p.Below(2) == 0 ? sim::RnicProfile::kMlx5 : sim::RnicProfile::kRxe;
  s.slice_bytes = Pick<uint64_t, 3>(p, {4096, 16 * 1024, 64 * 1024});
  s.slice_timeout_ns = Pick<uint64_t, 3>(p, {2'000'000, 5'000'000, 30'000'000});
  s.rail_cooldown_ns = Pick<uint64_t, 2>(p, {2'000'000, 10'000'000});
  s.rail_cooldown_ns_max = 4 * s.rail_cooldown_ns;
  s.straggler = Pick<sim::Ratio, 3>(p, {sim::kNever, sim::Ratio{1, 1024}, sim::Ratio{1, 128}});
  s.straggler_ns = Pick<uint64_t, 3>(p, {200'000, 5'000'000, 40'000'000});
  s.slots = Pick<uint32_t, 3>(p, {4, 16, 64});
  const uint64_t drawn = Pick<uint64_t, 4>(p, {4096, 64 * 1024, 1 << 20, kRequestBytesMax});
  // hosts x (buffer of (2 + hosts) zones, about) within the world's bound.
  const uint64_t fit = kWorldBytesMax / (uint64_t{s.hosts} * (s.hosts + 2) * s.slots);
  s.slot_bytes = std::max<uint64_t>(4096, std::min(drawn, FloorPow2(std::max<uint64_t>(1, fit))));
  s.batch_max = std::min(s.slots, Pick<uint32_t, 4>(p, {1, 4, 16, 64}));
  s.peers_per_host = static_cast<uint32_t>(p.Range(1, std::min<uint32_t>(3, s.hosts - 1)));
  s.cancel = Pick<sim::Ratio, 3>(p, {sim::kNever, sim::Ratio{1, 16}, sim::Ratio{1, 4}});
  s.c8_probe = Pick<sim::Ratio, 2>(p, {sim::kNever, sim::Ratio{1, 32}});
  s.poison_on_reuse = p.Below(2) == 1;
  s.revocable = p.Below(2) == 1;  // drawn after the rest: the earlier draws stay as they were
  s.rd_atomic = Pick<uint8_t, 3>(p, {1, 2, 16});  // drawn after the rest, for the same reason
  s.cqs = Pick<uint32_t, 3>(p, {1, 2, 3});        // drawn last, for the same reason
  FERRY_CHECK(s.Config().Validate().ok());
  return s;
}

WorldShape ShapeOf(WorldProfile profile, uint64_t seed) {
  return profile == WorldProfile::kFixed ? FixedShape() : DrawShape(seed);
}

std::string WorldShape::ToString() const {
  std::string out = absl::StrCat(
      "world (profile ", std::string(WorldProfileName(profile)), "): ", hosts, " hosts x ", nics,
      " NICs, ", workers, " workers, ", qps, " QPs/endpoint, wr_depth ", wr_depth, ", cqe_limit ",
      cqe_limit, ", store ", store_capacity, ", zombie_quota_max ", zombie_quota_max, ", ",
      std::string(sim::RnicProfileName(rnic)), "\n");
  absl::StrAppend(&out, "  slices ", slice_bytes, " B, slice_timeout ", slice_timeout_ns,
                  " ns, rail cooldown ", rail_cooldown_ns, " ns (max ", rail_cooldown_ns_max,
                  "), stragglers ", RatioText(straggler), " up to ", straggler_ns, " ns\n");
  absl::StrAppend(&out, "  workload: ", slots, " slots of <= ", slot_bytes,
                  " B, batches <= ", batch_max, ", ", peers_per_host, " peers/host, cancel ",
                  RatioText(cancel), ", c8 probes ", RatioText(c8_probe), ", poison on reuse ",
                  poison_on_reuse ? "on" : "off", ", buffer ", BufBytes(), " B/host",
                  revocable ? ", revocable (memory windows)" : "",
                  ", READs in flight per QP <= ", rd_atomic, ", ", cqs, " CQs/worker\n");
  return out;
}

}  // namespace ferry::simworld
