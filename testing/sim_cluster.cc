// testing/sim_cluster.cc: ferry::testing::SimCluster (include/ferry/testing.h):
// N hosts of ferry::Engine on the production threaded runtime over the
// simulated RNIC and control network of sim/threaded/locked_world.h.
//
// Owns: the locked world (fabric, network, virtual clock, pump thread) and
// per host the four ports and the engine. What must stay true: engines are
// shut down and destroyed before the ports and the world (an engine's
// threads call the ports until its destructor returns); the pump runs
// while any engine lives, so virtual time moves and timers fire.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "ferry/testing.h"
#include "hal/clock.h"
#include "hal/control_net.h"
#include "hal/entropy.h"
#include "hal/verbs.h"
#include "sim/prng.h"
#include "sim/rnic/fabric.h"
#include "sim/rnic/fault_plan.h"
#include "sim/threaded/locked_world.h"
#include "sim/world/process_verbs.h"
#include "testing/sim_cluster_state.h"

namespace ferry::testing {

absl::Status SimCluster::State::StartProcess(uint32_t h) {
  Host& hs = hosts[h];
  FERRY_ASSIGN_OR_RETURN(hs.net, world->Bind(hs.addr));
  hs.entropy = world->NewEntropy();
  auto pv = std::make_shared<simworld::ProcessVerbs>(hs.verbs.get());
  // Under the world mutex: timers read it (testing/sim_cluster_state.h).
  world->WithFabric([&](sim::Fabric&) {
    hs.proc_verbs = pv;
    return 0;
  });
  const EngineEnv env{pv.get(), hs.net.get(), world->clock(), hs.entropy.get()};
  FERRY_ASSIGN_OR_RETURN(hs.engine, Engine::Create(config, env));
  return absl::OkStatus();
}

namespace {

// The fabric's part of the options (profile, hosts, its scripted faults,
// the swarm's RNIC rates); the cluster's part (pauses, the control
// network's faults) goes to `cluster_faults` and `net_plan`.
absl::StatusOr<sim::FabricConfig> FabricFor(const SimClusterOptions& o, std::string* plan_text,
                                            std::vector<sim::ScriptedFault>* cluster_faults,
                                            sim::NetPlan* net_plan) {
  sim::FabricConfig fc;
  if (o.rnic_profile == "mlx5") {
    fc.profile = sim::RnicProfile::kMlx5;
  } else if (o.rnic_profile == "rxe") {
    fc.profile = sim::RnicProfile::kRxe;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("rnic_profile \"", o.rnic_profile, "\": must be \"mlx5\" or \"rxe\""));
  }
  fc.hosts = o.hosts;
  FERRY_ASSIGN_OR_RETURN(std::vector<sim::ScriptedFault> script,
                         sim::ParseFaultScript(o.fault_script));
  for (sim::ScriptedFault& f : script)
    (FabricApplies(f.kind) ? fc.script : *cluster_faults).push_back(f);
  if (o.swarm_fault_plan) {
    // The swarm's draw, from its own fork of the seed (the world's root
    // is forked separately, so the plan does not shift the world's draws).
    sim::Prng plan_prng(o.seed ^ 0x5eedfa017ULL);
    fc.plan = sim::FaultPlan::Draw(plan_prng);
    *net_plan = SplitSwarmPlan(&fc.plan);
  }
  *plan_text = fc.plan.ToString();
  absl::StrAppend(plan_text, net_plan->ToString(), "\n");
  for (const sim::ScriptedFault& f : script) absl::StrAppend(plan_text, f.ToString(), "\n");
  return fc;
}

}  // namespace

SimCluster::SimCluster(std::unique_ptr<State> state) : s_(std::move(state)) {}

absl::StatusOr<std::unique_ptr<SimCluster>> SimCluster::Create(const SimClusterOptions& options) {
  if (options.hosts == 0 || options.hosts > kSimClusterHostsMax)
    return absl::InvalidArgumentError(
        absl::StrCat("hosts = ", options.hosts, ": must be in [1, ", kSimClusterHostsMax, "]"));
  if (!options.engine_config.devices.empty() &&
      options.engine_config.devices != std::vector<std::string>{"sim0"})
    return absl::InvalidArgumentError("engine_config.devices: a simulated host has only \"sim0\"");
  auto state = std::make_unique<State>();
  std::vector<sim::ScriptedFault> cluster_faults;
  sim::LockedWorld::Options wo;
  FERRY_ASSIGN_OR_RETURN(sim::FabricConfig fc,
                         FabricFor(options, &state->plan_text, &cluster_faults, &wo.net_plan));
  const sim::FaultPlan plan = fc.plan;
  state->world = std::make_unique<sim::LockedWorld>(options.seed, std::move(fc), wo);
  state->config = options.engine_config;
  state->hosts.resize(options.hosts);
  for (uint32_t h = 0; h < options.hosts; ++h) {
    state->hosts[h].addr = absl::StrCat("h", h, ":7000");
    state->hosts[h].verbs = state->world->NewVerbs(h);
  }
  for (const sim::ScriptedFault& f : cluster_faults)
    FERRY_RETURN_IF_ERROR(state->Schedule(f, /*now=*/false));
  FERRY_RETURN_IF_ERROR(state->ScheduleSwarm(plan, options.seed));
  state->world->StartPump();
  for (uint32_t h = 0; h < options.hosts; ++h) FERRY_RETURN_IF_ERROR(state->StartProcess(h));
  return std::unique_ptr<SimCluster>(new SimCluster(std::move(state)));
}

