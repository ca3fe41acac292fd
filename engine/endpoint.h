// engine/endpoint.h: one connection to a peer NIC: N data RC QPs with their
// FIFOs of posted WRs, the handshake state and the retire ladder
// (docs/design.md section 4).
//
// Owns: the endpoint's QPs (OwnedQp, from the moment CreateQp returned), the
// per-QP FIFO of posted WR slots and its depth, the identity (key,
// generation, starting PSNs from hal::Entropy, the peer's incarnation,
// generation and QPNs once known), and the retire state.
//
// Thread safety: none. An endpoint is touched only by its owner worker
// (C5); every method here runs on it.
//
// What must stay true:
// - States only move forward: CONNECTING -> READY -> RETIRING -> DESTROYED
//   (CONNECTING -> RETIRING too). A retired endpoint is never reused; a
//   reconnect makes a fresh endpoint with a higher generation.
// - Nothing is posted unless the endpoint is READY (the peer is at RTR).
// - A QP with posted WRs is never moved to RESET; QPs that never left
//   RESET/INIT are destroyed directly, the others are moved to ERR first.
// - A QP's FIFO holds exactly the WRs posted on it that have no evidence
//   yet; its size never exceeds the depth (wr_depth). Its `recv` queue
//   does the same for receive WRs; a retiring QP is destroyed once both
//   drained (or the drain deadline passed).
// - A QP whose destroy failed keeps its handle, its FIFO and its quota
//   (C4); the destroy is retried with capped doubling backoff.
#ifndef FERRY_ENGINE_ENDPOINT_H_
#define FERRY_ENGINE_ENDPOINT_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/ring_queue.h"
#include "engine/cq_quota.h"
#include "engine/handles.h"
#include "engine/windows.h"
#include "hal/entropy.h"
#include "hal/types.h"
#include "hal/verbs.h"

