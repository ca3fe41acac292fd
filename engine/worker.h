// engine/worker.h: a steppable owner worker (docs/design.md section 4,
// "Ownership", "Steps and runtimes"; C5).
//
// Owns: its CQs (cq(worker, i) of every context), its share of the
// endpoints (owner = fnv1a64(local NIC, peer NIC path) mod workers), the
// slot table of posted WRs, the CQ quota of its CQs, and the queues of
// slices waiting for an endpoint. Every lifecycle operation of an endpoint
// (create, handshake, accept, post, completion, retire, destroy) runs here,
// in Step(), on the owner.
//
// Thread safety: Push() and InboxSize() from any thread (the inbox is one of
// the closed list of cross-thread state). Everything else only by whoever
// runs this worker's Step(): a sim actor, or in the threaded runtime the
// thread holding the worker's step lock (its owner thread or a user thread,
// engine/runtime_threads.h); never by two at once.
//
// What must stay true:
// - Step() never blocks: it drains the inbox, posts, polls, sweeps
//   deadlines and reclaims (in the order given: the sim permutes it), then
//   returns its wait set. A slow or dead peer's handshake never stops the
//   polling of its CQs (C5).
// - Quota: one CqQuota ledger per owned CQ (engine/cq_quota.h): one CQE per
//   posted WR, reserved before post_send and released exactly once: when
//   that WR's CQE is polled, or after its QP was destroyed successfully and
//   its CQ then polled empty by a poll that started after the destroy (C4).
//   reserved <= capacity always, so Ferry's own traffic never overruns a
//   CQ. Zombie quota past zombie_quota_max escalates: the retiring
//   endpoints on that CQ are destroyed without waiting for their drain, and
//   nothing new is posted on the CQ until it is back under the cap.
// - A CQE whose (slot, generation) does not match a live slot is dropped.
// - At most one non-retiring endpoint per key, held in the owner's
//   EndpointStore of its context (capacity, SIEVE eviction; an evicted
//   endpoint retires and its key is free at once); REP/RTU applied only to
//   the same generation in CONNECTING; DecideAccept (engine/accept.h)
//   decides REQs, and a REQ bearing an incarnation this key already
//   replaced is STALE (C6: a delayed REQ of a peer's previous incarnation
//   never retires a healthy endpoint).
// - Timeout (C2/C3): a timed-out task's queued slices are withdrawn; for
//   each WR it posted, the endpoint is retired (to obtain evidence) only if
//   that WR is still on its QP's FIFO with the same slot generation; a stale
//   entry retires nothing. TIMEOUT is published only with evidence (C1).
// - A step's cost does not grow with idle READY endpoints: it walks the
//   keys with queued slices (a key whose queue PostAll left empty is idle
//   in pending_, out of the walk), the CQ ledgers (every WR without
//   evidence holds quota), the retiring endpoints, and the live ones only
//   while connecting_ > 0.
#ifndef FERRY_ENGINE_WORKER_H_
#define FERRY_ENGINE_WORKER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "base/check.h"
#include "base/mutation.h"
#include "base/mutex.h"
#include "base/ring_queue.h"
#include "engine/accept.h"
#include "engine/context.h"
#include "engine/cq_quota.h"
#include "engine/endpoint.h"
#include "engine/endpoint_store.h"
#include "engine/handles.h"
#include "engine/handshake.h"
#include "engine/notify.h"
#include "engine/owner.h"
#include "engine/pending_keys.h"
#include "engine/pending_queue.h"
#include "engine/step.h"
#include "engine/task.h"
#include "engine/task_route.h"
#include "ferry/config.h"
#include "hal/clock.h"
#include "hal/control_net.h"
#include "hal/entropy.h"
#include "hal/verbs.h"

