// hal/control_net.h: the ControlNet port: the out-of-band channel for
// handshakes and segment descriptors, messages between engines addressed by
// "host:port".
//
// Production: TCP (hal/tcp/tcp_control_net.h). Sim: sim/net/sim_network.h
// (delay, loss, duplication, reordering, partition, paused peer, restart).
//
// Model: unreliable, unordered datagrams between endpoints addressed by
// their listen address. A message is delivered whole or not at all; the
// protocol above (engine handshake) resends what it needs. Each message
// names its sender's listen address so the receiver can reply.
//
// Thread safety: Send and Poll may be called from different threads.
// What must stay true: messages longer than kMaxMessageBytes are rejected
// with kInvalidArgument on send and never delivered on receive; Poll never
// blocks longer than the timeout it is given.
#ifndef FERRY_HAL_CONTROL_NET_H_
#define FERRY_HAL_CONTROL_NET_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ferry::hal {

inline constexpr size_t kMaxMessageBytes = 64 * 1024;

struct Message {
  std::string from;  // sender's listen address, "host:port" (as it claims it)
  std::vector<uint8_t> bytes;
  // The host the transport itself saw the message come from (TCP: the
  // connection's peer IP; sim: the sending endpoint's host), which a sender
  // cannot choose by what it writes. Empty when the transport cannot tell.
  // An allowlist (engine/auth/auth_net.h) checks this, never `from`.
  std::string source_host;
  // The peer identity an authenticating decorator (engine/auth/auth_net.h)
  // verified for this message; empty when the message was not
  // authenticated.
  std::string identity;
};

class ControlNet {
 public:
  virtual ~ControlNet() = default;

  // The address peers use to reach this endpoint ("host:port").
  virtual std::string LocalAddress() const = 0;

  // Sends one message to `peer`. May block up to the implementation's connect
  // timeout (TCP); never blocks in the simulator. kInvalidArgument for an
  // oversized message or malformed address; kUnavailable when the peer
  // cannot be reached (the caller may retry).
  virtual absl::Status Send(std::string_view peer, absl::Span<const uint8_t> bytes) = 0;

  // Returns the next received message, waiting up to timeout_ns (0 = do not
  // wait); std::nullopt when none arrived in time.
  virtual absl::StatusOr<std::optional<Message>> Poll(uint64_t timeout_ns) = 0;
};

}  // namespace ferry::hal

#endif  // FERRY_HAL_CONTROL_NET_H_