namespace ferry::engine {

enum class EndpointState : uint8_t { kConnecting = 0, kReady = 1, kRetiring = 2, kDestroyed = 3 };
std::string_view EndpointStateName(EndpointState s);

// Why an endpoint retires (for the pending report and the trace).
enum class RetireReason : uint8_t {
  kNone = 0,
  kHandshakeFailed,
  kErrorCompletion,
  kSuperseded,  // the peer reconnected (accept table) or we reconnect
  kEvicted,
  kTimeout,
  kShutdown,
  kQpFatal,
  kCqError,
};
std::string_view RetireReasonName(RetireReason r);

// The peer's side of a connection, from its REQ or REP.
struct PeerInfo {
  uint64_t incarnation = 0;
  uint32_t generation = 0;
  std::vector<uint32_t> qpns;
  std::vector<uint32_t> psns;
  hal::Gid gid;
  uint16_t lid = 0;
  hal::Mtu mtu = hal::Mtu::k1024;
  uint8_t rd_atomic = 1;  // READs its QPs accept in flight (their max_dest_rd_atomic)
  friend bool operator==(const PeerInfo&, const PeerInfo&) = default;
};

// Local attributes every QP of an endpoint needs.
struct QpParams {
  hal::PdHandle pd;
  hal::CqHandle cq;
  uint32_t wr_depth = 0;
  uint32_t recv_depth = 1;       // max_recv_wr asked (notify_recv_slots, at least 1)
  uint32_t max_inline_data = 0;  // asked; a QP the device refuses it is made without
  uint8_t port_num = 1;
  uint8_t sgid_index = 0;
  hal::Mtu local_mtu = hal::Mtu::k1024;
  uint8_t timeout_exp = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  // READs in flight: accepted as responder (max_dest_rd_atomic, offered to
  // the peer) and issued as requester (max_rd_atomic, also at most what the
  // peer offered). Both >= 1 and within the device's limits.
  uint8_t rd_atomic_dest = 1;
  uint8_t rd_atomic_init = 1;
};

struct DataQp {
  OwnedQp qp;
  uint64_t uid = 0;  // worker-unique id of this QP object (never reused)
  uint32_t qpn = 0;
  uint32_t sq_psn = 0;                        // our starting PSN (random)
  uint32_t max_inline_data = 0;               // as the device reported it
  hal::QpState state = hal::QpState::kReset;  // as we last moved it
  // The fields above and the next two are read for every chain and CQE:
  // in the first two lines (with many endpoints each line is a cold miss
  // per slice; docs/operations.md 3.2).
  CqQuota::QpHint quota_hint;      // the worker's ledger lookups of this QP
  base::RingQueue<uint32_t> fifo;  // slots of posted WRs, in post order
  // Success CQEs of the poll batch being handled whose quota the worker
  // has not returned yet (it returns them per QP at the batch's end, or
  // before anything else touches the ledger); 0 between batches.
  uint32_t cqes_to_release = 0;
  hal::QpHandle release_qp;  // the handle they were posted on (the ledger's key)
  // Posted receive WRs in post order: (notification slot, receive seq).
  // (A RingQueue: an empty std::deque allocates its map and a 512-byte
  // chunk, about 600 bytes of heap per QP that never posts a receive.)
  base::RingQueue<std::pair<uint32_t, uint32_t>> recv;
  uint32_t recv_seq = 0;   // of the next receive WR posted on this QP
  bool destroyed = false;  // DestroyQp returned OK
  bool released = false;   // empty poll after destroy done
  uint32_t destroy_failures = 0;
  uint64_t first_destroy_fail_ns = 0;  // when the first destroy failed
  uint64_t next_destroy_ns = 0;
  uint64_t backoff_ns = 0;
};

class Endpoint {
 public:
  // Creates `qps` QPs in RESET and moves them to INIT. On failure the error
  // is returned and, if any QP was created, the half-built endpoint is
  // handed back in `*leftover` (never destroyed here: a destroy can fail,
  // so the owner retires it through the retire ladder, which retries).
  static absl::StatusOr<std::unique_ptr<Endpoint>> Create(
      hal::Verbs* verbs, HandleLedger* ledger, hal::Entropy* entropy, const QpParams& params,
      uint32_t qps, uint32_t context, std::string peer_path, uint32_t generation,
      uint64_t* next_qp_uid, std::unique_ptr<Endpoint>* leftover);

  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  ~Endpoint();

  // Makes `*counter` count this endpoint while it is CONNECTING: +1 now
  // (it must be CONNECTING), -1 when it leaves CONNECTING (MarkReady,
  // BeginRetire) or is destroyed in it. The owner's count of endpoints in
  // the handshake, so its step visits them only while there are any
  // (docs/operations.md 3.2). Once per endpoint.
  void CountConnectingIn(uint32_t* counter);

  // Moves every QP to RTR towards `peer` (records it) then, if `to_rts`,
  // to RTS. The path MTU is the minimum of both sides.
  absl::Status ToRtr(const PeerInfo& peer);
  absl::Status ToRts();

  // ---- state (forward only; CHECKed)
  EndpointState state() const { return state_; }
  void MarkReady();
  // Starts the retire ladder: QPs that reached RTR/RTS go to ERR (a failed
  // modify leaves the QP to be destroyed anyway after the drain), QPs in
  // RESET/INIT are destroyed at once. Idempotent.
  void BeginRetire(RetireReason why, uint64_t now_ns, uint64_t drain_timeout_ns);
  // One retire step: destroys QPs whose FIFO drained or whose drain
  // deadline passed, retrying failed destroys with capped backoff. Returns
  // true when every QP is destroyed (released flags are the worker's job).
  bool RetireStep(uint64_t now_ns, uint64_t backoff_min_ns, uint64_t backoff_max_ns,
                  bool mutation_skip_destroy);
  void MarkDestroyed();
  // Escalation (zombie cap, CQ_ERR): stop waiting for flushes; QPs are
  // destroyed at the next RetireStep. No-op unless RETIRING.
  void ExpireDrain(uint64_t now_ns) {
    if (state_ == EndpointState::kRetiring)
      drain_deadline_ns_ = std::min(drain_deadline_ns_, now_ns);
  }
  RetireReason retire_reason() const { return retire_reason_; }
  uint64_t drain_deadline_ns() const { return drain_deadline_ns_; }
  // Earliest time RetireStep has something to do (destroy retry/drain end):
  // its exact rule, so an owner asleep on it destroys on time. A QP that
  // never connected waits for no drain (its receive WRs, notifications,
  // may be posted in INIT). `mutation_drain_unconnected` (test-only,
  // engine_retire_timer_drains_unconnected): the bug the probe wakes
  // found, such a QP's destroy timed at the drain deadline.
  std::optional<uint64_t> NextRetireNs(bool mutation_drain_unconnected = false) const;

