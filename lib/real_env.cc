// lib/real_env.cc: Engine::Create(config, RealEnvOptions), the production
// composition root: libibverbs, the TCP control network, the steady clock
// and OS entropy, owned by the engine they serve (engine/env_owner.h).
//
// What must stay true: every check here names what it checked and what it
// found, and fails before the engine touches a device (nothing to undo);
// the environment is destroyed only after the engine's teardown.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/env_owner.h"
#include "ferry/engine.h"
#include "hal/os/os_entropy.h"
#include "hal/os/steady_clock.h"
#include "hal/tcp/tcp_control_net.h"
#include "hal/verbs.h"
#ifdef FERRY_HAVE_IBVERBS
#include "hal/ibverbs/ibverbs.h"
#endif

namespace ferry {
#ifdef FERRY_HAVE_IBVERBS
namespace {

struct RealEnvOwner final : EngineEnvOwner {
  std::unique_ptr<hal::Verbs> verbs;
  std::unique_ptr<hal::TcpControlNet> net;
  hal::SteadyClock clock;
  hal::OsEntropy entropy;
};

// The devices the engine will open: config.devices, each of which must
// exist, or every device when none is named. kNotFound names what is there.
absl::StatusOr<std::vector<std::string>> ChooseDevices(hal::Verbs& verbs,
                                                       const EngineConfig& config) {
  FERRY_ASSIGN_OR_RETURN(std::vector<hal::DeviceInfo> have, verbs.ListDevices());
  if (have.empty()) return absl::NotFoundError("no RDMA device (the device list is empty)");
  std::vector<std::string> names;
  for (const hal::DeviceInfo& d : have) names.push_back(d.name);
  if (config.devices.empty()) return names;
  for (const std::string& want : config.devices)
    if (std::find(names.begin(), names.end(), want) == names.end())
      return absl::NotFoundError(
          absl::StrCat("device ", want, " not found; devices: ", absl::StrJoin(names, ", ")));
  return config.devices;
}

// kUnavailable unless port `port` of `name` is ACTIVE.
absl::Status CheckPortActive(hal::Verbs& verbs, const std::string& name, uint8_t port) {
  FERRY_ASSIGN_OR_RETURN(hal::ContextHandle ctx, verbs.OpenDevice(name));
  absl::StatusOr<hal::PortAttr> attr = verbs.QueryPort(ctx, port);
  absl::Status closed = verbs.CloseDevice(ctx);
  if (!attr.ok()) return attr.status();
  if (!closed.ok()) return closed;
  if (attr->state != hal::PortState::kActive)
    return absl::UnavailableError(absl::StrCat("port ", port, " of ", name, " is ",
                                               std::string(hal::PortStateName(attr->state)),
                                               " (not ACTIVE)"));
  return absl::OkStatus();
}

}  // namespace
#endif

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineConfig& config,
                                                       const RealEnvOptions& real) {
#ifndef FERRY_HAVE_IBVERBS
  (void)config;
  (void)real;
  return absl::UnimplementedError("libferry was built without libibverbs (-Dverbs=disabled)");
#else
  FERRY_RETURN_IF_ERROR(config.Validate());
  auto owner = std::make_unique<RealEnvOwner>();
  owner->verbs = hal::NewIbverbsVerbs();
  FERRY_ASSIGN_OR_RETURN(std::vector<std::string> devices, ChooseDevices(*owner->verbs, config));
  for (const std::string& d : devices)
    FERRY_RETURN_IF_ERROR(CheckPortActive(*owner->verbs, d, config.port_num));
  absl::StatusOr<std::unique_ptr<hal::TcpControlNet>> net = hal::TcpControlNet::Create(real.listen);
  if (!net.ok())
    return absl::Status(net.status().code() == absl::StatusCode::kInvalidArgument
                            ? absl::StatusCode::kInvalidArgument
                            : absl::StatusCode::kUnavailable,
                        absl::StrCat("listen ", real.listen, ": ", net.status().message()));
  owner->net = std::move(*net);
  EngineConfig chosen = config;
  chosen.devices = devices;
  const EngineEnv env{owner->verbs.get(), owner->net.get(), &owner->clock, &owner->entropy};
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Create(chosen, env));
  engine->env_owner_ = std::move(owner);
  return engine;
#endif
}

}  // namespace ferry
