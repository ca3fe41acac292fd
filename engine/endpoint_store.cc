// engine/endpoint_store.cc: non-template helpers of the endpoint store.
//
// What must stay true: the printed form of a key is stable (used in errors
// and traces).
#include "engine/endpoint_store.h"

#include <string>

namespace ferry::engine {

std::string EndpointKeyString(const EndpointKey& key) {
  return absl::StrFormat("(%s -> %s)", key.local_nic, key.peer_nic_path);
}

}  // namespace ferry::engine