  // ---- identity
  uint32_t context() const { return context_; }
  const std::string& peer_path() const { return peer_path_; }
  uint32_t generation() const { return generation_; }
  const std::optional<PeerInfo>& peer() const { return peer_; }
  // peer()->incarnation, without touching the PeerInfo (per chain posted).
  std::optional<uint64_t> peer_incarnation() const { return peer_incarnation_; }
  std::vector<uint32_t> qpns() const;
  std::vector<uint32_t> psns() const;

  std::vector<DataQp>& qps() { return qps_; }
  const std::vector<DataQp>& qps() const { return qps_; }
  uint32_t wr_depth() const { return params_.wr_depth; }
  uint8_t rd_atomic_dest() const { return params_.rd_atomic_dest; }
  hal::CqHandle cq() const { return params_.cq; }

  // Handshake bookkeeping (owner worker only).
  bool active = false;              // we sent the REQ
  uint64_t target_incarnation = 0;  // active: the peer incarnation the REQ names (0 = unknown)
  std::vector<uint8_t> req_bytes;   // the REQ, resent unchanged
  std::vector<uint8_t> rep_bytes;   // the REP we sent (duplicate REQ -> same)
  uint64_t next_resend_ns = 0;
  uint32_t resends = 0;
  uint64_t handshake_deadline_ns = 0;
  // Memory windows (engine/windows.h), by range window id: the ones we
  // bound for the peer, the peer's for our QPs, and revokes to retry.
  std::map<uint64_t, ExposedWindows> exposed;
  std::map<uint64_t, PeerWindows> peer_windows;
  std::vector<WindowLeft> windows_left;
  // Owner worker only, written for every chain posted. Declared last in
  // this section: the private fields every chain reads (CQ, depth, state,
  // peer incarnation, QPs) lead the next one, so all of them share two
  // lines (with many endpoints each line is a cold miss per slice;
  // docs/operations.md 3.2).
  uint32_t round_robin = 0;  // next QP to post on
  uint64_t last_used_ns = 0;
  // The owner's ledger of cq(), valid while the owner's ledger epoch is
  // ledger_epoch (Worker::LedgerOf; 0: never looked up).
  CqQuota* ledger = nullptr;
  uint64_t ledger_epoch = 0;

  // Posted WRs over all QPs (0 = idle).
  uint64_t Outstanding() const;

 private:
  Endpoint(hal::Verbs* verbs, const QpParams& params, uint32_t context, std::string peer_path,
           uint32_t generation);

  // Read for every chain posted and every CQE: first (see round_robin).
  const QpParams params_;
  EndpointState state_ = EndpointState::kConnecting;
  RetireReason retire_reason_ = RetireReason::kNone;
  const uint32_t context_;
  const uint32_t generation_;
  std::optional<uint64_t> peer_incarnation_;  // peer_->incarnation, set with it
  std::vector<DataQp> qps_;
  // The rest.
  hal::Verbs* const verbs_;
  const std::string peer_path_;
  uint64_t drain_deadline_ns_ = 0;
  std::optional<PeerInfo> peer_;
  uint32_t* connecting_counter_ = nullptr;  // the owner's (CountConnectingIn)

  void LeaveConnecting();
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_ENDPOINT_H_
