// tests/property/prop_env.h: the environment knobs of the property suite.
//
// Owns: ApplyEnvMutation, which turns on the base::Mutation named by
// FERRY_MUTATION (e.g. "engine_c4_double_release") in a test's own
// base::Mutations. What must stay true: it only works in binaries compiled
// with FERRY_MUTATIONS=1 (they link the *_mut libraries); an unknown name is
// a test setup error and aborts loudly rather than silently testing nothing.
// RC_PARAMS (seed, max_success, reproduce) is read by RapidCheck itself.
//
// Thread safety: reads the environment; call from the test thread only.
#ifndef FERRY_TESTS_PROPERTY_PROP_ENV_H_
#define FERRY_TESTS_PROPERTY_PROP_ENV_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "base/check.h"
#include "base/mutation.h"

namespace ferry::property {

// The mutation named by FERRY_MUTATION, if set. Aborts on an unknown name
// or when the binary was built without mutation switches.
inline bool ApplyEnvMutation(base::Mutations& m) {
  const char* name = std::getenv("FERRY_MUTATION");
  if (name == nullptr || *name == 0) return false;
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  for (uint32_t i = 0; i < static_cast<uint32_t>(base::Mutation::kCount); ++i) {
    const auto mu = static_cast<base::Mutation>(i);
    if (base::MutationName(mu) == std::string_view(name)) {
      m.Enable(mu);
      return true;
    }
  }
  std::fprintf(stderr, "FERRY_MUTATION=%s: no such mutation\n", name);
#else
  (void)m;
  std::fprintf(stderr, "FERRY_MUTATION=%s: binary built without mutation switches\n", name);
#endif
  FERRY_CHECK(false);
  return false;
}

}  // namespace ferry::property

#endif  // FERRY_TESTS_PROPERTY_PROP_ENV_H_
