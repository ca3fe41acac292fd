// include/ferry/config.h: the engine's configuration and its validation.
//
// Owns: ferry::EngineConfig (every knob with its documented default) and
// EngineConfig::Validate(), which Engine::Create calls before touching any
// device (docs/design.md C8: a config that breaks an invariant is rejected at
// construction, with a message naming the knob).
//
// Thread safety: a plain value type; Validate() is const and reentrant.
// What must stay true:
// - Every default passes Validate() (a unit test pins this).
// - Validate() rejects every config for which the engine could not keep its
//   contracts: a QP timeout of 0 (the RNIC would wait forever and no CQE
//   would ever be evidence, C1), WR depth x QPs per endpoint x endpoints per
//   CQ above the CQE limit (a fully loaded CQ could overrun, C4), zero
//   workers, zero capacities, bounds that contradict each other.
// - Units are in the names (_ns, _bytes); counts are plain integers.
#ifndef FERRY_INCLUDE_FERRY_CONFIG_H_
#define FERRY_INCLUDE_FERRY_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ferry/export.h"

namespace ferry {

// Hard upper bounds that no config may exceed (they size fixed fields such as
// the 16-bit attempt counter of a slice and the QPN list of a handshake).
inline constexpr uint32_t kWorkersMax = 256;
inline constexpr uint32_t kQpsPerEndpointMax = 64;  // == handshake QPN list bound
inline constexpr uint32_t kSlicesPerTaskMax = 1u << 16;
inline constexpr uint32_t kSliceAttemptsLimit = 1u << 15;
inline constexpr uint32_t kBatchCapacityMax = 1u << 20;
inline constexpr uint32_t kNotifyRecvSlotsMax = 64;
inline constexpr uint32_t kInlineBytesMax = 1024;  // inline_bytes_max's bound

// How an owner thread of the production runtime waits when it has nothing
// to do (engine/runtime_threads.h; docs/operations.md 2.2).
enum class OwnerPollMode : uint8_t {
  // Arm completion events and sleep at once: the least CPU (shared hosts).
  kBlocking = 0,
  // After each step that found work, keep stepping (polling the CQs and the
  // inbox) for up to owner_spin_ns_max before sleeping; a spin that found
  // nothing halves the next spin (down to owner_spin_ns_max / 16), one that
  // found work doubles it (up to owner_spin_ns_max). The default.
  kAdaptive = 1,
  // Never sleep while running: a dedicated core per owner thread.
  kBusyPoll = 2,
};

// Who may speak to this engine's control listener (docs/security.md).
struct PeerSecret {
  std::string identity;  // the peer's AuthConfig::identity
  std::string secret;    // >= kAuthSecretBytesMin bytes
};
inline constexpr size_t kAuthSecretBytesMin = 32;

struct AuthConfig {
  enum class Mode : uint8_t {
    // Every control message is accepted (only the allowlist, when set, is
    // checked). The default, because there is no secret Ferry could
    // default to: a deployment whose listener is reachable from outside a
    // trusted network must turn kSharedSecret on (docs/security.md).
    kOff = 0,
    // Mutual challenge-response (HMAC-SHA-256 over fresh nonces from both
    // sides), then every control message carries an HMAC under a session
    // key and a sequence number: a peer that cannot prove the secret gets
    // no descriptor, no rkey, no endpoint and no QP.
    kSharedSecret = 1,
  };
  Mode mode = Mode::kOff;
  // The key of every peer without an entry in peer_secrets. May be empty
  // when peer_secrets names every peer; else >= kAuthSecretBytesMin bytes.
  std::string secret;
  // Per-peer keys: a peer proves the identity it claims only with its own
  // key, so a per-peer exposure set (MemoryOptions::peers) names a proven
  // peer. Under the shared `secret` alone, any holder of it can claim any
  // identity.
  std::vector<PeerSecret> peer_secrets;
  // This engine's identity (printable ASCII, no space, <= 128 bytes); empty
  // = its control address "host:port".
  std::string identity;
  // Source hosts (as the transport sees them: TCP peer IP, e.g.
  // "10.0.0.7", "::1") whose control messages are read; empty = any. In
  // every mode; a message from another host is dropped and counted
  // before anything decodes it.
  std::vector<std::string> allowlist;
  uint32_t sessions_max = 1024;  // authenticated sessions held (LRU beyond)
  uint32_t pending_max = 256;    // challenges outstanding; payloads queued per peer
};

struct FERRY_EXPORT EngineConfig {
  // ------------------------------------------------------------- devices
  // RNIC names to use ("mlx5_0", "rxe0", "sim0"); empty = every device the
  // Verbs port lists.
  std::vector<std::string> devices;
  uint8_t port_num = 1;  // the port used on every device
  int gid_index = -1;    // -1 = choose automatically, else 0..gid_tbl_len-1