SimCluster::~SimCluster() {
  if (!s_->finished) (void)Finish(1'000'000'000);
}

uint32_t SimCluster::hosts() const { return static_cast<uint32_t>(s_->hosts.size()); }

Engine& SimCluster::engine(uint32_t h) { return *s_->hosts.at(h).engine; }

std::string SimCluster::address(uint32_t h) const { return s_->hosts.at(h).addr; }

absl::Status SimCluster::RestartHost(uint32_t h) {
  State::Host& hs = s_->hosts.at(h);
  if (hs.engine == nullptr) return absl::FailedPreconditionError("Finish() was called");
  // The process is gone: from now on nothing its threads do reaches the
  // RNIC; its engine object is freed (its teardown has nothing to wait for
  // and touches nothing), then a new process starts.
  hs.proc_verbs->Kill();
  FERRY_RETURN_IF_ERROR(s_->world->RestartHost(h, hs.addr));
  (void)hs.engine->Shutdown(0);
  hs.engine.reset();
  hs.net.reset();
  return s_->StartProcess(h);
}

absl::Status SimCluster::InjectFault(std::string_view line) {
  const std::string raw(line);
  std::string text(absl::StripAsciiWhitespace(absl::string_view(raw)));
  if (!absl::StartsWith(text, "at ")) text = "at 0 " + text;
  FERRY_ASSIGN_OR_RETURN(std::vector<sim::ScriptedFault> faults, sim::ParseFaultScript(text));
  if (faults.size() != 1) return absl::InvalidArgumentError("InjectFault: one fault line");
  if (s_->finished) return absl::FailedPreconditionError("Finish() was called");
  if (!FabricApplies(faults[0].kind)) {
    return s_->Schedule(faults[0], /*now=*/true);
  }
  return s_->world->WithFabric([&](sim::Fabric& f) {
    sim::ScriptedFault fault = faults[0];
    fault.at_ns = f.NowNs();
    return f.Inject(fault);
  });
}

std::string SimCluster::FaultPlanText() const { return s_->plan_text; }

std::string SimCluster::FaultCounts() const {
  std::string out = "rnic faults:";
  s_->world->WithFabric([&](sim::Fabric& f) {
    for (size_t k = 0; k < sim::kFaultKinds; ++k) {
      if (const uint64_t n = f.stats().faults[k]; n != 0)
        absl::StrAppend(&out, " ", std::string(sim::FaultKindName(static_cast<sim::FaultKind>(k))),
                        "=", n);
    }
    return 0;
  });
  absl::StrAppend(&out, "\npauses=", s_->pause_seq.load(), " partitions=", s_->partitions.load(),
                  "\n");
  s_->world->WithNet([&](sim::SimNetwork& n) {
    absl::StrAppend(&out, n.counters().ToString(), "\n");
    return 0;
  });
  return out;
}

uint64_t SimCluster::NowNs() const { return s_->world->clock()->NowNs(); }

std::string SimCluster::Finish(uint64_t timeout_ns) {
  if (s_->finished) return "Finish: already called";
  s_->finished = true;
  s_->StopFaults();  // no pause or partition holds a shutdown up
  std::string out;
  for (State::Host& hs : s_->hosts) {
    if (hs.engine == nullptr) continue;
    if (absl::Status st = hs.engine->Shutdown(timeout_ns); !st.ok())
      absl::StrAppend(&out, hs.addr, " shutdown: ", st.ToString(), "\n");
    hs.engine.reset();
  }
  s_->world->StopPump();
  s_->world->WithFabric([&](sim::Fabric& f) {
    for (const sim::Violation& v : f.violations())
      absl::StrAppend(&out, std::string(sim::ViolationKindName(v.kind)), ": ", v.message, "\n");
    for (const std::string& o : f.LiveObjects()) absl::StrAppend(&out, "left: ", o, "\n");
    return 0;
  });
  return out;
}

}  // namespace ferry::testing
