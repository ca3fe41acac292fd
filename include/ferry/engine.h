// include/ferry/engine.h: ferry::Engine, the public transfer engine.
//
// An Engine moves bytes between memory registered here and segments of peer
// engines with one-sided RDMA READ and WRITE, in batches, over every device
// context and several QPs per peer (docs/design.md section 4).
//
// Dependencies are injected (EngineEnv): the same engine code runs on the
// simulated RNIC and control network (sim/) or on libibverbs, TCP and the
// steady clock (hal/). The engine never blocks except in the calls documented
// as blocking helpers, which loop over a non-blocking core and the Clock.
//
// Thread safety: every public method may be called from any thread at any
// time, concurrently, except that no call may start after Shutdown() began
// (they then return kFailedPrecondition) and the destructor must not race
// any call. User calls never touch a QP or CQ: they validate, then hand work
// to the owner workers (C5).
//
// What must stay true (the promises of this interface):
// - Evidence before status (C1): a task reports a terminal status only when
//   the local RNIC can no longer touch its local buffer. A WRITE that did not
//   end COMPLETED leaves the remote range undefined; a READ that did not end
//   COMPLETED leaves the local buffer undefined.
// - Bad input changes nothing (C8): a call that returns an error has no
//   effect, and Submit enqueues nothing unless every request is valid.
// - Nothing leaks (C9): Shutdown destroys every verbs object once, or
//   reports it in Pending() with the reason.
//
// Errors common to all calls: kFailedPrecondition after Shutdown began.
#ifndef FERRY_INCLUDE_FERRY_ENGINE_H_
#define FERRY_INCLUDE_FERRY_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/config.h"
#include "ferry/export.h"
#include "ferry/types.h"

namespace ferry {

namespace hal {
class Verbs;
class ControlNet;
class Clock;
class Entropy;
}  // namespace hal

// The ports an engine runs on. All four must outlive the engine.
struct EngineEnv {
  hal::Verbs* verbs = nullptr;
  hal::ControlNet* control_net = nullptr;
  hal::Clock* clock = nullptr;
  hal::Entropy* entropy = nullptr;
};

// Result of Submit: `status` is OK when every request was accepted (then
// `tasks[i]` is the id of request i); otherwise nothing was enqueued,
// `tasks` is empty, and `per_request[i]` says what is wrong with request i
// (OK for the ones that were fine). See engine/request_validation.h for the
// code of each rejection.
struct SubmitResult {
  absl::Status status;
  std::vector<absl::Status> per_request;
  std::vector<TaskId> tasks;
  // With a notification (Submit with NotifyOptions, SendNotify): its task,
  // a task of the batch like the others and the batch's last: PENDING until
  // sent; COMPLETED once its SEND's success CQE is polled (the peer's RNIC
  // placed it: N5); FAILED when a request of the Submit did not complete
  // (then nothing is sent: N2) or the SEND failed for good; TIMEOUT at the
  // Submit's deadline; CANCELED by Cancel. `notify_seq` is the sequence
  // number the receiver's Notification::seq carries.
  std::optional<TaskId> notify_task;
  uint64_t notify_seq = 0;
};

// The production environment Engine::Create(config, RealEnvOptions) builds
// and owns: libibverbs (the devices of config.devices, or every device
// when empty), the TCP control network listening on `listen`, the steady
// clock and OS entropy.
struct RealEnvOptions {
  // "host:port" the control listener binds; port 0 picks a free port
  // (Engine::ControlAddress() tells which).
  std::string listen = "0.0.0.0:0";
};

class EngineImpl;
struct EngineEnvOwner;

class FERRY_EXPORT Engine {
 public:
  // Starts an engine on real RDMA devices: no other header than this one is
  // needed. Errors, each naming what it checked: kUnimplemented (libferry
  // built without libibverbs), kNotFound ("no RDMA device": the device list
  // is empty; "device X not found; devices: a, b": a name in
  // config.devices is not there), kUnavailable ("port 1 of X is DOWN": a
  // device whose port is not ACTIVE; "listen H:P: ...": the listen address
  // cannot be bound, e.g. in use), kInvalidArgument (a bad config or
  // listen address), then whatever Create(config, env) returns.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineConfig& config,
                                                        const RealEnvOptions& real);

