// engine/env_owner.h: EngineEnvOwner, what an Engine made on a built-in
// environment keeps alive (lib/real_env.cc derives from it).
//
// What must stay true: the owner is destroyed after the engine's teardown
// (ferry::Engine declares env_owner_ before impl_), so every port outlives
// every call the engine makes on it.
#ifndef FERRY_ENGINE_ENV_OWNER_H_
#define FERRY_ENGINE_ENV_OWNER_H_

namespace ferry {

struct EngineEnvOwner {
  virtual ~EngineEnvOwner() = default;
};

}  // namespace ferry

#endif  // FERRY_ENGINE_ENV_OWNER_H_