namespace ferry::engine {

// Everything a worker needs from the engine; outlives the worker.
struct WorkerEnv {
  const EngineConfig* config = nullptr;
  hal::Verbs* verbs = nullptr;
  hal::ControlNet* net = nullptr;
  hal::Clock* clock = nullptr;
  hal::Entropy* entropy = nullptr;
  const base::Mutations* mutations = nullptr;
  HandleLedger* ledger = nullptr;
  std::vector<Context*> contexts;
  uint64_t incarnation = 0;
  LifecycleObserver* observer = nullptr;
  // Called (on the owner that ran it) after a context was re-enabled after
  // DEVICE_FATAL: its rkeys changed, the engine bumps the descriptor
  // version. May be empty.
  std::function<void(uint32_t context)> context_reenabled;
  // Asks every owner to close and re-open context `context` (the
  // reset_context_on_destroy_give_up last resort): delivered to each as a
  // DEVICE_FATAL of that context. May be empty (then the knob is inert).
  std::function<void(uint32_t context)> reset_context;
  // Called (on the owner) when a slice of `route` completed REM_ACCESS_ERR:
  // the peer rejected an rkey of the segment descriptor the route was
  // resolved from (segment handle id, descriptor version). The engine marks
  // that descriptor stale and starts one background refetch; it never
  // blocks (it only takes the engine mutex and sends one control message).
  // The slice itself still fails (non-retryable class). May be empty.
  std::function<void(uint32_t worker, uint64_t segment, uint64_t version)> remote_access_error;
  // Whether revocable region `region` is offered to peer `identity` (a
  // WINREQ's check; takes the engine mutex). May be empty: nothing is.
  std::function<bool(uint64_t region, const std::string& identity)> window_offered;
  // Notifications (engine/notify.h): the registered slot arena (null when
  // notify_recv_slots is 0), and where an owner hands a received SEND's
  // bytes (the engine decodes, deduplicates and queues it; never blocks).
  NotifySlots* notify_slots = nullptr;
  // `peer_incarnation`: the incarnation the endpoint's handshake recorded
  // for the peer (0 while it has none): a notification naming another is
  // refused (a peer cannot speak for another process).
  std::function<void(uint32_t worker, const std::string& peer_path, uint64_t peer_incarnation,
                     absl::Span<const uint8_t> bytes)>
      notify_received;
};

struct InboxSubmit {
  std::shared_ptr<TaskRoute> route;
};
struct InboxWire {
  HandshakeMessage msg;
  std::string from;
  std::string identity;  // the sender's authenticated identity ("" = none: its address)
};
struct InboxAsync {
  hal::AsyncEvent event;
};
struct InboxShutdown {};
// A user thread changed what the owner's queues hold without the owner (a
// Cancel withdrew queued slices, which stay queued until PostAll drops
// them): the owner steps and its wait set sees the change. Carries nothing.
struct InboxRecheck {};
using InboxItem = std::variant<InboxSubmit, InboxWire, InboxAsync, InboxShutdown, InboxRecheck>;

// WRs per post_send chain: PostAll posts one chain per QP per round.
inline constexpr uint32_t kChainMax = 32;
static_assert(kChainMax <= 256, "chain indexes are kept as uint8_t (Worker::chain_by_qp_)");

class Worker {
 public:
  Worker(uint32_t id, WorkerEnv* env);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  uint32_t id() const { return id_; }

  // ---- any thread
  void Push(InboxItem item);
  // Moves one InboxSubmit per route (the .second of each pair; .first is
  // the owner the caller routed it to, this worker), in order, under one
  // lock: a batch's requests for this owner.
  void PushSubmits(absl::Span<std::pair<uint32_t, std::shared_ptr<TaskRoute>>> routes);
  size_t InboxSize() const;

  // ---- owner only
  WaitSet Step(const PhaseOrder& order = kDefaultPhases);
  // What Step would return now, without stepping: the threaded runtime's
  // sleep plan, computed under the step lock after any user thread's step.
  WaitSet CurrentWaitSet() { return WaitSetNow(); }
  // True once a shutdown was requested and every endpoint is destroyed.
  bool ShutDown() const;
  // C9/C1 accounting.
  uint64_t QuotaUsed() const;  // over all CQs
  // Of that, the quota posted receive WRs hold (notifications).
  uint64_t RecvQuotaHeld() const { return recv_held_; }
  // The ledger of one of this worker's CQs (nullptr if not ours).
  const CqQuota* QuotaOf(hal::CqHandle cq) const;
  // Every CQ this worker owns, in context order.
  std::vector<hal::CqHandle> OwnedCqs() const;
  void ForEachOwnedCq(absl::FunctionRef<void(hal::CqHandle)> f) const;
  // The owned CQs PollAll polls: not a parked rail's, not an errored one.
  void ForEachPolledCq(absl::FunctionRef<void(hal::CqHandle)> f) const;
  // True while rail (context) `ctx` is paused (errors or port down).
  bool RailPaused(uint32_t ctx) const { return RailPausedAt(ctx, env_->clock->NowNs()); }
  bool RailPausedAt(uint32_t ctx, uint64_t now_ns) const {
    const Rail& r = rails_[ctx];
    return r.port_down || r.parked || now_ns < r.paused_until_ns;
  }
  size_t LiveEndpoints() const;
  size_t RetiringEndpoints() const { return retiring_.size(); }
  const WorkerStats& stats() const { return stats_; }
  // The non-retiring endpoint of a key, if any (tests).
  const Endpoint* Find(uint32_t context, std::string_view peer_path) const;
  std::vector<std::string> PendingReasons() const;
  // C5 mutation hook: polls this worker's first CQ from whichever thread
  // calls it (a non-owner call the sim must catch).
  void PollFromOutsideForMutation();