  // Validates `config` (EngineConfig::Validate), checks `env` (every port
  // set), brings every device context up (C7: a failure at any stage
  // releases exactly what was created), then starts the listener on
  // env.control_net. Errors: kInvalidArgument (config or env), the device's
  // status when no context could be enabled (kNotFound: no such device,
  // kResourceExhausted: allocation failed, ...).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineConfig& config,
                                                        const EngineEnv& env);

  // Shuts down (Shutdown with drain_timeout_ns) if no Shutdown ran yet.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---------------------------------------------------------- memory
  // Registers [addr, addr + len_bytes) on every device context and adds it
  // to the local segment descriptor (bumping its version). Errors:
  // kInvalidArgument (null addr, zero length, overflow), kAlreadyExists
  // (overlaps a registered range), the device's status on a failed
  // registration (then no context keeps a registration of it).
  absl::Status RegisterMemory(void* addr, size_t len_bytes);
  // The same, offered as `options` says (docs/security.md): the MR is
  // registered with exactly options.access (remote read, write or both),
  // and its rkeys reach only the peers options.peers names (all when
  // empty). Errors as above, and kInvalidArgument for an access outside
  // RemoteAccess or a peer identity that is not 1..128 printable bytes.
  absl::Status RegisterMemory(void* addr, size_t len_bytes, const MemoryOptions& options);

  // Deregisters the range that starts at `addr`. Errors: kNotFound (no range
  // starts there), kFailedPrecondition (a non-terminal task touches it;
  // nothing changed). Returns only after every device deregistered it, so
  // the range is fenced against remote access (docs/contract.md, "What Ferry cannot promise").
  absl::Status UnregisterMemory(void* addr);

  // The current local segment descriptor (a copy). Never fails after Create.
  SegmentDescriptor LocalSegment() const;

  // ---------------------------------------------------------- peers
  // Non-blocking core: starts fetching the segment descriptor of the engine
  // listening at `host_port` ("host:port"). Errors: kInvalidArgument
  // (malformed address).
  absl::StatusOr<OpenToken> OpenSegmentAsync(std::string_view host_port);
  // The handle once the descriptor arrived; std::nullopt while in progress.
  // Errors: kNotFound (unknown token), kDeadlineExceeded (no answer within
  // handshake_timeout_ns x handshake_retries; also what a peer that does
  // not authenticate us looks like: it never answers), kPermissionDenied
  // (the peer offers this engine none of its memory; the message says so).
  // A token is consumed by the call that returns its handle or its error.
  absl::StatusOr<std::optional<SegmentHandle>> PollOpenSegment(OpenToken token);
  // Blocking helper over the two calls above, waiting up to timeout_ns.
  absl::StatusOr<SegmentHandle> OpenSegment(std::string_view host_port, uint64_t timeout_ns);
  // Forgets a segment (and any refetch of it in flight). kNotFound for an
  // unknown handle; kFailedPrecondition while a non-terminal task targets
  // it.
  absl::Status CloseSegment(SegmentHandle segment);
  // Stale descriptors (docs/design.md section 4, "Errors, retries, rails"): when
  // a request on `segment` completes REM_ACCESS_ERR (the peer re-registered
  // its memory, e.g. after DEVICE_FATAL, C7), that request's task still
  // ends FAILED (non-retryable class: the slice is not retried), and the
  // engine starts one background refetch of the segment's descriptor (at
  // most one per segment, resent every handshake_timeout_ns, given up after
  // handshake_retries resends; a later REM_ACCESS_ERR starts a new one).
  // While it is in flight, Submit on the handle keeps using the descriptor
  // it holds (those requests may fail the same way). When an answer of the
  // same peer process with a higher version arrives, it replaces the
  // descriptor and later Submits on the SAME handle use its rkeys and
  // buffers; a same-or-lower version, or another incarnation of the peer
  // (a restarted process: open it again), changes nothing.
  // This returns what is held: version, stale, refetch in flight, counters.
  // Errors: kNotFound (unknown handle).
  absl::StatusOr<SegmentInfo> GetSegmentInfo(SegmentHandle segment) const;

  // ---------------------------------------------------------- batches
  // A batch that can hold up to `capacity` tasks (1..batch_capacity_max,
  // else kInvalidArgument).
  absl::StatusOr<BatchId> AllocateBatch(uint32_t capacity);

  // Validates every request (C8), then enqueues all of them or none. A
  // batch-level error (unknown batch: kNotFound; empty span:
  // kInvalidArgument) leaves per_request empty. Remote buffers and rkeys
  // are resolved from the descriptor the segment holds at this call, even
  // while a refetch of it is in flight (see GetSegmentInfo).
  SubmitResult Submit(BatchId batch, absl::Span<const Request> requests);
  // The same into `*result` (not null), every field overwritten; its
  // vectors keep their capacity, so a caller that reuses one SubmitResult
  // submits without a heap allocation per request (docs/operations.md
  // 3.3). A name of its own: `Submit(b, r, {})` stays the notification
  // overload below.
  void SubmitInto(BatchId batch, absl::Span<const Request> requests, SubmitResult* result);
  // The same, and once every request of this call has COMPLETED, a
  // notification to the segment they address (all must address one
  // segment: else kInvalidArgument and nothing enqueued). Sent on a SEND
  // after the last data CQE, so the peer sees it only after all the data
  // is placed (N1). Errors besides Submit's: kFailedPrecondition when
  // notify_recv_slots is 0; kInvalidArgument for a message over
  // kNotifyMessageBytesMax; kResourceExhausted when 64 notifications to
  // that peer are not terminal yet, or the engine's send slots are all in
  // use (retry once some are terminal). The notification takes one task of
  // the batch's capacity.
  SubmitResult Submit(BatchId batch, absl::Span<const Request> requests,
                      const NotifyOptions& notify);
  // A notification alone (no data) to `segment`, as a task of `batch`.
  SubmitResult SendNotify(BatchId batch, SegmentHandle segment, std::string_view message);

  // ---------------------------------------------------------- notifications
  // Up to `max` notifications delivered to this engine, oldest first
  // (each at most once: N3). Never blocks.
  std::vector<Notification> PollNotifies(size_t max);
  // Blocking helper: waits until a notification is there or timeout_ns
  // passed, then returns up to `max` (empty on timeout).
  std::vector<Notification> WaitNotifies(size_t max, uint64_t timeout_ns);

  // Status of one task. Tasks are never reported terminal early (C1).
  // Errors: kNotFound (unknown batch). An index never submitted -> INVALID.
  absl::StatusOr<TaskStatus> GetTaskStatus(TaskId task) const;
  // Status of every task of a batch. Errors: kNotFound (unknown batch).
  absl::StatusOr<BatchStatus> GetBatchStatus(BatchId batch) const;
  // Blocking helper: waits until every task of the batch is terminal or
  // timeout_ns passed, then returns the batch status (kNotFound as above).
  absl::StatusOr<BatchStatus> WaitBatch(BatchId batch, uint64_t timeout_ns);

  // Latches CANCELED on a non-terminal task (first of CANCELED/TIMEOUT
  // wins): its queued slices are withdrawn, posted ones resolve by evidence,
  // no slice is posted again (C2). A posted WR with no completion by the
  // task's deadline gets its evidence as for a timeout (its endpoint
  // retires), and the status stays CANCELED. Other tasks are unaffected. OK
  // also when the task is already terminal (nothing changes). kNotFound:
  // unknown id.
  absl::Status Cancel(TaskId task);
  absl::Status CancelBatch(BatchId batch);

  // Frees a batch. kFailedPrecondition (nothing freed) while any of its
  // tasks is PENDING; kNotFound for an unknown batch.
  absl::Status FreeBatch(BatchId batch);

  // ---------------------------------------------------------- lifecycle
  // Orderly shutdown: refuse new calls, cancel pending tasks, retire every
  // endpoint, wait up to timeout_ns for evidence, destroy every verbs object
  // once. Returns OK when nothing is left; kDeadlineExceeded when something
  // is still pending (listed by Pending()). Runs once: a later call (and
  // the destructor) returns the first call's result at once, since the
  // engine's threads stopped with it; concurrent calls wait for the first.
  absl::Status Shutdown(uint64_t timeout_ns);

  // What is still pending and why (tasks without evidence, retiring
  // endpoints, QPs whose destroy keeps failing, segment descriptors being
  // refetched, ...).
  PendingReport Pending() const;

  // What the control listener accepted and refused (docs/security.md).
  AuthStats GetAuthStats() const;

  // The control address peers open segments at ("host:port" as bound, the
  // port resolved when 0 was asked for). Never fails after Create.
  std::string ControlAddress() const;

 private:
  explicit Engine(std::unique_ptr<EngineImpl> impl);
  // The environment an engine made by Create(config, RealEnvOptions) owns;
  // declared before impl_ so it is destroyed after the engine's teardown.
  std::unique_ptr<EngineEnvOwner> env_owner_;
  std::unique_ptr<EngineImpl> impl_;
};

}  // namespace ferry

#endif  // FERRY_INCLUDE_FERRY_ENGINE_H_
