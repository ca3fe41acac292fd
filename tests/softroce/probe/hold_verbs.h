// tests/softroce/probe/hold_verbs.h: HoldVerbs, a hal::Verbs decorator for
// the real-verbs probes (tests/softroce/probe): it forwards every call to an
// inner Verbs (libibverbs on rxe) and lets a test
//   - see the QPs an engine made: number, the state it last set, the INIT,
//     RTR and RTS attributes it used, and the first WR_FLUSH_ERR completion
//     the engine polled on each (with a sequence number, Tick());
//   - hold a peer's QP in INIT (RESET, then INIT with the engine's own INIT
//     attributes) and later release it to RTR and RTS with the engine's own
//     attributes and the receive PSN the QP had when it was held: a remote
//     side that answers late;
//   - pause the next "move to ERR" an owner asks for just before it reaches
//     the device, until the test releases it (or pause_ns_max passed).
//
// Thread safety: every method may be called from any thread (the engine's
// owner threads call the Verbs methods, the test thread the rest).
// What must stay true: the decorator never changes what the engine asked
// for (attributes and results are forwarded unchanged); QueryState and
// DestroyQp are serialized, so the test never queries a destroyed QP; a
// paused owner is released after pause_ns_max at the latest.
#ifndef FERRY_TESTS_SOFTROCE_PROBE_HOLD_VERBS_H_
#define FERRY_TESTS_SOFTROCE_PROBE_HOLD_VERBS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/mutex.h"
#include "hal/verbs.h"
#include "hal/verbs_wrapper.h"

namespace ferry::probe {

// What HoldVerbs knows of one QP.
struct QpRecord {
  hal::QpHandle qp;
  uint32_t qp_num = 0;
  hal::QpState state = hal::QpState::kReset;  // as last set through ModifyQp
  bool destroyed = false;
  hal::QpAttr init_attr, rtr_attr, rts_attr;
  uint32_t init_mask = 0, rtr_mask = 0, rts_mask = 0;
  uint64_t rts_seq = 0;    // Tick() when the engine moved it to RTS
  uint64_t flush_seq = 0;  // Tick() at the first WR_FLUSH_ERR polled on it (0: none)
  // The first error completion polled on it (kSuccess: none yet).
  hal::WcStatus first_error = hal::WcStatus::kSuccess;
};

class HoldVerbs final : public hal::VerbsWrapper {
 public:
  static constexpr uint64_t kPauseNsMaxDefault = 30'000'000'000;

  // `seq` is the sequence shared with the test (Tick); `inner` outlives this.
  HoldVerbs(hal::Verbs* inner, std::atomic<uint64_t>* seq)
      : hal::VerbsWrapper(inner), in_(inner), seq_(seq) {}

  // ---- for the test
  uint64_t Tick() { return seq_->fetch_add(1) + 1; }
  // The live QP the engine moved to RTS last; nullopt when none.
  std::optional<QpRecord> NewestLiveRts() const;
  // The live QP whose RTR named `remote_qp_num` as its destination.
  std::optional<QpRecord> PairedWith(uint32_t remote_qp_num) const;
  // The record of the QP with this handle id, destroyed or not.
  std::optional<QpRecord> RecordOf(uint64_t handle) const;
  // The QP's state as the device reports it now (ibv_query_qp); nullopt
  // once the engine destroyed it.
  std::optional<hal::QpState> QueryState(uint32_t qp_num);
  // RESET, then INIT with the attributes the engine used: the QP drops
  // every packet until ReleaseToRts. Remembers its receive PSN.
  absl::Status HoldInInit(uint32_t qp_num);
  // RTR (the engine's attributes, the receive PSN read at HoldInInit), then
  // RTS (the engine's attributes).
  absl::Status ReleaseToRts(uint32_t qp_num);
  // The next ModifyQp to ERR waits, before it reaches the device, until
  // ReleasePause (or pause_ns_max).
  void ArmErrPause(uint64_t pause_ns_max = kPauseNsMaxDefault);
  // Waits up to timeout_ns for an owner to be paused; true when one is.
  bool WaitPaused(uint64_t timeout_ns);
  void ReleasePause();
  // Handle ids of the QPs not destroyed now.
  std::vector<uint64_t> LiveQpIds() const;
  // Whether every QP of `ids` is destroyed.
  bool AllDestroyed(const std::vector<uint64_t>& ids) const;
  // Error completions polled so far, by status name ("RETRY_EXC_ERR" ...).
  std::map<std::string, uint64_t> ErrorCounts() const;
  // QP number of the last paused ERR move (0: none yet).
  uint32_t paused_qp_num() const;

  // ---- hal::Verbs: what it observes or changes; the rest is forwarded.
  absl::StatusOr<uint32_t> PollCq(hal::CqHandle cq, absl::Span<hal::WorkCompletion> out) override;
  absl::StatusOr<hal::QpInfo> CreateQp(hal::PdHandle pd, const hal::QpInitAttr& init) override;
  absl::Status ModifyQp(hal::QpHandle qp, const hal::QpAttr& attr, uint32_t mask) override;
  absl::Status DestroyQp(hal::QpHandle qp) override;

 private:
  void PauseIfArmed(uint32_t qp_num);
  QpRecord* FindLocked(uint64_t handle) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  QpRecord* FindByNumLocked(uint32_t qp_num) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  hal::Verbs* const in_;
  std::atomic<uint64_t>* const seq_;
  mutable base::Mutex mu_;
  base::CondVar cv_;
  // By handle value: handles are never reused (hal/verbs.h).
  std::map<uint64_t, QpRecord> qps_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, uint32_t> held_rq_psn_ ABSL_GUARDED_BY(mu_);  // qp_num -> rq_psn
  std::map<std::string, uint64_t> error_counts_ ABSL_GUARDED_BY(mu_);
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t pause_ns_max_ ABSL_GUARDED_BY(mu_) = kPauseNsMaxDefault;
  uint32_t paused_qp_num_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ferry::probe

#endif  // FERRY_TESTS_SOFTROCE_PROBE_HOLD_VERBS_H_