 private:
  using Key = std::pair<uint32_t, std::string>;  // (context, peer path)
  using Store = EndpointStore<std::unique_ptr<Endpoint>>;
  struct Slot {
    // Counted in the route's owner_refs while set (SetSlotRoute/ClearSlotRoute);
    // null for a window bind.
    TaskRoute* route = nullptr;
    uint32_t slice = 0;
    uint32_t generation = 0;
    uint64_t qp_uid = 0;
    // The QP the WR is on, valid while in_use: a slot is freed (CQE or
    // DetachDestroyed) before its QP is released and before its endpoint is
    // destroyed. Saves the qp_by_uid_ lookup per CQE; checked against qp_uid.
    Endpoint* ep = nullptr;
    uint32_t qp_index = 0;
    hal::QpHandle qp;  // as posted (kept after destroy: the ledger's key)
    bool in_use = false;
    // A memory-window bind (route is null): the range's window id.
    uint64_t window = 0;
  };
  struct QpRef {
    Endpoint* ep = nullptr;
    uint32_t index = 0;
    hal::QpHandle qp;  // kept after destroy (ledger key)
  };
  // One post_send chain being built by PostAll (a member so the WRs and
  // entries are not constructed and zeroed again for every chain).
  struct ChainEntry {
    Pending p;
    Slice* sl = nullptr;  // p's slice (TakeChain looked it up once)
    uint32_t qi = 0;
    uint32_t slot = 0;
    bool posted = false;
  };
  struct Rail {
    uint64_t errors_in_window = 0;
    uint64_t window_start_ns = 0;
    uint64_t paused_until_ns = 0;
    uint64_t cooldown_ns = 0;
    bool port_down = false;
    bool parked = false;  // DEVICE_FATAL: waiting for the re-enable
    uint64_t park_epoch = 0;
    bool must_reenable = false;    // this owner completed the park count
    bool reset_requested = false;  // destroy give-up asked for a reset (until the re-enable)
    bool resume_counted = true;    // stats_.rail_resumes counted since the last pause
  };

  WaitSet WaitSetNow();
  void DrainInbox();
  void PostAll();
  // `memo`: where the key's endpoint sits in its store (kept with the key).
  void PostKey(const Key& key, PendingQueue& dq, Store::Memo& memo, uint32_t* budget);
  // The queue of the route's key, listed for the next PostAll (made, or an
  // idle key's reused, if the key has none).
  PendingQueue& QueueOf(const TaskRoute& route);
  // PostAll's phases (worker_post.cc has the order).
  void DropLatched(PendingQueue& dq);
  void OpenFor(const Key& key, PendingQueue& dq);
  // The chain path is inlined into PostKey (worker_post.cc, its only
  // caller): at one slice per key their calls cost about 110 instructions.
  // FillWr is inlined into PostQpChain, its only caller (once per WR).
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool PostRound(const Key& key, Endpoint* ep, CqQuota& ledger,
                                                     PendingQueue& dq, uint32_t* budget);
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline uint32_t TakeChain(
      Endpoint* ep, int64_t quota_free, uint32_t budget, PendingQueue& dq,
      std::array<uint32_t, kQpsPerEndpointMax>& taken);
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline void FillWr(ChainEntry& e, Endpoint* ep, uint32_t qi,
                                                  Context* rc, hal::SendWr& wr);
  bool PostQpChain(const Key& key, Endpoint* ep, uint32_t qi, uint32_t n, uint32_t count,
                   CqQuota& ledger, uint32_t* budget);
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline void ReturnUnposted(uint32_t n, PendingQueue& dq);
  void PollAll();
  void Sweep();
  void Reclaim();

