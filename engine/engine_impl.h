// engine/engine_impl.h: the engine body behind ferry::Engine: contexts,
// workers, listener, async reader, the MR table, peer segments and batches.
//
// Owns: every engine object. Runtimes (engine/runtime_threads, sim/world/engine_runtime) drive
// the workers, listener and async reader; this class never starts a thread.
//
// Thread safety: the public-API methods may be called from any thread; the
// state they share with workers is the closed list of docs/design.md section 4:
// worker inboxes, task/slice words (atomics), and the MR table and
// segment/batch tables below, guarded by mu_. Workers(), listener() and
// async() are stepped by the runtime only.
//
// What must stay true: bring-up of every context happens in Create, before
// the listener exists (C7); Submit validates every request before enqueuing
// any (C8); shutdown retires every endpoint on its owner and only then
// disables the contexts (C9). At most one descriptor refetch per open
// segment is in flight (PeerSegment::refetch_token names its opens_ entry,
// and that entry names the segment back); each is bounded by
// handshake_retries resends and ends in an answer, a give-up, CloseSegment
// or shutdown.
#ifndef FERRY_ENGINE_ENGINE_IMPL_H_
#define FERRY_ENGINE_ENGINE_IMPL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "base/check.h"
#include "base/mutation.h"
#include "base/mutex.h"
#include "engine/async_events.h"
#include "engine/auth/auth_net.h"
#include "engine/context.h"
#include "engine/handles.h"
#include "engine/listener.h"
#include "engine/notify.h"
#include "engine/owner.h"
#include "engine/request_validation.h"
#include "engine/task.h"
#include "engine/task_block.h"
#include "engine/worker.h"
#include "ferry/engine.h"

namespace ferry {

namespace engine {
class ThreadedRuntime;
}  // namespace engine

class EngineImpl {
 public:
  // The production runtime, when one runs this engine (runtime_threads.h).
  std::unique_ptr<engine::ThreadedRuntime> threaded_runtime;
  // Engine::Shutdown: serialized; once one finished (the runtime stopped,
  // so nothing more can drain), later calls return its result at once.
  base::Mutex shutdown_mu;
  std::optional<absl::Status> shutdown_result ABSL_GUARDED_BY(shutdown_mu);

  // Brings up every device (C7) and builds workers, listener and async
  // reader. `mutations` and `observer` may be null; both must outlive it.
  static absl::StatusOr<std::unique_ptr<EngineImpl>> Create(const EngineConfig& config,
                                                            const EngineEnv& env,
                                                            const base::Mutations* mutations,
                                                            engine::LifecycleObserver* observer);
  ~EngineImpl();

  // Runtime hook: called whenever a worker's inbox got an item.
  void set_wake(std::function<void(uint32_t)> wake) { wake_ = std::move(wake); }
  // Runtime hook: a user thread's Submit pushed work into owner w's inbox
  // (unset: Wake). The threaded runtime may run that owner's step on the
  // calling thread (EngineConfig::user_thread_steps). Never called from a
  // worker step.
  void set_submitted(std::function<void(uint32_t)> submitted) { submitted_ = std::move(submitted); }

