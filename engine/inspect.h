// engine/inspect.h: the one door into the engine for code outside engine/
// that drives it without threads and checks it from outside: the simulation
// runtime and the oracle (sim/world), scenario tests and benchmarks
// (docs/design.md section 1; scripts/check-layers rule L5). It offers three
// surfaces of one engine, and nothing else of engine_impl.h:
//   - the public API of ferry::Engine (include/ferry/engine.h), with the same
//     contracts, minus the blocking helpers (a stepped engine has no thread
//     to wait on);
//   - stepping: each worker's Step and inbox size, the listener's and the
//     async reader's steps, the CQs each worker owns (a runtime binds them
//     to the actor or thread that steps that worker);
//   - reading: the ledgers the oracle checks (each task's slice words, the
//     CQ quota of every owned CQ, the handle ledger), the owner of each
//     endpoint, the pending list, per-worker counters.
//
// Thread safety: the API may be called from any thread (as ferry::Engine's).
// StepWorker(w) and every reading call about worker w only from the thread
// (or sim actor) that steps worker w, or while no worker is stepped (the
// simulated world is single-threaded, so between any two steps). The
// listener and async steps from one thread each.
//
// What must stay true: a stepped engine starts no thread and reads no wall
// clock (its env's Clock is the only time); reading never changes engine
// state (every reading method is const); the views are copies, valid after
// the engine moved on, except TaskOf (a shared, read-only task) and
// FindEndpoint (valid until that worker's next step).
#ifndef FERRY_ENGINE_INSPECT_H_
#define FERRY_ENGINE_INSPECT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/mutation.h"
#include "engine/step.h"
#include "engine/task.h"
#include "ferry/config.h"
#include "ferry/engine.h"
#include "hal/types.h"

namespace ferry {
class EngineImpl;
}  // namespace ferry

namespace ferry::engine {

class Endpoint;  // engine/endpoint.h (tests that read one include it)

// The CQ quota of one owned CQ (engine/cq_quota.h), as the oracle checks it
// against the RNIC's ground truth: CQEs present + producible <= reserved <=
// the CQ's capacity (C4).
struct QuotaView {
  uint32_t worker = 0;
  hal::CqHandle cq;
  int64_t reserved = 0;     // CQEs reserved for posted WRs
  int64_t zombie_held = 0;  // of those, held for destroyed QPs awaiting their empty poll
  uint64_t stray_cqes = 0;  // CQEs that matched nothing reserved (counted, never applied)
};

// What one worker holds, for reports and drain checks.
struct WorkerView {
  uint32_t id = 0;
  bool shut_down = false;  // shutdown asked and every endpoint destroyed
  size_t live_endpoints = 0;
  size_t retiring_endpoints = 0;
  size_t inbox = 0;
  uint64_t quota_used = 0;  // over all its CQs
};

class SteppedEngine {
 public:
  // Brings up every device (C7) and builds workers, listener and async
  // reader, as Engine::Create does, but starts no runtime: the caller steps
  // it. `mutations` and `observer` may be null; both must outlive it.
  static absl::StatusOr<std::unique_ptr<SteppedEngine>> Create(const EngineConfig& config,
                                                               const EngineEnv& env,
                                                               const base::Mutations* mutations,
                                                               LifecycleObserver* observer);
  ~SteppedEngine();
  SteppedEngine(const SteppedEngine&) = delete;
  SteppedEngine& operator=(const SteppedEngine&) = delete;

  // ---- the public API (include/ferry/engine.h has each contract)
  absl::Status RegisterMemory(void* addr, size_t len_bytes, const MemoryOptions& options = {});
  AuthStats GetAuthStats() const;
  absl::Status UnregisterMemory(void* addr);
  SegmentDescriptor LocalSegment() const;
  absl::StatusOr<OpenToken> OpenSegmentAsync(std::string_view host_port);
  absl::StatusOr<std::optional<SegmentHandle>> PollOpenSegment(OpenToken token);
  absl::Status CloseSegment(SegmentHandle segment);
  absl::StatusOr<SegmentInfo> GetSegmentInfo(SegmentHandle segment) const;
  absl::StatusOr<BatchId> AllocateBatch(uint32_t capacity);
  SubmitResult Submit(BatchId batch, absl::Span<const Request> requests);
  void SubmitInto(BatchId batch, absl::Span<const Request> requests, SubmitResult* result);
  // Engine::Submit with NotifyOptions (every request to `segment`), and
  // Engine::SendNotify when `requests` is empty.
  SubmitResult SubmitNotify(BatchId batch, absl::Span<const Request> requests,
                            SegmentHandle segment, std::string_view message);
  std::vector<Notification> PollNotifies(size_t max);
  absl::StatusOr<TaskStatus> GetTaskStatus(TaskId task) const;
  absl::StatusOr<BatchStatus> GetBatchStatus(BatchId batch) const;
  absl::Status Cancel(TaskId task);
  absl::Status CancelBatch(BatchId batch);
  absl::Status FreeBatch(BatchId batch);
  PendingReport Pending() const;

