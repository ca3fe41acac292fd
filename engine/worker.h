// engine/worker.h: a steppable owner worker (DESIGN.md section 4,
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
// the closed list of cross-thread state). Everything else only from the
// thread (or sim actor) that runs this worker's Step().
//
// What must stay true:
// - Step() never blocks: it drains the inbox, posts, polls, sweeps
//   deadlines and reclaims (in the order given: the sim permutes it), then
//   returns its wait set. A slow or dead peer's handshake never stops the
//   polling of its CQs (C5).
// - Quota: one CQE per posted WR, reserved before post_send and released
//   exactly once: when that WR's CQE is polled, or after its QP was
//   destroyed successfully and its CQ then polled empty (C4). used <=
//   capacity always, so Ferry's own traffic never overruns a CQ.
// - A CQE whose (slot, generation) does not match a live slot is dropped.
// - At most one non-retiring endpoint per key; REP/RTU applied only to the
//   same generation in CONNECTING; the accept table of C6 decides REQs.
#ifndef FERRY_ENGINE_WORKER_H_
#define FERRY_ENGINE_WORKER_H_

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/mutation.h"
#include "engine/context.h"
#include "engine/endpoint.h"
#include "engine/handles.h"
#include "engine/lifecycle_wire.h"
#include "engine/task.h"
#include "ferry/config.h"
#include "hal/clock.h"
#include "hal/control_net.h"
#include "hal/entropy.h"
#include "hal/verbs.h"

namespace ferry::engine {

// Observer of lifecycle events (tests and the sim trace). Called on the
// owner thread of the event.
class LifecycleObserver {
 public:
  virtual ~LifecycleObserver() = default;
  // kind: "ep_create", "ep_ready", "ep_retire", "ep_destroyed", "req_sent",
  // "req_recv", "rep_sent", "rep_recv", "rtu_sent", "rtu_recv", "dup_req",
  // "stale_req", "rep_dropped", "rtu_dropped", "post", "cqe".
  virtual void OnEvent(uint32_t worker, std::string_view kind, std::string_view key, uint64_t a,
                       uint64_t b) = 0;
  // A QP was created by `worker` (the sim binds it to the worker's actor).
  virtual void OnQpCreated(uint32_t worker, hal::QpHandle qp) = 0;
};

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
};

// owner = fnv1a64(local NIC, peer NIC path) mod workers.
uint32_t OwnerOf(std::string_view local_nic, std::string_view peer_path, uint32_t workers);

// One request as the owner needs it (immutable after submit).
struct TaskRoute {
  std::shared_ptr<Task> task;
  OpKind op = OpKind::kRead;
  uint64_t local_addr = 0;
  uint64_t remote_addr = 0;
  uint32_t context = 0;   // local context index (rail)
  std::string peer_path;  // "host:port@nic"
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

struct InboxSubmit {
  std::shared_ptr<TaskRoute> route;
};
struct InboxWire {
  WireMsg msg;
  std::string from;
};
struct InboxAsync {
  hal::AsyncEvent event;
};
struct InboxShutdown {};
using InboxItem = std::variant<InboxSubmit, InboxWire, InboxAsync, InboxShutdown>;

enum class Phase : uint8_t { kInbox, kPost, kPoll, kSweep, kReclaim };
using PhaseOrder = std::array<Phase, 5>;
inline constexpr PhaseOrder kDefaultPhases = {Phase::kInbox, Phase::kPost, Phase::kPoll,
                                              Phase::kSweep, Phase::kReclaim};

struct WaitSet {
  std::optional<uint64_t> deadline_ns;  // next timer
  bool poll_now = false;                // WRs outstanding or a destroyed QP awaiting its empty poll
  bool work_now = false;                // postable work (runs again at once)
  std::vector<hal::CompChannelHandle> channels;
};

struct WorkerStats {
  uint64_t posted = 0;
  uint64_t cqes = 0;
  uint64_t stale_cqes = 0;
  uint64_t polls = 0;
  uint64_t max_poll_gap_ns = 0;  // longest gap between polls with WRs outstanding
  uint64_t handshakes_done = 0;
  uint64_t endpoints_destroyed = 0;
};

class Worker {
 public:
  Worker(uint32_t id, WorkerEnv* env);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  uint32_t id() const { return id_; }