  void OnSubmit(std::shared_ptr<TaskRoute> route);
  void OnWire(const InboxWire& w);
  void OnReq(const HandshakeMessage& m, const std::string& from);
  void OnRep(const HandshakeMessage& m, const std::string& from);
  // OnReq's phases (worker_handshake.cc): true when a gate answered the REQ.
  bool ReqGated(const HandshakeMessage& m, const std::string& from, const Key& key);
  // C6: the REQ names another incarnation of this process as its target.
  bool TargetsAnotherIncarnation(const HandshakeMessage& m) const;
  LocalEndpointState AcceptStateOf(const Endpoint* ep, RecordedPeer* rec) const;
  void ServeWithFreshEndpoint(const HandshakeMessage& m, const std::string& from, const Key& key);
  void OnRtu(const HandshakeMessage& m, const std::string& from);
  // The last step of both handshake roles: RTS, READY, event ep_ready; on a
  // failed modify the endpoint retires and false is returned.
  bool ToRtsAndReady(Endpoint* ep, const Key& key, uint64_t peer_generation);
  void OnStaleOrError(const HandshakeMessage& m, const std::string& from);
  // Withdraws FAILED every queued slice of `key` whose rkeys belong to peer
  // incarnation `incarnation` (a REQ naming it was refused: the peer has
  // restarted), and reports each for a descriptor refetch.
  void FailBoundTo(const Key& key, uint64_t incarnation);
  void FailOtherIncarnation(const Pending& p);
  // Every slice of `dq` fails unposted (shutdown; a peer that refuses
  // every REQ for its configuration); returns how many it withdrew.
  uint32_t FailAllUnposted(PendingQueue& dq);
  // Fails the queue's front slices bound to an incarnation of the peer
  // that refused a REQ as not its own (exited_).
  void DropExitedFront(const Key& key, PendingQueue& dq);
  // Is the (non-empty) queue's front slice bound to a peer incarnation
  // that refused a REQ as not its own (exited_)?
  bool FrontExited(const Key& key, const PendingQueue& dq) const;
  // Would PostKey's first acts (DropLatched, DropExitedFront) take the
  // queue's front slice? The wait set's answer for such a key is "now": a
  // timeout or cancel applied after this step's PostAll leaves latched
  // slices queued, and dropping them can publish a task or leave an
  // endpoint idle, so evictable (found by the sweep's probe wakes).
  bool FrontDroppable(const Key& key, const PendingQueue& dq) const;
  // True when `route`'s rkeys belong to another incarnation of the peer
  // than the one `ep` paired with (C6: never posted on it).
  bool BoundElsewhere(const Endpoint& ep, const TaskRoute& route) const;
  void OnAsync(const hal::AsyncEvent& e);

  // ---- memory windows (worker_windows.cc; engine/windows.h)
  // Initiator: true when the front slice may be posted on `ep` as far as
  // windows go; else it asks (WINREQ, resent on the handshake timer),
  // or fails the front slices of a range the peer refused.
  bool WindowsReady(const Key& key, Endpoint* ep, PendingQueue& dq);
  // The time the front slice's window request waits for, if it waits.
  std::optional<uint64_t> WindowWaitNs(const Endpoint& ep, const Pending& front) const;
  bool HasPeerWindows(const Endpoint& ep, uint64_t window) const;
  uint32_t PeerWindowRkey(const Endpoint& ep, uint64_t window, uint32_t qi) const;
  void SendWinReq(Endpoint* ep, uint64_t window);
  void FailWindowed(PendingQueue& dq, uint64_t window);
  // Target: a WINREQ binds the range's windows on the endpoint's QPs (once),
  // a bind CQE counts down to the WIN.
  void OnWinReq(const HandshakeMessage& m, const std::string& from, const std::string& identity);
  void PostBinds(const Key& key, Endpoint* ep, uint64_t window, ExposedWindows& ex);
  void OnBindDone(Endpoint* ep, uint64_t window, hal::WcStatus st);
  void SendWin(Endpoint* ep, uint64_t window, ExposedWindows& ex);
  void SendWinRefused(const HandshakeMessage& m, const std::string& from, Endpoint* ep);
  // The answer to a WINREQ naming a pairing this side no longer holds.
  void SendWinNoEndpoint(const HandshakeMessage& m, const std::string& from, const Key& key);
  void OnWin(const HandshakeMessage& m);
  // Retire: deallocates every window `ep` bound (the peer's rkeys refused
  // at once); RetryRevokes retries what failed, before a destroy attempt.
  void RevokeWindows(Endpoint* ep);
  void RetryRevokes(Endpoint* ep);
  // The bind deadline (handshake_timeout_ns * (handshake_retries + 1)), and
  // the sweep of bind_deadlines_: an endpoint with a bind past it retires.
  uint64_t BindWaitNs() const;
  bool BindsStuck(const Endpoint& ep, uint64_t now, uint64_t wait_ns) const;
  void SweepBinds(uint64_t now);
  // The header of a WINREQ or WIN on `ep` (READY, peer recorded).
  HandshakeMessage WindowMessage(const Endpoint& ep, HandshakeType type, uint64_t window) const;

