// engine/engine.cc: ferry::Engine::Create (include/ferry/engine.h).
//
// Owns: the construction-time checks of config and env. What must stay true:
// nothing touches a device before both passed. The engine body (contexts,
// endpoints, workers, runtimes) is built by the follow-up of issue 4; until
// then Create stops with kUnimplemented after validating, so no caller can
// obtain a half-built engine.
#include "ferry/engine.h"

#include <utility>

#include "base/status_macros.h"

namespace ferry {

// The engine body; empty until the lifecycle work lands (see file comment).
class EngineImpl {};

Engine::Engine(std::unique_ptr<EngineImpl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineConfig& config,
                                                       const EngineEnv& env) {
  FERRY_RETURN_IF_ERROR(config.Validate());
  if (env.verbs == nullptr) return absl::InvalidArgumentError("EngineEnv.verbs is null");
  if (env.control_net == nullptr)
    return absl::InvalidArgumentError("EngineEnv.control_net is null");
  if (env.clock == nullptr) return absl::InvalidArgumentError("EngineEnv.clock is null");
  if (env.entropy == nullptr) return absl::InvalidArgumentError("EngineEnv.entropy is null");
  return absl::UnimplementedError("Engine: contexts/endpoints/workers not built yet (issue 4)");
}

}  // namespace ferry
