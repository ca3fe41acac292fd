// engine/worker_internal.h: constants and small helpers shared by the
// worker's source files (worker.cc and worker_*.cc, one job each); private
// to engine/worker*.
//
// What must stay true: everything here is a constant or a pure function.
#ifndef FERRY_ENGINE_WORKER_INTERNAL_H_
#define FERRY_ENGINE_WORKER_INTERNAL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/endpoint.h"
#include "engine/handshake.h"
#include "hal/types.h"

namespace ferry::engine::worker_internal {

constexpr uint32_t kPollBatch = 32;
constexpr uint32_t kPollRoundsMax = 64;
constexpr size_t kInboxDrainMax = 256;
constexpr uint32_t kPostsPerStepMax = 1024;
constexpr size_t kReplacedPerKeyMax = 8;
constexpr size_t kReplacedKeysMax = 4096;
constexpr uint64_t kParkedRecheckNs = 100'000;
// The ERROR answer to a REQ that named an earlier incarnation of its target.
constexpr std::string_view kTargetRestarted = "target_restarted";
// The ERROR answer to a REQ whose QP count is not the target's
// qps_per_endpoint: the two sides pair QPs one to one, so no endpoint
// between them can pair until one is reconfigured.
constexpr std::string_view kQpCountMismatch = "qp_count";

inline std::string AddressOf(std::string_view peer_path) {
  return std::string(peer_path.substr(0, peer_path.find('@')));
}
inline std::string NicOf(std::string_view peer_path) {
  const size_t at = peer_path.find('@');
  return at == std::string_view::npos ? std::string() : std::string(peer_path.substr(at + 1));
}
// Not retried: the slice fails, the endpoint retires, the rail is not
// penalised (docs/design.md section 4, "Errors, retries, rails").
inline bool NonRetryable(hal::WcStatus s) {
  return s == hal::WcStatus::kRemAccessErr || s == hal::WcStatus::kLocProtErr ||
         s == hal::WcStatus::kRemInvReqErr || s == hal::WcStatus::kLocLenErr;
}
// READs in flight a QP is given: the configured bound within the device's
// limit (a device reporting 0 still gets 1, what verbs needs for any READ).
inline uint8_t RdAtomic(uint8_t configured, uint32_t device_max) {
  return static_cast<uint8_t>(std::max<uint32_t>(1, std::min<uint32_t>(configured, device_max)));
}
inline PeerInfo PeerFrom(const HandshakeMessage& m) {
  PeerInfo p;
  p.incarnation = m.incarnation;
  p.generation = static_cast<uint32_t>(m.generation);
  for (const HandshakeQp& q : m.qps) {
    p.qpns.push_back(q.qpn);
    p.psns.push_back(q.start_psn);
  }
  p.gid = m.gid;
  p.lid = m.lid;
  p.mtu = m.mtu;
  p.rd_atomic = m.rd_atomic;
  return p;
}

}  // namespace ferry::engine::worker_internal

#endif  // FERRY_ENGINE_WORKER_INTERNAL_H_