  // ------------------------------------------------------------- threads
  // Owner workers. Endpoints and CQs are owned by one worker:
  // owner = fnv1a64(local NIC, peer NIC path) mod workers.
  uint32_t workers = 2;
  // CQs each worker owns per device context (>= 1, so every owner has a CQ
  // on every context). An owner's endpoints are spread over its CQs: a new
  // endpoint's QPs go on the CQ whose ledger tracks the fewest QPs.
  uint32_t cqs_per_worker = 1;

  // ------------------------------------------------------------- queues
  uint32_t qps_per_endpoint = 2;  // data QPs per endpoint (1..kQpsPerEndpointMax)
  uint32_t wr_depth = 64;         // WRs outstanding per QP (max_send_wr asked)
  // WRITE slices and notification SENDs of at most this many bytes are
  // posted inline (IBV_SEND_INLINE: post_send copies the bytes into the
  // WQE, so the RNIC never reads the buffer; docs/design.md section 3).
  // Asked as max_inline_data at QP create; a device that refuses it gets
  // QPs without inline. 0 = off; <= kInlineBytesMax.
  uint32_t inline_bytes_max = 64;
  uint32_t cqe_limit = 4096;  // CQEs asked per CQ (the quota ledger's size)
  // Endpoints per owner per device context (the owner's store capacity).
  // Endpoints on one CQ = ceil(endpoint_store_capacity / cqs_per_worker).
  uint32_t endpoint_store_capacity = 32;
  // Notifications (Engine::SendNotify, Submit with NotifyOptions,
  // PollNotifies; docs/design.md section 4, "Notifications"): receive WRs
  // each endpoint QP keeps posted (0..kNotifyRecvSlotsMax). 0 = off: no
  // receive WR is posted, SendNotify is refused, and the engine behaves as
  // before notifications existed. Each receive WR holds one CQE of quota.
  uint32_t notify_recv_slots = 0;
  // CQE quota that retiring (zombie) QPs may hold on one CQ before the owner
  // escalates (docs/design.md section 4, "Zombies"). <= cqe_limit.
  uint32_t zombie_quota_max = 1024;

  // ------------------------------------------------------------- requests
  uint64_t slice_size_bytes = 64 * 1024;    // a request is cut in slices of this size
  uint64_t request_bytes_max = 1ull << 30;  // larger requests are rejected (C8)
  uint32_t batch_capacity_max = 4096;       // most requests one batch may hold

  // ------------------------------------------------------------- retries
  // Retries of one slice after a retryable transport error (RETRY_EXC_ERR
  // and similar), each on a fresh endpoint.
  uint32_t slice_retries = 4;
  // Hard cap on attempts of one slice, counting reposts that cost no retry
  // budget (flushes on a QP Ferry itself moved to ERR). >= slice_retries + 1.
  uint32_t slice_attempts_max = 16;
  // A task not terminal this long after submit is timed out (TIMEOUT is
  // published only with evidence, C1; see docs/contract.md).
  uint64_t slice_timeout_ns = 5'000'000'000;

  // ------------------------------------------------------------- handshake
  uint64_t handshake_timeout_ns = 1'000'000'000;  // one REQ attempt
  uint32_t handshake_retries = 3;                 // REQ resends before giving up