  absl::StatusOr<Endpoint*> NewEndpoint(const Key& key);
  // NewEndpoint's parts (worker_handshake.cc): index a new endpoint's QPs
  // (slot lookup, quota ledger, observer), and retire the endpoint the
  // store evicted to make room.
  void TrackQps(Endpoint* ep);
  // From cfg_ and c's device; the QPs complete on `cq`.
  QpParams EndpointQpParams(const Context& c, hal::CqHandle cq) const;
  // The CQ of `ctx` a new endpoint's QPs go on: of this owner's CQs not
  // awaiting CQ_ERR recovery, the one with the fewest live endpoints of the
  // store (ties: the lowest index), so endpoints spread over cqs_per_worker
  // CQs and none holds more than EngineConfig::EndpointsPerCq (the CQ
  // budget; NewEndpoint evicts first when the store is full). None while
  // every CQ recovers, or (several CQs) the chosen one is full.
  std::optional<hal::CqHandle> CqForNewEndpoint(uint32_t ctx);
  // The store's eviction predicate: no posted WRs and no queued slices.
  bool Idle(const EndpointKey& k, const std::unique_ptr<Endpoint>& ep) const;
  // Counts busy_passed_over and retires a victim the store evicted.
  void RetireStoreVictim(uint32_t ctx, Store::Evicted victim, uint64_t now);
  void RetireEvicted(std::unique_ptr<Endpoint> victim, bool was_idle, uint64_t now);
  void Accept(Endpoint* ep, const HandshakeMessage& req, const std::string& from);
  // The header of an answer to `m` (REP, RTU, STALE, ERROR): our
  // incarnation and `generation`, m's echoed, from our NIC `local_nic` to
  // m's source NIC.
  HandshakeMessage AnswerTo(const HandshakeMessage& m, HandshakeType type, uint64_t generation,
                            std::string_view local_nic) const;
  // Our side of a REQ or REP: each QP's number and send PSN, GID, LID, MTU.
  void AddLocalQps(const Endpoint* ep, HandshakeMessage* m) const;
  void SendReq(Endpoint* ep);
  void SendRep(Endpoint* ep, const HandshakeMessage& req, const std::string& from);
  void SendRtu(Endpoint* ep, const HandshakeMessage& rep, const std::string& from);
  void SendReply(const std::string& from, const HandshakeMessage& req, HandshakeType type,
                 std::string_view why);
  void Send(const std::string& to, const HandshakeMessage& m, std::vector<uint8_t>* keep);
  void Retire(const Key& key, RetireReason why);
  void Retire(Endpoint* ep, RetireReason why);
  void RememberReplaced(const Key& key, uint64_t incarnation);
  void NoteReadyIncarnation(const Key& key, uint64_t incarnation);
  bool WasReplaced(const Key& key, uint64_t incarnation) const;
  // Records (incarnation, generation) as seen from the peer of `key`; true
  // if that generation is older than one already seen of the same
  // incarnation (the message is from an endpoint the peer gave up).
  bool NoteGenerationIsOlder(const Key& key, uint64_t incarnation, uint64_t generation);
  // One CQE polled from `cq` (whose ledger is `ledger`) at `now_ns` (the
  // poll's time: a slice that resolves past its task's deadline latches
  // TIMEOUT, C2). Inline into PollAll, its only caller (once per CQE);
  // an error CQE's endpoint work is OnCqeError, out of line.
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline void HandleCqe(const hal::WorkCompletion& wc,
                                                     hal::CqHandle cq, CqQuota& ledger,
                                                     uint64_t now_ns);
  // An error CQE on `ep`: noted, and the endpoint retired (once).
  void OnCqeError(Endpoint* ep, hal::WcStatus status);
  // A success CQE's quota, kept for the batch's end (one ledger call per QP
  // per batch instead of one per CQE); FlushCqeReleases returns them all.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void DeferCqeRelease(DataQp& q, hal::QpHandle qp) {
    if (q.cqes_to_release == 0) {
      FERRY_CHECK_LT(release_n_, kReleaseQpsMax);
      release_qps_[release_n_++] = &q;
      q.release_qp = qp;
    }
    FERRY_CHECK_EQ(q.release_qp.id, qp.id);
    ++q.cqes_to_release;
  }
  void FlushCqeReleases(CqQuota& ledger);
  // ---- notifications, receive side (worker_notify.cc)
  // Posts up to n receive WRs on QP qi of `ep`, each with a receive slot
  // and one CQE of quota (N4); fewer when slots or quota run out.
  void PostRecvs(Endpoint* ep, uint32_t qi, uint32_t n);
  // A new endpoint's QPs (at INIT) get notify_recv_slots each, before the
  // peer can send (it sends only once READY, after our RTR).
  void PostRecvsAll(Endpoint* ep);
  void HandleRecvCqe(const hal::WorkCompletion& wc);
  // Destroy evidence for q: its receive WRs are gone; their slots return.
  void ReleaseRecvSlots(DataQp& q);
  // Whether a receive WR reserves a CQE of quota (N4). Test-only
  // (engine_notify_recv_no_quota): not, so a CQ sized for the send WRs
  // alone can overrun.
  bool RecvHoldsQuota() const { return !Mut(base::Mutation::kEngineNotifyRecvNoQuota); }
  // An attempt's evidence other than a success CQE: an error CQE, or a
  // destroy (evidence_by_destroy). `now_ns`: when the evidence was taken
  // (C2's deadline check).
  void ResolveAttempt(TaskRoute& route, uint32_t slice, hal::WcStatus st, bool evidence_by_destroy,
                      RetireReason ep_reason, uint64_t now_ns);
  // A success CQE's attempt (the common case: inline, since HandleCqe
  // runs it once per slice).
  ABSL_ATTRIBUTE_ALWAYS_INLINE void ResolveSuccess(Task& task, uint32_t slice, uint64_t now_ns) {
    Slice& sl = task.mutable_slice(slice);
    sl.last_status = hal::WcStatus::kSuccess;
    sl.last_by_destroy = false;
    LatchIfExpired(task, now_ns);
    task.Resolve(sl, SliceOutcome::kSuccess);
  }
  // C2: a slice that resolves after its task's deadline, before the sweep
  // judged the task (a poll phase ahead of the sweep, a step after a pause
  // or a hang), latches TIMEOUT first: such a task never ends COMPLETED.
  // The sweep still retires what the task has posted. Test-only: the bug
  // the completed_after_deadline rule found.
  void LatchIfExpired(Task& task, uint64_t now_ns) {
    if (!task.latched().has_value() && task.Expired(now_ns) &&
        !Mut(base::Mutation::kEngineCompleteAfterDeadline))
      (void)task.TryLatch(TaskStatus::kTimeout);
  }
  void Requeue(TaskRoute& route, uint32_t slice);
  // A slot's route pointer is counted in the route's owner_refs while set
  // (engine/task_route.h): SetSlotRoute when the WR is on its QP,
  // ClearSlotRoute when the slot is freed. The route stays alive after the
  // clear until the owner's next prune, which no caller reaches first.
  static void SetSlotRoute(Slot& s, TaskRoute* route) {
    FERRY_CHECK(s.route == nullptr && route != nullptr);
    ++route->owner_refs;
    s.route = route;
  }
  static TaskRoute* ClearSlotRoute(Slot& s) {
    TaskRoute* route = s.route;
    s.route = nullptr;
    if (route != nullptr) {
      FERRY_CHECK_GT(route->owner_refs, 0u);
      --route->owner_refs;
    }
    return route;
  }
  void DetachDestroyed(hal::QpHandle qp);
  // Resolves every WR on q's FIFO on destroy/close evidence (C1, C4).
  void ResolveFifoByEvidence(DataQp& q, RetireReason why);
  void SweepTimeouts(uint64_t now);
  // Drops terminal tasks from tasks_ (the sweep list).
  void PruneFinishedTasks();
  bool WrStillOnFifo(const TaskRoute::PostedWr& e) const;
  void RailError(uint32_t ctx, uint64_t now);
  void CheckZombies(hal::CqHandle cq);
  void RecoverErroredCqs();
  // True while every CQ of this owner on `ctx` awaits CQ_ERR recovery: no
  // endpoint may be created on such a CQ (it is never polled and is
  // recreated only once every QP on it is destroyed).
  bool CqRecovering(uint32_t ctx) const;
  std::optional<uint32_t> ContextOfEvent(const hal::AsyncEvent& e) const;
  void ParkForDeviceFatal(uint32_t ctx);
  // A parked rail whose context was re-enabled since: the old QPs resolve
  // by evidence, ledgers are made for the new CQs, the rail unparks.
  void ResumeContext(uint32_t ci);
  void ServeParkedContexts();
  // Inline test first: without an observer (production) a lifecycle event
  // costs one branch (NoteEvent("post") runs once per WR).
  void NoteEvent(std::string_view kind, const Key& key, uint64_t a, uint64_t b) {
    if (env_->observer != nullptr) NoteEventSlow(kind, key, a, b);
  }
  void NoteEventSlow(std::string_view kind, const Key& key, uint64_t a, uint64_t b);
  // The same for a NIC this process may not have (no context index).
  void NoteEventAt(std::string_view kind, std::string_view nic, std::string_view path, uint64_t a,
                   uint64_t b);
  // A free slot (inline: once per post); a new one from GrowSlots when
  // none is free.
  uint32_t AllocSlot() {
    if (free_slots_.empty()) return GrowSlots();
    const uint32_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  uint32_t GrowSlots();
  CqQuota& Ledger(hal::CqHandle cq);
  // Ledger(ep.cq()), kept in the endpoint while no ledger was added or
  // dropped since (ledger_epoch_): a chain reads no map.
  CqQuota& LedgerOf(Endpoint& ep) {
    return ep.ledger_epoch == ledger_epoch_ ? *ep.ledger : RefreshLedger(ep);
  }
  CqQuota& RefreshLedger(Endpoint& ep);
  // A fresh ledger for a CQ of that size.
  std::unique_ptr<CqQuota> NewLedger(uint32_t cqe_capacity) const;
  // Every change to quota_ and quota_context_ goes through these two (they
  // advance ledger_epoch_).
  void AddLedger(uint32_t ctx, uint64_t cq_id, std::unique_ptr<CqQuota> ledger);
  void DropLedger(uint64_t cq_id);
  std::string NicName(uint32_t ctx) const;
  std::optional<uint32_t> ContextOfNic(std::string_view nic) const;
  EndpointKey StoreKey(const Key& key) const { return EndpointKey{NicName(key.first), key.second}; }
  // For lookups: no copy of either string.
  EndpointKeyView StoreKeyView(const Key& key) const {
    return EndpointKeyView{env_->contexts[key.first]->device(), key.second};
  }
  Endpoint* Peek(const Key& key) const;
  // The key's endpoint (a hit for the store's eviction), or nullptr; the
  // lookup takes the key's hash from `front` (a route queued under the key)
  // when Submit computed it.
  // Through `memo` (the key's, kept by pending_): no lookup while no
  // endpoint of the store was made or removed since it was filled.
  // Inline: the fresh memo is the common case, once per key PostAll visits.
  Endpoint* Hit(const Key& key, const TaskRoute& front, Store::Memo* memo) {
    Store& store = *stores_[key.first];
    if (!store.Fresh(*memo)) return HitByKey(key, front, memo);
    std::unique_ptr<Endpoint>* p = store.FindFresh(*memo);  // no key is read
    return p == nullptr ? nullptr : p->get();
  }
  // Hit's lookup by key, for a memo that is not fresh.
  Endpoint* HitByKey(const Key& key, const TaskRoute& front, Store::Memo* memo);
  const Endpoint* Peek(const Key& key, Store::Memo* memo) const;
  std::vector<Endpoint*> LiveList() const;
  // The endpoints of LiveList, in its order, without the copy; `f` must not
  // add, remove or retire endpoints.
  void ForEachLive(absl::FunctionRef<void(Endpoint*)> f) const;
  // Room for an actively opened endpoint on context ctx: below capacity,
  // or an idle endpoint to evict.
  bool StoreHasRoom(uint32_t ctx) const;
  bool Mut(base::Mutation m) const { return env_->mutations != nullptr && env_->mutations->on(m); }

  const uint32_t id_;
  WorkerEnv* const env_;
  const EngineConfig& cfg_;

  mutable base::Mutex mu_;
  base::RingQueue<InboxItem> inbox_ ABSL_GUARDED_BY(mu_);  // no allocation per push
  // inbox_.size(), written under mu_ with every change; InboxSize reads it
  // without the lock (the simulator asks for it at every scheduler step).
  std::atomic<size_t> inbox_size_{0};

  // Owner-only state below.
  // Live endpoints in CONNECTING (Endpoint::CountConnectingIn); declared
  // before the endpoints, which decrement it when destroyed. The step
  // visits the live endpoints for handshake timers only while it is > 0,
  // so a step's cost does not grow with idle READY endpoints.
  uint32_t connecting_ = 0;
  std::vector<std::unique_ptr<Store>> stores_;  // one per context
  std::vector<std::unique_ptr<Endpoint>> retiring_;
  std::map<Key, uint32_t> last_generation_;
  // Per key, incarnations of the peer that a newer one already replaced
  // (bounded: kReplacedPerKeyMax per key, kReplacedKeysMax keys, FIFO).
  std::map<Key, std::deque<uint64_t>> replaced_;
  std::deque<Key> replaced_order_;
  // Per key, incarnations of the peer a REQ named and the process at that
  // address refused as not its own (target_restarted): slices bound to
  // them fail unposted (same bounds, FIFO).
  std::map<Key, std::deque<uint64_t>> exited_;
  std::deque<Key> exited_order_;
  // Per key, the highest generation seen in a REQ or REP of the peer's
  // latest incarnation (bounded: kReplacedKeysMax keys, FIFO). A peer's
  // generations rise per key and it has one live endpoint per key, so a
  // REQ of a lower generation of that incarnation comes from an endpoint
  // the peer already gave up: pairing our QPs with it (by its QPNs, which
  // the peer has reused since) would mispair them (C6).
  std::map<Key, std::pair<uint64_t, uint64_t>> peer_gen_seen_;  // -> (incarnation, generation)
  std::deque<Key> peer_gen_order_;
  // Per key, the peer incarnation its last READY endpoint was paired with
  // (bounded: kReplacedKeysMax keys, FIFO); a READY with another marks
  // that one replaced.
  std::map<Key, uint64_t> ready_incarnation_;
  std::deque<Key> ready_order_;
  // Queued slices per key, walked by PostAll in key order. A key whose
  // queue empties stays idle for its next request, up to
  // max(kIdleKeysMin, the endpoint stores' capacities) keys, so traffic
  // spread over that many peers allocates nothing per request and pays no
  // tree insert or erase (engine/pending_keys.h; docs/operations.md 3.2, 3.3).
  static constexpr size_t kIdleKeysMin = 256;
  std::string event_key_;  // NoteEventAt's scratch ("nic|path")
  PendingKeys<PendingQueue, Store::Memo> pending_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::map<uint64_t, QpRef> qp_by_uid_;
  std::map<uint64_t, uint64_t> uid_by_qp_;              // QP handle id -> uid
  std::map<uint64_t, std::unique_ptr<CqQuota>> quota_;  // by CQ handle id
  // The context of each quota_ entry: a resume drops the ledgers of its
  // own context's old CQs only (another context may be parked, its old
  // CQs' ledgers still needed until its own resume: campaign seed 30030876).
  std::map<uint64_t, uint32_t> quota_context_;
  uint64_t ledger_epoch_ = 1;  // advanced by AddLedger and DropLedger (LedgerOf)
  std::map<uint64_t, std::pair<uint32_t, uint32_t>> errored_cqs_;  // CQ id -> (ctx, i)
  std::vector<Rail> rails_;                                        // per context
  // The owner's one shared_ptr to each route it was given; a route leaves
  // only when its task is terminal and nothing of the owner points at it
  // (owner_refs 0: no queue entry, no slot).
  std::vector<std::shared_ptr<TaskRoute>> tasks_;
  size_t tasks_kept_ = 0;  // tasks_.size() after the last prune
  static constexpr size_t kTasksPruneMin = 64;
  std::vector<InboxItem> drain_scratch_;          // DrainInbox scratch; empty between calls
  std::array<ChainEntry, kChainMax> chain_;       // PostAll scratch; empty between calls
  std::array<hal::SendWr, kChainMax> chain_wrs_;  // sg_list[1..] and imm_data stay 0
  // Per QP of the chain, the chain_ indexes TakeChain gave it, in take
  // order (only the first taken[qi] of each are meaningful).
  std::array<std::array<uint8_t, kChainMax>, kQpsPerEndpointMax> chain_by_qp_;
  // The QPs with success CQEs of the current poll batch not yet returned to
  // the CQ's ledger (DataQp::cqes_to_release); empty between batches.
  static constexpr uint32_t kReleaseQpsMax = 32;  // >= the poll batch
  std::array<DataQp*, kReleaseQpsMax> release_qps_{};
  uint32_t release_n_ = 0;
  uint64_t post_now_ns_ = 0;  // PostAll's one clock reading, for its pass's checks and posts
  // Test-only (kEngineMwReuseAcrossEndpoints): the peer windows of a
  // retired endpoint, handed to the next endpoint of its key.
  std::map<Key, std::map<uint64_t, PeerWindows>> kept_windows_;
  // When the binds posted on a key's endpoint must have completed, in post
  // order (the clock is monotonic, the wait a constant: the front is the
  // earliest). A bind is local; one still without its CQE then sits on a
  // hung QP, and nothing else would retire its endpoint (no task waits on
  // it): sweep seed 597269248, a store full of such endpoints.
  std::deque<std::pair<uint64_t, Key>> bind_deadlines_;
  uint64_t next_qp_uid_ = 1;
  // Receive WRs posted and without evidence (their quota is held for good,
  // so WaitSetNow does not count it as work to poll for).
  uint64_t recv_held_ = 0;
  // No unhandled task of tasks_ expires before this (UINT64_MAX: none).
  uint64_t next_task_deadline_ns_ = UINT64_MAX;
  uint64_t last_poll_ns_ = 0;
  bool shutdown_ = false;
  WorkerStats stats_;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_WORKER_H_