  // ---- API (any thread)
  absl::Status RegisterMemory(void* addr, size_t len_bytes, const MemoryOptions& options = {});
  absl::Status UnregisterMemory(void* addr);
  SegmentDescriptor LocalSegment() const;
  // What a descriptor request of the peer `identity` is answered with
  // (engine_security.cc): the buffers offered to it, or std::nullopt (a
  // refusal) when memory is registered but none of it is offered to it.
  std::optional<SegmentDescriptor> DescriptorFor(const std::string& identity);
  // Whether revocable region `region` is offered to peer `identity` (a
  // WINREQ's check, on an owner; engine_security.cc).
  bool WindowOffered(uint64_t region, const std::string& identity) const;
  AuthStats GetAuthStats() const;
  // kInvalidArgument for an access outside RemoteAccess or a malformed
  // peer identity (engine_security.cc).
  static absl::Status ValidateMemoryOptions(const MemoryOptions& options);
  absl::StatusOr<OpenToken> OpenSegmentAsync(std::string_view host_port);
  absl::StatusOr<std::optional<SegmentHandle>> PollOpenSegment(OpenToken token);
  absl::Status CloseSegment(SegmentHandle segment);
  absl::StatusOr<SegmentInfo> GetSegmentInfo(SegmentHandle segment) const;
  absl::StatusOr<BatchId> AllocateBatch(uint32_t capacity);
  // A notification to send with (or, without requests, instead of) a
  // Submit's data: to `segment` (every request must address it).
  struct NotifyRequest {
    SegmentHandle segment;
    std::string_view message;
  };
  SubmitResult Submit(BatchId batch, absl::Span<const Request> requests,
                      const NotifyRequest* notify = nullptr);
  // The same into `*out`, whose vectors keep their capacity: a caller that
  // reuses one SubmitResult submits without a heap allocation per request
  // (tests/engine/sim/alloc_count_test.cc).
  void Submit(BatchId batch, absl::Span<const Request> requests, const NotifyRequest* notify,
              SubmitResult* out);
  // A Submit's routes with their owners; inline up to a batch of 16.
  using Routed = absl::InlinedVector<std::pair<uint32_t, std::shared_ptr<engine::TaskRoute>>, 16>;
  std::vector<Notification> PollNotifies(size_t max) { return notify_inbox_.Poll(max); }
  engine::NotifyInbox::Stats notify_stats() const { return notify_inbox_.stats(); }
  // Owner callback (WorkerEnv::notify_received, engine_notify.cc): decodes
  // a received SEND, and delivers it unless it is a duplicate (N3).
  void NotifyReceived(uint32_t worker, const std::string& peer_path, uint64_t peer_incarnation,
                      absl::Span<const uint8_t> bytes);
  uint64_t notify_malformed() const { return notify_malformed_.load(); }
  absl::StatusOr<TaskStatus> GetTaskStatus(TaskId task) const;
  absl::StatusOr<BatchStatus> GetBatchStatus(BatchId batch) const;
  absl::Status Cancel(TaskId task);
  absl::Status CancelBatch(BatchId batch);
  absl::Status FreeBatch(BatchId batch);
  PendingReport Pending() const;
  // The task object behind `task` (the sim oracle reads its slice words);
  // nullptr when unknown.
  std::shared_ptr<const engine::Task> TaskOf(TaskId task) const;
  // The local range `task` reads or writes: (address, bytes); for a
  // notification its send slot. (0, 0) when unknown (the sim oracle
  // claims it in its ground truth).
  std::pair<uint64_t, uint64_t> LocalRangeOf(TaskId task) const;
  // The DESC_REQ token of `segment`'s refetch in flight, 0 when none (sim
  // tests answer it themselves to script what the peer says).
  uint64_t RefetchTokenOf(SegmentHandle segment) const;

  // ---- lifecycle
  // Refuses new calls, cancels pending tasks and asks every worker to
  // retire its endpoints. Idempotent.
  void BeginShutdown();
  bool shutting_down() const;
  // True when every worker has no endpoint left.
  bool WorkersDrained() const;
  // After the runtime stopped stepping workers: disables every context.
  absl::Status FinishShutdown();

  // ---- runtime access
  std::vector<std::unique_ptr<engine::Worker>>& workers() { return workers_; }
  engine::Listener& listener() { return *listener_; }
  engine::AsyncReader& async() { return *async_; }
  std::vector<std::unique_ptr<engine::Context>>& contexts() { return contexts_; }
  const engine::HandleLedger& ledger() const { return ledger_; }
  // The worker that owns the endpoint of (local context, peer NIC path)
  // (docs/design.md section 4, "Ownership"): where Submit routes a task.
  uint32_t OwnerOf(uint32_t context, std::string_view peer_path) const {
    return static_cast<uint32_t>(KeyHashOf(context, peer_path) % config_.workers);
  }
  // OwnerOf the route's key, by the key hash RouteOf took from its
  // segment's cache (the owner's endpoint-store lookup reuses it).
  uint32_t OwnerOfRoute(const engine::TaskRoute& route) const {
    FERRY_CHECK(route.key_hash.has_value());  // every route Submit makes comes from RouteOf
    return static_cast<uint32_t>(*route.key_hash % config_.workers);
  }
  // The hash of OwnerForKey without building an EndpointKey (no copy of
  // the path per request).
  uint64_t KeyHashOf(uint32_t context, std::string_view peer_path) const {
    return engine::EndpointKeyHash(contexts_[context]->device(), peer_path);
  }
  const EngineConfig& config() const { return config_; }
  const EngineEnv& env() const { return env_; }
  uint64_t incarnation() const { return incarnation_; }
  uint64_t late_refetch_answers() const {
    base::MutexLock l(&mu_);
    return late_refetch_answers_;
  }

