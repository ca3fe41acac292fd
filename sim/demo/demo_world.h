// sim/demo/demo_world.h: a toy world for the scheduler demo and the
// determinism tests: producers send messages to consumers over a delayed
// network (virtual-clock timers), with credit-based flow control.
//
// The world of a seed: root = Prng(seed) (trace stream kRootStream); forked
// from root in this order: the scheduler, the network, producer 0..P-1,
// consumer 0..C-1. Each producer sends `messages_per_producer` messages;
// before each send it may pause (NextWakeNs). The network delays each message
// by a drawn time; a consumer spends a drawn time per message and returns a
// credit to the sender's view of it. The run is done when every message is
// consumed. With `drop_message` set, the network loses that message (0-based
// send order) while its consumer still waits for it: a deadlock on purpose.
//
// Thread safety: none. What must stay true: everything is built from the
// seed inside RunDemo (no state survives between calls); all randomness
// comes from the forked Prngs; queues are bounded by the credits.
#ifndef FERRY_SIM_DEMO_DEMO_WORLD_H_
#define FERRY_SIM_DEMO_DEMO_WORLD_H_

#include <cstdint>
#include <optional>
#include <string>

#include "base/mutation.h"
#include "sim/scheduler.h"
#include "sim/trace.h"

namespace ferry::sim::demo {

inline constexpr uint64_t kDefaultSeed = 20240601;
inline constexpr uint32_t kRootStream = 1;
inline constexpr uint32_t kNetworkStream = 2;
inline constexpr uint32_t kProducerStreamBase = 100;
inline constexpr uint32_t kConsumerStreamBase = 200;

struct DemoOptions {
  uint32_t producers = 3;               // 1..16
  uint32_t consumers = 2;               // 1..16
  uint32_t messages_per_producer = 40;  // 1..10000
  uint32_t credits_per_consumer = 4;    // 1..64, per (producer, consumer) pair
  std::optional<PickMode> force_mode;   // else drawn from the seed
  std::optional<uint64_t> drop_message;
  uint64_t step_max = 1'000'000;
  uint64_t time_max_ns = 10'000'000'000;  // 10 s of virtual time
  base::Mutations mutations;              // test builds only
};

struct DemoResult {
  SchedulerPlan plan;
  std::string actor_names;  // "producer-0 producer-1 ... consumer-1"
  RunResult run;
  uint64_t sent = 0;
  uint64_t delivered = 0;  // handed to a consumer's inbox
  uint64_t consumed = 0;
  uint64_t expected = 0;  // producers * messages_per_producer
  uint64_t digest = 0;    // FNV-1a over the consumed messages, in order, and the end time
};

// Builds the world of `seed`, runs it to the end, and reports. `trace` may
// be null. Options out of range are clamped into range (see DemoOptions).
DemoResult RunDemo(uint64_t seed, Trace* trace, const DemoOptions& options = {});

}  // namespace ferry::sim::demo

#endif  // FERRY_SIM_DEMO_DEMO_WORLD_H_
