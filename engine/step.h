// engine/step.h: the values a runtime exchanges with a steppable worker and
// the observer of lifecycle events (docs/design.md section 4, "Steps and
// runtimes"). Plain types only: engine/worker.h builds on them and
// engine/inspect.h offers them to runtimes outside engine/.
//
// What must stay true: WaitSet is the whole of a worker's wait (a runtime
// that honours it never misses work: Step() again at once when work_now,
// poll again when poll_now, at once when poll_empty and otherwise when a
// CQE arrives (a channel event), wake by deadline_ns), and
// every Phase appears once in a PhaseOrder.
#ifndef FERRY_ENGINE_STEP_H_
#define FERRY_ENGINE_STEP_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "hal/types.h"

namespace ferry::engine {

class Task;

// Observer of lifecycle events (tests and the sim trace). Called on the
// thread running the owner's step (its owner thread, or a user thread
// holding its step lock: docs/operations.md 2.3).
class LifecycleObserver {
 public:
  virtual ~LifecycleObserver() = default;
  // kind: "ep_create", "ep_ready", "ep_retire", "ep_destroyed", "ep_evict",
  // "req_sent", "req_recv", "rep_sent", "rep_recv", "rtu_sent", "rtu_recv",
  // "dup_req", "stale_req", "error_req", "rep_dropped", "rep_mismatch"
  // (a: the REP's generation, b: the generation whose REQ we accepted),
  // "rtu_dropped",
  // "stale_recv", "post" (a: generation, b: qpn), "cqe_error" (a: the
  // WcStatus, b: generation), "timeout" (a task's deadline passed, a: its
  // slices, b: WRs it posted), "timeout_retire" (a: qpn of the WR still on
  // its FIFO, b: generation), "qp_destroyed" (a: qpn, b: WRs on its FIFO),
  // "qp_released" (destroyed and polled empty; a: qpn, b: WRs resolved by
  // that evidence), "destroy_failed" (a: qpn, b: failures so far),
  // "stale_entry", "repost", "retry", "rail_error", "rail_pause",
  // "zombie_escalate", "cq_err", "cq_recreated", "port_err", "port_active",
  // "gid_change", "device_fatal".
  // The engine adds the segment refetch events (key: the peer's "host:port",
  // a: segment handle id, b: a descriptor version): "refetch_start" (on the
  // owner that saw REM_ACCESS_ERR), and, with worker = workers() (the
  // listener's slot), "refetch_resend", "refetch_give_up",
  // "refetch_applied" (b: new version), "refetch_unchanged",
  // "refetch_other_incarnation".
  virtual void OnEvent(uint32_t worker, std::string_view kind, std::string_view key, uint64_t a,
                       uint64_t b) = 0;
  // The timeout sweep reached `task` past its deadline (called right
  // before the "timeout" event; the sim oracle ties the event to the task).
  virtual void OnTaskTimeout(uint32_t worker, const Task& task) {
    (void)worker;
    (void)task;
  }
  // A QP was created by `worker` (the sim binds it to the worker's actor).
  virtual void OnQpCreated(uint32_t worker, hal::QpHandle qp) = 0;
  // A CQ was recreated by `worker` after CQ_ERR (the sim binds it too).
  virtual void OnCqCreated(uint32_t worker, hal::CqHandle cq) {
    (void)worker;
    (void)cq;
  }
};

enum class Phase : uint8_t { kInbox, kPost, kPoll, kSweep, kReclaim };
using PhaseOrder = std::array<Phase, 5>;

inline constexpr PhaseOrder kDefaultPhases = {Phase::kInbox, Phase::kPost, Phase::kPoll,
                                              Phase::kSweep, Phase::kReclaim};

struct WaitSet {
  std::optional<uint64_t> deadline_ns;  // next timer
  bool poll_now = false;                // WRs outstanding or a destroyed QP awaiting its empty poll
  bool work_now = false;                // postable work (runs again at once)
  // A destroyed QP awaits its empty poll: a poll is due even with no CQE
  // (a runtime that sleeps until a CQE arrives must not sleep on it).
  bool poll_empty = false;
  // Receive WRs are posted (notifications): a peer's SEND may complete one
  // at any time, so a runtime that sleeps must wake on a CQE even when
  // poll_now is false (their quota is held for good, not work to spin on).
  bool recv_posted = false;
  // One per context with channels (a worker's CQs of a context share its
  // channel): inline, so a step's wait set allocates nothing.
  absl::InlinedVector<hal::CompChannelHandle, 4> channels;
};

struct WorkerStats {
  uint64_t posted = 0;
  uint64_t posted_inline = 0;  // of them, inline (EngineConfig::inline_bytes_max)
  uint64_t cqes = 0;
  uint64_t stale_cqes = 0;
  uint64_t polls = 0;
  uint64_t max_poll_gap_ns = 0;  // longest gap between polls with WRs outstanding
  uint64_t handshakes_done = 0;
  uint64_t endpoints_destroyed = 0;
  uint64_t evictions = 0;
  uint64_t timeout_retires = 0;  // endpoints retired to get evidence (C3)
  uint64_t stale_sweep_entries = 0;
  uint64_t rail_errors = 0;  // endpoint failure events counted
  uint64_t rail_pauses = 0;
  uint64_t zombie_escalations = 0;
  uint64_t cq_recreated = 0;
  // Coverage of rare paths (the campaign's probes; no behaviour reads them).
  uint64_t rail_resumes = 0;        // a paused rail carried traffic again (cooldown left)
  uint64_t simultaneous_opens = 0;  // a REP completed an endpoint that had accepted the peer's REQ
  uint64_t partial_destroys = 0;    // a destroy failed while a sibling QP was destroyed
  uint64_t busy_passed_over = 0;    // an eviction took an idle endpoint over a busy one
  uint64_t other_incarnation_fails = 0;    // slices failed unposted: a REQ naming their
                                           // peer incarnation was refused (it restarted)
  uint64_t other_incarnation_retires = 0;  // a READY endpoint retired: the next slice's rkeys
                                           // are another incarnation's of the peer
  uint64_t qp_count_refusals = 0;          // REQs refused: the peer's qps_per_endpoint differs
  uint64_t config_failed = 0;              // slices failed unposted by such a refusal
  // Memory windows (docs/security.md section 6).
  uint64_t windows_bound = 0;    // window binds that completed (target side)
  uint64_t windows_revoked = 0;  // windows deallocated at an endpoint's retire
  uint64_t win_requests = 0;     // WINREQs sent (initiator side, resends included)
  uint64_t win_refusals = 0;     // WINREQs refused (target side: not offered, no bind)
  uint64_t windowed_failed = 0;  // slices failed unposted: the peer refused their windows
  // Notifications (engine/notify.h).
  uint64_t recv_posted = 0;      // receive WRs posted
  uint64_t recv_short = 0;       // receive WRs not posted: no slot or no quota left
  uint64_t notify_received = 0;  // receive CQEs with a notification handed to the engine
  uint64_t recv_errors = 0;      // receive CQEs with an error (flushes included)
  uint64_t recv_abandoned = 0;   // receive WRs still posted at their QP's destroy evidence
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_STEP_H_