  // ---- any thread
  void Push(InboxItem item);
  size_t InboxSize() const;

  // ---- owner only
  WaitSet Step(const PhaseOrder& order = kDefaultPhases);
  // True once a shutdown was requested and every endpoint is destroyed.
  bool ShutDown() const;
  // C9/C1 accounting.
  uint64_t QuotaUsed() const;  // over all CQs
  size_t LiveEndpoints() const { return live_.size(); }
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
  struct Slot {
    std::shared_ptr<TaskRoute> route;
    uint32_t slice = 0;
    uint32_t generation = 0;
    uint64_t qp_uid = 0;
    bool in_use = false;
  };
  struct QpRef {
    Endpoint* ep = nullptr;
    uint32_t index = 0;
    uint64_t destroy_epoch = 0;  // empty-poll epoch of its CQ at destroy
  };
  struct Quota {
    uint64_t used = 0;
    uint64_t capacity = 0;
    uint64_t empty_polls = 0;
  };
  struct Pending {
    std::shared_ptr<TaskRoute> route;
    uint32_t slice = 0;
  };

  void DrainInbox();
  void PostAll();
  void PollAll();
  void Sweep();
  void Reclaim();

  void OnSubmit(const std::shared_ptr<TaskRoute>& route);
  void OnWire(const WireMsg& m, const std::string& from);
  void OnReq(const WireMsg& m, const std::string& from);
  void OnRep(const WireMsg& m, const std::string& from);
  void OnRtu(const WireMsg& m, const std::string& from);
  void OnAsync(const hal::AsyncEvent& e);

  absl::StatusOr<Endpoint*> NewEndpoint(const Key& key);
  void Accept(Endpoint* ep, const WireMsg& req, const std::string& from);
  void SendRep(Endpoint* ep, const std::string& peer_addr, const std::string& peer_nic,
               uint32_t echo_generation);
  void SendReply(const std::string& from, const WireMsg& req, WireStatus status);
  void Retire(const Key& key, RetireReason why);
  void Retire(Endpoint* ep, RetireReason why);
  void HandleCqe(uint32_t ctx, const hal::WorkCompletion& wc);
  void ResolveAttempt(const std::shared_ptr<TaskRoute>& route, uint32_t slice, hal::WcStatus st,
                      bool evidence_by_destroy);
  void Requeue(const std::shared_ptr<TaskRoute>& route, uint32_t slice);
  void ReleaseDestroyed(hal::CqHandle cq);
  void NoteEvent(std::string_view kind, const Key& key, uint64_t a, uint64_t b);
  uint32_t AllocSlot();
  Quota& QuotaOf(hal::CqHandle cq);
  std::string NicName(uint32_t ctx) const;
  std::optional<uint32_t> ContextOfNic(std::string_view nic) const;
  bool Mut(base::Mutation m) const { return env_->mutations != nullptr && env_->mutations->on(m); }

  const uint32_t id_;
  WorkerEnv* const env_;
  const EngineConfig& cfg_;

  mutable absl::Mutex mu_;
  std::deque<InboxItem> inbox_ ABSL_GUARDED_BY(mu_);

  // Owner-only state below.
  std::map<Key, std::unique_ptr<Endpoint>> live_;
  std::vector<std::unique_ptr<Endpoint>> retiring_;
  std::map<Key, uint32_t> last_generation_;
  std::map<Key, std::deque<Pending>> pending_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::map<uint64_t, QpRef> qp_by_uid_;
  std::map<uint64_t, Quota> quota_;  // by CQ handle id
  std::vector<std::shared_ptr<TaskRoute>> tasks_;
  uint64_t next_qp_uid_ = 1;
  uint64_t last_poll_ns_ = 0;
  bool shutdown_ = false;
  WorkerStats stats_;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_WORKER_H_