  // ------------------------------------------------------------- retire
  uint64_t drain_timeout_ns = 1'000'000'000;        // wait for flushes before destroy
  uint64_t destroy_backoff_ns_min = 1'000'000;      // first retry of a failed destroy
  uint64_t destroy_backoff_ns_max = 1'000'000'000;  // cap of the doubling backoff
  // Last resort, off by default: after destroy_give_up_ns of failing
  // destroys, close and re-open the device context.
  bool reset_context_on_destroy_give_up = false;
  uint64_t destroy_give_up_ns = 60'000'000'000;

  // ------------------------------------------------------------- rails
  uint32_t rail_error_threshold = 3;  // endpoint failures before a pause
  uint64_t rail_error_window_ns = 10'000'000'000;
  uint64_t rail_cooldown_ns = 1'000'000'000;  // first pause, doubles per cycle
  uint64_t rail_cooldown_ns_max = 300'000'000'000;

  // ------------------------------------------------------------- QP attributes
  // Local ACK timeout exponent: 4.096 us * 2^qp_timeout_exp (14 = ~67 ms).
  // 0 means "wait forever" in verbs and is rejected.
  uint8_t qp_timeout_exp = 14;
  // Transport retries (0..7). On rxe (Soft-RoCE) 7 means "retry forever"
  // (rxe_comp.c never counts it down): a QP whose peer is gone, e.g. a
  // restarted process that reused the QPN, then never completes in error
  // and only slice_timeout_ns ends its task (TIMEOUT); use 6 or less on rxe
  // (tests/lib/sim_cluster_test.cc RxeRetryCnt7NeverGivesUpOnARestartedPeer).
  uint8_t qp_retries = 7;
  // RNR retries (0..7, 7 = infinite). Only SENDs meet RNR: with
  // notify_recv_slots > 0 it must be < 7, so a notification to a peer that
  // posts no receive WRs ends in RNR_RETRY_EXC_ERR (FAILED), never waits
  // forever.
  uint8_t qp_rnr_retries = 7;
  // READs one QP may have in flight (1..255; verbs max_rd_atomic, and the
  // max_dest_rd_atomic it offers its peer). Each endpoint uses the least of
  // this, its device's limits and what the peer offered in the handshake.
  // At 1, every READ on a QP (and every WRITE posted behind it) waits a
  // round trip for the READ before it; perftest uses the device's limit,
  // Mooncake TENT 16.
  uint8_t qp_rd_atomic_max = 16;

  // ------------------------------------------------------------- security
  AuthConfig auth;

  // ------------------------------------------------------------- runtime
  // Only the production threaded runtime reads these (a stepped engine has
  // no threads). See OwnerPollMode.
  OwnerPollMode owner_poll_mode = OwnerPollMode::kAdaptive;
  uint64_t owner_spin_ns_max = 50'000;  // adaptive spin bound (> 0 unless blocking)
  // A blocking helper (WaitBatch, WaitNotifies, OpenSegment, Shutdown)
  // spins up to this long on the engine's progress before it sleeps (0:
  // sleep at once; an adaptive budget between 1/16 of it and all of it);
  // with user_thread_steps it steps the owners meanwhile. 500 us
  // covers a batch-1 round trip on Soft-RoCE in a VM (docs/operations.md
  // 2.3: 20 and 200 us did not); on a shared host use 0 with kBlocking.
  uint64_t user_spin_ns = 500'000;
  // A user thread may run an owner's step itself, under the owner's step
  // lock, instead of handing the work to the owner thread: Submit steps
  // the owners it pushed to (posting at once), and a blocking helper's
  // spin (user_spin_ns) steps the owners (polling their CQs). A step never
  // runs on two threads at once, so C5 holds; an owner thread busy
  // stepping is woken as before. Saves the two thread wake-ups of a batch-1
  // operation (docs/operations.md 2.3). false: only owner threads step.
  bool user_thread_steps = true;

  // Returns OK, or kInvalidArgument naming the first knob that breaks an
  // invariant (see the file comment). Pure: no device is consulted; limits
  // of the device (max_qp_wr, max_cqe) are checked at bring-up.
  absl::Status Validate() const;

  // ceil(endpoint_store_capacity / cqs_per_worker): endpoints whose QPs may
  // share one CQ.
  uint64_t EndpointsPerCq() const;
};

}  // namespace ferry

#endif  // FERRY_INCLUDE_FERRY_CONFIG_H_
