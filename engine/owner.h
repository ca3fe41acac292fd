// engine/owner.h: the endpoint key and its owner worker (C5).
//
// Owns: EndpointKey (local NIC, peer NIC path "host:port@nic") and
// OwnerForKey: owner = fnv1a64(local NIC, 8 zero bytes, peer NIC path)
// mod workers. What must stay true: the owner of a key is a pure function of
// the key and the worker count (same value in every process, build and run:
// base/fnv1a.h, docs/design.md section 7); the separator keeps ("ab", "c") and
// ("a", "bc") apart. This is the one owner function: Submit, the listener
// and the workers all route by it.
//
// Thread safety: pure values and functions.
#ifndef FERRY_ENGINE_OWNER_H_
#define FERRY_ENGINE_OWNER_H_

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/check.h"
#include "base/fnv1a.h"

namespace ferry::engine {

struct EndpointKey {
  std::string local_nic;      // our device name, e.g. "mlx5_0"
  std::string peer_nic_path;  // "host:port@nic" of the peer's device
  friend bool operator==(const EndpointKey&, const EndpointKey&) = default;
  friend std::strong_ordering operator<=>(const EndpointKey&, const EndpointKey&) = default;
};

// An EndpointKey by reference (a lookup without copying the strings;
// EndpointStore's index hashes and compares both alike).
struct EndpointKeyView {
  std::string_view local_nic;
  std::string_view peer_nic_path;
};

// An EndpointKeyView with its EndpointKeyHash already computed (Submit
// computes it once per request to choose the owner; the owner's endpoint
// store lookup reuses it instead of hashing the strings again).
struct HashedEndpointKeyView {
  std::string_view local_nic;
  std::string_view peer_nic_path;
  uint64_t hash = 0;  // EndpointKeyHash(local_nic, peer_nic_path)
};

// fnv1a64 over local NIC bytes, a u64 0 separator, peer NIC path bytes.
inline uint64_t EndpointKeyHash(std::string_view local_nic, std::string_view peer_nic_path) {
  uint64_t h = base::kFnv1a64Offset;
  h = base::Fnv1a64Update(h, reinterpret_cast<const unsigned char*>(local_nic.data()),
                          local_nic.size());
  h = base::Fnv1a64UpdateU64(h, 0);
  h = base::Fnv1a64Update(h, reinterpret_cast<const unsigned char*>(peer_nic_path.data()),
                          peer_nic_path.size());
  return h;
}

// The worker that owns every lifecycle step of the key's endpoint.
inline uint32_t OwnerForKey(const EndpointKey& key, uint32_t workers) {
  FERRY_CHECK_GT(workers, 0u);
  return static_cast<uint32_t>(EndpointKeyHash(key.local_nic, key.peer_nic_path) % workers);
}

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_OWNER_H_
