// tests/engine/sim/two_engines.h: the two-engine simulated world for the sim
// scenario tests. The world itself lives in sim/world/two_engines.h (shared
// with ferry-sim); this header only brings its names into the tests'
// namespace so scenarios keep writing TwoEngines, ScenarioConfig, kBufBytes.
//
// Thread safety: none (single-threaded simulation).
// What must stay true: test binaries link simworld_mut_dep (the *_mut
// variant), never simworld_dep.
#ifndef FERRY_TESTS_ENGINE_SIM_TWO_ENGINES_H_
#define FERRY_TESTS_ENGINE_SIM_TWO_ENGINES_H_

#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "engine/owner.h"
#include "sim/world/two_engines.h"

namespace ferry::engine::testing {

using simworld::HostState;
using simworld::kBufBytes;
using simworld::ScenarioConfig;
using simworld::SlotActor;
using simworld::TwoEngines;

}  // namespace ferry::engine::testing

#endif  // FERRY_TESTS_ENGINE_SIM_TWO_ENGINES_H_