 private:
  // Latches CANCELED on `t` and withdraws its queued slices; the owner to
  // tell (Recheck) when some were withdrawn: they stay in its queue until
  // its PostAll drops them.
  std::optional<uint32_t> CancelRoute(engine::TaskRoute& t);
  // Pushes an InboxRecheck to `owner` and wakes it.
  void Recheck(uint32_t owner);
  struct Region {
    uint64_t id = 0;
    uint64_t addr = 0;
    uint64_t len_bytes = 0;
    RemoteAccess access = RemoteAccess::kReadWrite;
    std::vector<std::string> peers;  // empty = offered to every peer
    bool revocable = false;          // MemoryOptions::revocable
  };
  // A user's OpenSegmentAsync (segment == 0, resent by PollOpenSegment) or
  // a background refetch of open segment `segment` (resent by RefetchTick).
  struct OpenState {
    std::string address;
    uint64_t deadline_ns = 0;
    uint64_t last_send_ns = 0;
    std::optional<SegmentDescriptor> descriptor;
    std::optional<std::string> refused;  // the peer's refusal, for the user
    uint64_t segment = 0;
    uint32_t sends = 0;
  };
  // What RouteOf takes from one buffer of a peer segment's descriptor:
  // its rkey per device and its window fields (BufferDescriptor's).
  struct BufferKeys {
    absl::InlinedVector<uint32_t, 2> rkeys;
    uint64_t window = 0;
    uint64_t window_devices = 0;
  };
  // One opened peer segment. Submit reads, per request, `descriptor`'s
  // first two lines (version, incarnation, device count) and the fields
  // from peer_paths to buffer_keys, which are declared together and hold
  // one buffer and one device inline: with many peers every separate
  // allocation is one more cold line per request (bench/scale,
  // docs/operations.md 3.2). The counters after them are cold.
  struct PeerSegment {
    // Installs `d` with what Submit derives from it: `ranges` and
    // `buffer_keys` (the only place either is set).
    void SetDescriptor(SegmentDescriptor d);

    SegmentDescriptor descriptor;
    // "address@nic" per device of `descriptor`, shared by every route to it
    // (a route copies a pointer, not the path); rebuilt when the
    // descriptor's (version, incarnation) differs from paths_of.
    absl::InlinedVector<std::shared_ptr<const std::string>, 1> peer_paths;
    // KeyHashOf(context, *peer_paths[pdev]) at [pdev * contexts + context],
    // rebuilt with peer_paths (Submit hashed the path's bytes per request).
    // Both inline for one peer device (and up to two contexts): Submit
    // reads them per request, and with many peers a separate allocation
    // is one more cold line each (bench/scale, docs/operations.md 3.2).
    absl::InlinedVector<uint64_t, 2> key_hashes;
    std::pair<uint64_t, uint64_t> paths_of{~uint64_t{0}, 0};
    // C8: the buffers of `descriptor`, tagged with their index (RouteOf
    // takes a buffer's rkeys by it); overlapping or empty ones left out.
    engine::RangeSet ranges;
    absl::InlinedVector<BufferKeys, 1> buffer_keys;  // [i]: descriptor.buffers[i]'s
    bool stale = false;                              // REM_ACCESS_ERR seen on this version
    uint64_t refetch_token = 0;                      // opens_ key of the refetch in flight; 0: none
    uint64_t refetches_started = 0;
    uint64_t refetches_applied = 0;
    uint64_t refetches_unchanged = 0;
    uint64_t refetches_given_up = 0;
  };
  // A fixed hash of a segment id for segment_index_ (never iterated, so
  // no decision depends on it): Fibonacci hashing, one multiply. fnv1a's
  // eight rounds per lookup cost more than the std::map search they
  // replaced at one peer (bench/scale: +180 instructions per slice).
  struct SegmentIdHash {
    size_t operator()(uint64_t id) const { return static_cast<size_t>(id * 0x9E3779B97F4A7C15ull); }
  };
  static constexpr uint32_t kBatchTasksReserved = 1024;
  struct Batch {
    uint32_t capacity = 0;
    std::vector<std::shared_ptr<engine::TaskRoute>> tasks;
  };