  // ---- lifecycle, in this order: BeginShutdown, step until
  // WorkersDrained, stop stepping, FinishShutdown (C9).
  void BeginShutdown();
  bool WorkersDrained() const;
  absl::Status FinishShutdown();

  // ---- stepping
  uint32_t worker_count() const;
  WaitSet StepWorker(uint32_t w, const PhaseOrder& order = kDefaultPhases);
  size_t InboxSize(uint32_t w) const;  // any thread
  void StepListener(uint32_t budget);
  // When the listener's tick (segment refetch resends) is next due.
  std::optional<uint64_t> ListenerNextTickNs() const;
  void StepAsync(uint32_t budget);
  // The CQs of every context that worker w owns (cq(w, i) of each), valid
  // or not, in context order.
  std::vector<hal::CqHandle> WorkerCqs(uint32_t w) const;

  // ---- reading
  uint64_t incarnation() const;
  // Answers of a descriptor refetch that arrived after it ended (late,
  // duplicated or overtaken); each changed nothing.
  uint64_t late_refetch_answers() const;
  // The task behind `task` (the oracle reads its slice words); nullptr when
  // unknown.
  std::shared_ptr<const Task> TaskOf(TaskId task) const;
  // The local range (address, bytes) of `task`; a notification's send slot.
  std::pair<uint64_t, uint64_t> LocalRangeOf(TaskId task) const;
  // Notifications refused by the receiver's duplicate filter, and SENDs
  // that did not decode.
  uint64_t notify_duplicates() const;
  // The DESC_REQ token of `segment`'s refetch in flight, 0 when none.
  uint64_t RefetchTokenOf(SegmentHandle segment) const;
  // The CQ quota of every CQ of every worker, in (worker, context) order.
  std::vector<QuotaView> Quotas() const;
  // The same views, in the same order, without building a vector (the
  // simulated world's oracle reads them after every step).
  void ForEachQuota(absl::FunctionRef<void(const QuotaView&)> f) const;
  // The quota of one CQ that worker w owns; nullopt when w owns no such CQ.
  std::optional<QuotaView> QuotaOf(uint32_t w, hal::CqHandle cq) const;
  WorkerView ViewOf(uint32_t w) const;
  const WorkerStats& StatsOf(uint32_t w) const;
  std::vector<std::string> PendingReasons(uint32_t w) const;
  // The worker that owns the endpoint of (context, peer path), by the
  // ownership hash (docs/design.md section 4, "Ownership").
  uint32_t OwnerOf(uint32_t context, std::string_view peer_path) const;
  // The non-retiring endpoint of that key on worker w, if any.
  const Endpoint* FindEndpoint(uint32_t w, uint32_t context, std::string_view peer_path) const;
  // That endpoint's state, generation and what it recorded of its peer
  // (nullopt: no endpoint), for readers that may not see engine/endpoint.h.
  // The index of the context of device `device` (a device whose bring-up
  // failed is kept, down, and brought up in place later; only one whose
  // configuration exceeds the device has none, and later contexts shift
  // down).
  std::optional<uint32_t> ContextIndexOf(std::string_view device) const;
  // Whether that context is up (enabled, its regions registered).
  bool ContextUp(uint32_t context) const;
  struct PeerRecord {
    bool ready = false;
    uint64_t generation = 0;  // the endpoint's own
    bool has_peer = false;
    uint64_t peer_incarnation = 0;
    uint64_t peer_generation = 0;
  };
  std::optional<PeerRecord> PeerRecordOf(uint32_t w, uint32_t context,
                                         std::string_view peer_path) const;
  // Control messages the listener rejected as malformed or hostile.
  uint64_t ListenerRejected() const;
  // Verbs handles created and not released (C9), and their report.
  uint64_t LiveHandles() const;
  // Memory windows held over every context (docs/security.md section 6).
  size_t WindowsHeld() const;
  std::string HandleReport() const;

 private:
  explicit SteppedEngine(std::unique_ptr<EngineImpl> impl);
  std::unique_ptr<EngineImpl> impl_;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_INSPECT_H_
