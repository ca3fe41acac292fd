// hal/tcp/tcp_control_net.h: the production ControlNet over TCP.
//
// Owns: one listening socket, the accepted (inbound) connections with their
// receive buffers, and a cache of outbound connections, one per peer address.
//
// Thread safety: Send and Poll may be called from different threads at once.
// Sends are serialised among themselves (one mutex over the outbound cache);
// Polls are serialised among themselves (one mutex over the inbound side).
// A Send never waits for a Poll and a Poll never waits for a Send.
//
// What must stay true:
// - Wire format (docs/hal.md): a frame is a 4-byte big-endian length L, then
//   L bytes: version (1 byte, kTcpFrameVersion), sender address length A
//   (1 byte, 1..kTcpMaxAddressBytes), A bytes of the sender's listen address,
//   and L - 2 - A payload bytes (0..kMaxMessageBytes).
// - Nothing is allocated from a length a peer announced before it was checked
//   against kTcpMaxFrameBytes: a peer announcing a longer (or malformed) frame
//   loses its connection and nothing of it is delivered.
// - A message is delivered whole or not at all. A peer that stays in the
//   middle of a frame longer than read_timeout_ns (counted from the frame's
//   first byte) loses its connection; so does one that closes mid-frame.
// - Every loop is bounded: at most max_inbound_connections accepted
//   connections (newcomers evict an idle one or wait in the backlog), at most
//   max_outbound_connections cached ones, at most max_ready_messages decoded and not yet returned,
//   at most kTcpMaxFrameBytes + kTcpReadChunkBytes buffered per connection.
// - Poll never blocks longer than the timeout it is given (it waits with
//   ppoll(2); every socket is non-blocking), and one slow peer never blocks
//   the listener. Send blocks at most connect_timeout_ns + io_timeout_ns.
// - Errors are kInvalidArgument for an oversized message or a malformed
//   address; kUnavailable when the peer cannot be reached (refused, connect
//   timeout, reset, closed, name not resolved), with the errno in the message.
#ifndef FERRY_HAL_TCP_TCP_CONTROL_NET_H_
#define FERRY_HAL_TCP_TCP_CONTROL_NET_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "hal/control_net.h"

namespace ferry::hal {

inline constexpr uint8_t kTcpFrameVersion = 1;
inline constexpr size_t kTcpLengthPrefixBytes = 4;
inline constexpr size_t kTcpMaxAddressBytes = 255;
// Largest legal value of the length prefix.
inline constexpr size_t kTcpMaxFrameBytes = 2 + kTcpMaxAddressBytes + kMaxMessageBytes;
// Bytes read from one connection per readiness event (fairness between peers).
inline constexpr size_t kTcpReadChunkBytes = 16 * 1024;
static_assert(kTcpMaxAddressBytes <= 255, "address length is one byte on the wire");
static_assert(kTcpMaxFrameBytes <= UINT32_MAX, "length prefix is 32 bits");

// A parsed "host:port" (IPv6 hosts are written "[addr]:port").
struct HostPort {
  std::string host;
  uint16_t port = 0;
};
// kInvalidArgument with the reason when `address` is malformed.
absl::StatusOr<HostPort> ParseHostPort(std::string_view address);
// Inverse of ParseHostPort.
std::string FormatHostPort(std::string_view host, uint16_t port);

struct TcpControlNetOptions {
  uint64_t connect_timeout_ns = 2'000'000'000;  // Send: TCP connect
  uint64_t io_timeout_ns = 2'000'000'000;       // Send: writing one frame
  uint64_t read_timeout_ns = 5'000'000'000;     // Poll: one inbound frame
  uint32_t max_inbound_connections = 256;
  uint32_t max_outbound_connections = 256;
  uint32_t max_ready_messages = 1024;
};

// Counters, for tests and operations.
struct TcpControlNetStats {
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t inbound_accepted = 0;
  uint64_t inbound_evicted_idle = 0;       // closed to admit a newcomer
  uint64_t inbound_dropped_oversize = 0;   // announced frame > kTcpMaxFrameBytes
  uint64_t inbound_dropped_malformed = 0;  // bad version, address, or length
  uint64_t inbound_dropped_stalled = 0;    // mid-frame longer than read timeout
  uint64_t inbound_closed_mid_frame = 0;   // EOF or error inside a frame
  uint64_t inbound_closed = 0;             // EOF or error between frames
  uint64_t outbound_reconnects = 0;        // cached connection found dead
  uint32_t inbound_open = 0;
  uint32_t outbound_open = 0;
};

class TcpControlNet final : public ControlNet {
 public:
  // Listens on `listen_address` ("host:port"; port 0 picks a free port, which
  // LocalAddress() then reports). A wildcard host ("0.0.0.0", "::") is
  // announced as such; receivers substitute the connection's source address.
  static absl::StatusOr<std::unique_ptr<TcpControlNet>> Create(
      std::string_view listen_address, const TcpControlNetOptions& options = {});

  ~TcpControlNet() override;
  TcpControlNet(const TcpControlNet&) = delete;
  TcpControlNet& operator=(const TcpControlNet&) = delete;

  std::string LocalAddress() const override { return local_address_; }
  absl::Status Send(std::string_view peer, absl::Span<const uint8_t> bytes) override;
  absl::StatusOr<std::optional<Message>> Poll(uint64_t timeout_ns) override;

  TcpControlNetStats stats() const;

 private:
  struct Inbound;
  struct Outbound;

  TcpControlNet(int listen_fd, std::string local_address, const TcpControlNetOptions& options);

  // Inbound side (recv_mu_).
  void AcceptNew(uint64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);
  // Id of the least recently active inbound connection with no bytes
  // pending (buffered or in the kernel), 0 if none.
  uint64_t FindIdleVictim() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);
  // Reads what is available on `conn`; false when the connection must close.
  bool ReadSome(Inbound& conn, uint64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);
  // Moves complete frames of `conn` to ready_; false on a protocol violation.
  bool DecodeFrames(Inbound& conn, uint64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);
  void CloseInbound(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);

  // Outbound side (send_mu_).
  absl::StatusOr<Outbound*> Connect(std::string_view peer, const HostPort& hp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  void CloseOutbound(const std::string& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);

  const int listen_fd_;
  const std::string local_address_;
  const TcpControlNetOptions options_;

  mutable base::Mutex recv_mu_;
  uint64_t next_inbound_id_ ABSL_GUARDED_BY(recv_mu_) = 1;
  absl::btree_map<uint64_t, std::unique_ptr<Inbound>> inbound_ ABSL_GUARDED_BY(recv_mu_);
  std::deque<Message> ready_ ABSL_GUARDED_BY(recv_mu_);

  mutable base::Mutex send_mu_;
  uint64_t send_seq_ ABSL_GUARDED_BY(send_mu_) = 0;  // LRU clock for the cache
  absl::btree_map<std::string, std::unique_ptr<Outbound>, std::less<>> outbound_
      ABSL_GUARDED_BY(send_mu_);

  mutable base::Mutex stats_mu_;
  TcpControlNetStats stats_ ABSL_GUARDED_BY(stats_mu_);
};

// The factory the engine uses.
inline absl::StatusOr<std::unique_ptr<ControlNet>> NewTcpControlNet(
    std::string_view listen_address, const TcpControlNetOptions& options = {}) {
  auto net = TcpControlNet::Create(listen_address, options);
  if (!net.ok()) return net.status();
  return std::unique_ptr<ControlNet>(std::move(*net));
}

}  // namespace ferry::hal

#endif  // FERRY_HAL_TCP_TCP_CONTROL_NET_H_