  EngineImpl(const EngineConfig& config, const EngineEnv& env, const base::Mutations* mutations,
             engine::LifecycleObserver* observer);
  // Create's phases (engine.cc).
  absl::Status EnableContexts();
  void BuildWorkers();
  void BuildListener();
  // The last local keys Submit looked up (a batch's requests mostly share
  // them): valid for one Submit call, under mu_.
  struct RouteMemo {
    uint32_t context = ~0u;
    uint64_t region = 0;
    uint64_t epoch = 0;
    uint32_t lkey = 0;
  };
  std::shared_ptr<engine::TaskRoute> RouteOf(const Request& r, uint32_t index, uint64_t now,
                                             const engine::ResolvedRanges& found,
                                             PeerSegment* validated, RouteMemo& memo)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RouteOf's local side: the route's region and its lkey on the route's
  // context (remembered in `memo` for the epoch it was read in).
  void SetLocalKeys(engine::TaskRoute& route, uint64_t region, RouteMemo& memo)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DescriptorArrived(uint64_t token, const SegmentDescriptor& d);
  // A peer refused our descriptor request `token` (engine_security.cc).
  void DescriptorRefused(uint64_t token, const std::string& from, const std::string& reason);
  // Owner callback (WorkerEnv::remote_access_error): marks the segment
  // stale and starts its refetch unless one is in flight. Never blocks.
  void RemoteAccessError(uint32_t worker, uint64_t segment, uint64_t version);
  // Listener tick: resends due refetch requests, gives up exhausted ones.
  void RefetchTick();
  std::optional<uint64_t> NextRefetchNs() const;
  void Note(uint32_t worker, std::string_view kind, std::string_view key, uint64_t a,
            uint64_t b) const;
  void SendDescReq(const std::string& address, uint64_t token) const;
  // Remembers an ended refetch's token, so a late answer of it is counted.
  void NoteRefetchEnded(uint64_t token) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the refetch `open` (an opens_ entry with a segment): erases it,
  // notes its token, and returns its segment when that still waits for
  // this token (its refetch_token cleared), else nullptr.
  PeerSegment* EndRefetch(std::map<uint64_t, OpenState>::iterator open)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The per-peer exposure rule (MemoryOptions::peers) of one range, shared
  // by the descriptor and the WINREQ check (every range under
  // kEngineExposeToAllPeers).
  bool OfferedTo(const Region& r, const std::string& identity) const;
  // The local descriptor; with `peer` set, only the buffers offered to
  // that identity (every buffer under kEngineExposeToAllPeers).
  SegmentDescriptor BuildDescriptor(const std::string* peer) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Wake(uint32_t w) {
    if (wake_) wake_(w);
  }
  void Submitted(uint32_t w) {
    if (submitted_) {
      submitted_(w);
    } else {
      Wake(w);
    }
  }
  // The shared "address@nic" of device `pdev` of a peer segment.
  const std::shared_ptr<const std::string>& PeerPathOf(PeerSegment& ps, size_t pdev)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Submit's C8 check: how many requests to enqueue (all, or under the
  // C8 mutation the valid prefix), or nullopt with `out` filled.
  std::optional<size_t> Validate(const Batch& b, absl::Span<const Request> requests,
                                 size_t notify_tasks, SubmitResult* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands Submit's routes to their owners (sorted by owner, one push each).
  void PushRouted(Routed& routed);
  // ---- notifications (engine_notify.cc)
  // Create's phase: the slot arena, registered on every context.
  absl::Status SetUpNotify();
  absl::Status CheckNotify(const Batch& b, absl::Span<const Request> requests,
                           const NotifyRequest& n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The notification task's route: its send slot filled with the encoded
  // message and its sequence number (*seq) taken.
  absl::StatusOr<std::shared_ptr<engine::TaskRoute>> NotifyRouteOf(BatchId batch,
                                                                   const NotifyRequest& n,
                                                                   uint32_t index, uint64_t now,
                                                                   uint64_t* seq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Routes `note` at once (no data, or the N1 mutation), or gates it on
  // the last `data` routes of `routed`.
  void EnqueueNotify(Routed& routed, size_t data, const std::shared_ptr<engine::TaskRoute>& note);
  // Makes `note` wait for every data route of `data` to COMPLETE.
  void GateOn(absl::Span<std::pair<uint32_t, std::shared_ptr<engine::TaskRoute>>> data,
              const std::shared_ptr<engine::TaskRoute>& note);

  const EngineConfig config_;
  // The engine's control network: env.control_net behind the
  // authenticating decorator (engine/auth/auth_net.h); env_.control_net
  // points at it. Declared before env_, which is built from it.
  std::unique_ptr<engine::auth::AuthNet> auth_net_;
  const EngineEnv env_;
  const base::Mutations* const mutations_;
  uint64_t incarnation_ = 0;
  engine::HandleLedger ledger_;
  // Notifications: the slot arena (registered on every context: declared
  // before them, so it outlives their MRs; null when notify_recv_slots is
  // 0), the receiver's inbox and the sender's sequence spaces.
  std::unique_ptr<engine::NotifySlots> notify_slots_;
  engine::NotifyInbox notify_inbox_;
  // Blocks of submitted tasks, recycled (engine/task_block.h; shared by
  // every block it made, so it outlives them).
  const std::shared_ptr<engine::TaskPool> task_pool_ = std::make_shared<engine::TaskPool>();
  std::atomic<uint64_t> notify_malformed_{0};
  std::vector<std::unique_ptr<engine::Context>> contexts_;
  engine::WorkerEnv worker_env_;
  std::vector<std::unique_ptr<engine::Worker>> workers_;
  std::unique_ptr<engine::Listener> listener_;
  std::unique_ptr<engine::AsyncReader> async_;
  std::function<void(uint32_t)> wake_;
  std::function<void(uint32_t)> submitted_;
  engine::LifecycleObserver* const observer_;

  mutable base::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_region_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Region> regions_ ABSL_GUARDED_BY(mu_);  // by addr
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, OpenState> opens_ ABSL_GUARDED_BY(mu_);
  uint64_t next_segment_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, PeerSegment> segments_ ABSL_GUARDED_BY(mu_);  // iterated by id
  // The same segments by id for the per-request lookups of Validate and
  // RouteOf (a std::map of 1024 peers' segments cost three ~10-level
  // searches per request, bench/scale); lookups only, never iterated.
  // Holds exactly the keys of segments_ (node pointers are stable).
  absl::flat_hash_map<uint64_t, PeerSegment*, SegmentIdHash> segment_index_ ABSL_GUARDED_BY(mu_);
  // The last kEndedRefetchesMax refetch tokens that ended, and the answers
  // that arrived for one of them (docs/simulator.md 9.5: the probe of a
  // refetch answer that comes late or reordered).
  static constexpr size_t kEndedRefetchesMax = 64;
  std::set<uint64_t> ended_refetches_ ABSL_GUARDED_BY(mu_);
  uint64_t late_refetch_answers_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t descriptor_refusals_ ABSL_GUARDED_BY(mu_) = 0;
  // C8 lookups: registered local ranges (a segment's are PeerSegment::ranges).
  // Each range's tag is its region's id.
  engine::RangeSet mr_ranges_ ABSL_GUARDED_BY(mu_);
  // Submit's validation output, one entry per request (capacity reused).
  std::vector<engine::ResolvedRanges> resolved_ ABSL_GUARDED_BY(mu_);
  // And the open segment each request's remote range was found in (null: none).
  std::vector<PeerSegment*> validated_segments_ ABSL_GUARDED_BY(mu_);
  uint64_t next_batch_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Batch> batches_ ABSL_GUARDED_BY(mu_);
  engine::NotifySeqs notify_seqs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ferry

#endif  // FERRY_ENGINE_ENGINE_IMPL_H_
