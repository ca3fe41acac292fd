// include/ferry/testing.h: ferry::testing::SimCluster, Ferry on a simulated
// RNIC for users' own tests (library libferry-testing, pkg-config
// ferry-testing; never part of libferry).
//
// A SimCluster is N simulated hosts, each with one simulated RNIC ("sim0")
// and a control endpoint on a simulated network, and on each host a
// ferry::Engine running Ferry's production threaded runtime, exactly the
// engine a service links. The RNIC follows the verbs rules of the chosen
// profile (mlx5 or rxe) and injects the faults of the fault plan: scripted
// lines ("at <ns> <kind> <target> [for <ns>]", e.g. "at 0 link_down
// dev:h1/sim0", "at 2000000 cq_overrun cq:h0/sim0/1", "at 0 wr_flush
// qp:h0/sim0/*", "at 5000000 paused_peer host:h1 for 2000000"), a seeded
// swarm plan of rates (as ferry-sim draws it), or faults injected while
// the test runs, and host process restarts (RestartHost). Every choice
// derives from the seed; the threads make a run's interleaving vary, not
// its fault plan.
//
// The kinds, by target (docs/using.md has the table):
//   qp:h<H>/sim0/*     wr_flush, late_cqe, hung_qp, destroy_qp_fail,
//                      modify_qp_fail, post_send_enomem, packet_loss (every
//                      live QP of the device; a QP number works too)
//   cq:h<H>/sim0/<n>   cq_overrun (n-th CQ the engine created, from 1)
//   dev:h<H>/sim0      link_down, link_up, port_flap, device_fatal,
//                      gid_change, resource_fail
//   host:h<H>          resource_fail; paused_peer for <ns> (the process
//                      makes no verbs call, its endpoint neither delivers
//                      nor sends; its RNIC still serves peers);
//                      ctrl_partition for <ns> (cut off every other host's
//                      endpoint); ctrl_loss, ctrl_dup, ctrl_delay for <ns>
//                      (the next message from H to each other host)
// peer_restart is RestartHost(h) (it replaces engine(h)); ctrl_reorder is
// a swarm rate only.
//
// Thread safety: every method may be called from any thread; engine(i)
// returns an Engine whose own contract is in <ferry/engine.h>.
// What must stay true: Finish() shuts every engine down and then reports
// what the simulated RNIC saw: "" when no rule of the verbs model was
// broken and no verbs object is left, else what.
#ifndef FERRY_INCLUDE_FERRY_TESTING_H_
#define FERRY_INCLUDE_FERRY_TESTING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/config.h"
#include "ferry/engine.h"
#include "ferry/export.h"

namespace ferry::testing {

struct SimClusterOptions {
  uint32_t hosts = 2;                 // 1..8
  uint64_t seed = 1;                  // the root of every random choice
  std::string rnic_profile = "mlx5";  // "mlx5" or "rxe"
  // Scripted faults, one per line (the form above; '#' comments).
  std::string fault_script;
  // Also draw a seeded swarm plan (each fault kind on or off, with a rate),
  // as ferry-sim's swarm does: the RNIC's kinds, the control network's
  // loss/dup/reorder/delay as its rates, and every 1 ms each host paused
  // (100 us-2 ms) and cut off (100 us-5 ms) at the paused_peer and
  // ctrl_partition rates. peer_restart is off (RestartHost).
  bool swarm_fault_plan = false;
  // The config of every host's engine; devices must be empty or {"sim0"}.
  EngineConfig engine_config;
};

class FERRY_EXPORT SimCluster {
 public:
  // Errors: kInvalidArgument (hosts out of range, unknown profile, a bad
  // fault line: the message names the line), then Engine::Create's.
  static absl::StatusOr<std::unique_ptr<SimCluster>> Create(const SimClusterOptions& options);
  // Shuts down what Finish() did not.
  ~SimCluster();
  SimCluster(const SimCluster&) = delete;
  SimCluster& operator=(const SimCluster&) = delete;

  uint32_t hosts() const;
  // Host h's engine (h < hosts()); valid until Finish() or destruction.
  Engine& engine(uint32_t h);
  // Host h's control address, for Engine::OpenSegment.
  std::string address(uint32_t h) const;

  // Host h's process exits (as a crash: the RNIC closes its device
  // contexts, its control endpoint drops what was queued) and a new one
  // starts: engine(h) is then a new Engine, with nothing registered; peers
  // see a new incarnation and open its segment again. Errors: Engine::Create's.
  absl::Status RestartHost(uint32_t h);

  // Applies one fault line now ("at" part optional: "link_down dev:h1/sim0").
  // kInvalidArgument for a malformed line, kNotFound for a missing target.
  absl::Status InjectFault(std::string_view line);
  // The fault plan in force, one line per kind and per scripted fault.
  std::string FaultPlanText() const;
  // What was injected so far, three lines: the RNIC's faults by kind
  // ("rnic faults: wr_flush=2 late_cqe=1", kinds with none left out), the
  // cluster's ("pauses=1 partitions=0"), the control network's counters
  // ("net counters: sent=.. scripted=.. drop_loss=.."). So a test can
  // check that its fault fired.
  std::string FaultCounts() const;
  // Virtual time of the simulated world, in ns.
  uint64_t NowNs() const;

  // Shuts every engine down (each waits up to timeout_ns for evidence) and
  // returns the verdict: "" when clean, else each violation of the verbs
  // model and each verbs object left, one per line.
  std::string Finish(uint64_t timeout_ns);

 private:
  struct State;
  explicit SimCluster(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace ferry::testing

#endif  // FERRY_INCLUDE_FERRY_TESTING_H_
