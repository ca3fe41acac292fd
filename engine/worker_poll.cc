// engine/worker_poll.cc: polling CQs, applying completions, and resolving
// WRs on evidence (C1, C4)
// (see worker.h for what must stay true).
#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "engine/accept.h"
#include "engine/worker.h"
#include "engine/worker_internal.h"
#include "engine/wr_id.h"

namespace ferry::engine {

using namespace worker_internal;  // NOLINT(build/namespaces): the worker's own helpers

void Worker::PollAll() {
  const uint64_t now = env_->clock->NowNs();
  // WRs without evidence, live or retiring, hold CQ quota (C4): the
  // ledgers answer without visiting every endpoint.
  if (QuotaUsed() > 0 && last_poll_ns_ != 0)
    stats_.max_poll_gap_ns = std::max(stats_.max_poll_gap_ns, now - last_poll_ns_);
  last_poll_ns_ = now;
  ++stats_.polls;
  std::array<hal::WorkCompletion, kPollBatch> wcs;
  ForEachPolledCq([&](hal::CqHandle cq) {
    for (uint32_t rounds = 0; rounds < kPollRoundsMax; ++rounds) {
      CqQuota& ledger = Ledger(cq);
      const uint64_t ticket = ledger.PollStarted();
      auto n = env_->verbs->PollCq(cq, absl::MakeSpan(wcs));
      if (!n.ok()) {
        // CQ_ERR: its async event starts the recovery.
        FERRY_CHECK(ledger.PollFinished(ticket, 1).ok());
        break;
      }
      for (uint32_t k = 0; k < *n; ++k) HandleCqe(wcs[k], cq, ledger, now);
      if (release_n_ > 0) FlushCqeReleases(ledger);
      auto forgotten = ledger.PollFinished(ticket, *n);
      FERRY_CHECK(forgotten.ok());
      // Evidence: destroyed and the CQ polled empty after the destroy.
      for (hal::QpHandle qp : *forgotten) DetachDestroyed(qp);
      if (*n == 0) break;
    }
  });
}

void Worker::HandleCqe(const hal::WorkCompletion& wc, hal::CqHandle cq, CqQuota& ledger,
                       uint64_t now_ns) {
  ++stats_.cqes;
  // A receive WR (notifications): never on the send FIFO.
  if (IsRecvWrId(wc.wr_id)) {
    if (release_n_ > 0) FlushCqeReleases(ledger);  // the ledger in CQE order
    HandleRecvCqe(wc);
    return;
  }
  const WrId id = DecodeWrId(wc.wr_id);
  // Test-only: the bug the generation prevents (a late CQE of an earlier
  // attempt applied to the slice now in its slot).
  const bool any_generation = Mut(base::Mutation::kEngineStaleCqeAnyGeneration);
  if (id.slot >= slots_.size() || !slots_[id.slot].in_use ||
      (slots_[id.slot].generation != id.generation && !any_generation)) {
    ++stats_.stale_cqes;
    return;
  }
  Slot& s = slots_[id.slot];
  Endpoint* ep = s.ep;
  FERRY_CHECK(ep != nullptr && s.qp_index < ep->qps().size());
  FERRY_CHECK(ep->cq() == cq);  // `ledger` is this CQ's: the send WR's CQE came on its QP's CQ
  DataQp& q = ep->qps()[s.qp_index];
  FERRY_CHECK_EQ(q.uid, s.qp_uid);
  // Completions of one QP keep post order.
  FERRY_CHECK_EQ(q.fifo.front(), id.slot);  // (front() checks it is not empty)
  q.fifo.pop_front();
  DeferCqeRelease(q, s.qp);
  TaskRoute* route = ClearSlotRoute(s);
  const uint32_t slice = s.slice;
  const uint64_t window = s.window;
  s.in_use = false;
  free_slots_.push_back(id.slot);
  // Anything else that may touch the ledger sees it as per-CQE returns
  // would have left it.
  if (route == nullptr || wc.status != hal::WcStatus::kSuccess) FlushCqeReleases(ledger);
  if (route == nullptr) OnBindDone(ep, window, wc.status);  // a window bind
  if (wc.status != hal::WcStatus::kSuccess) OnCqeError(ep, wc.status);
  if (route == nullptr) return;
  if (wc.status == hal::WcStatus::kSuccess) {
    ResolveSuccess(*route->task, slice, now_ns);
    return;
  }
  ResolveAttempt(*route, slice, wc.status, false, ep->retire_reason(), now_ns);
}

void Worker::FlushCqeReleases(CqQuota& ledger) {
  static_assert(kPollBatch <= kReleaseQpsMax);
  for (uint32_t i = 0; i < release_n_; ++i) {
    DataQp& q = *release_qps_[i];
    FERRY_CHECK_GT(q.cqes_to_release, 0u);
    FERRY_CHECK(ledger.ReleaseOnCqes(q.release_qp, q.cqes_to_release, &q.quota_hint).ok());
    q.cqes_to_release = 0;
  }
  release_n_ = 0;
}

void Worker::OnCqeError(Endpoint* ep, hal::WcStatus status) {
  const Key key{ep->context(), ep->peer_path()};
  NoteEvent("cqe_error", key, static_cast<uint64_t>(status), ep->generation());
  if (ep->state() == EndpointState::kRetiring) return;
  // One endpoint failure event: the rail counts it once (never per flushed
  // CQE), unless the error is the peer's (non-retryable class).
  if (!NonRetryable(status)) RailError(ep->context(), env_->clock->NowNs());
  Retire(ep, RetireReason::kErrorCompletion);
}

void Worker::ResolveAttempt(TaskRoute& route, uint32_t slice, hal::WcStatus st,
                            bool evidence_by_destroy, RetireReason ep_reason, uint64_t now_ns) {
  Task& task = *route.task;
  // A success CQE resolves through ResolveSuccess (HandleCqe).
  FERRY_CHECK(evidence_by_destroy || st != hal::WcStatus::kSuccess);
  Slice& sl = task.mutable_slice(slice);
  sl.last_status = st;
  sl.last_by_destroy = evidence_by_destroy;
  LatchIfExpired(task, now_ns);  // C2
  if (!evidence_by_destroy && NonRetryable(st)) {
    task.Resolve(slice, SliceOutcome::kFailed);
    // The peer rejected the rkey: its descriptor is refetched in the
    // background (the slice stays failed; later submits get the new keys).
    if (st == hal::WcStatus::kRemAccessErr && env_->remote_access_error)
      env_->remote_access_error(id_, route.segment, route.segment_version);
    return;
  }
  // A flush (or destroy evidence) on a QP Ferry moved to ERR itself costs
  // an innocent slice no retry budget; slice_attempts_max bounds its attempts.
  const bool ours = ep_reason == RetireReason::kTimeout || ep_reason == RetireReason::kEvicted ||
                    ep_reason == RetireReason::kErrorCompletion ||
                    ep_reason == RetireReason::kSuperseded ||
                    ep_reason == RetireReason::kShutdown || ep_reason == RetireReason::kCqError;
  const bool innocent = evidence_by_destroy || (st == hal::WcStatus::kWrFlushErr && ours);
  if (innocent && ep_reason == RetireReason::kTimeout && !task.latched().has_value() &&
      Mut(base::Mutation::kEngineC2TimeoutSpills)) {
    task.Resolve(slice, SliceOutcome::kFailed);  // mutation: the timeout spills
    return;
  }
  // A latched (timed-out or canceled) task's slice is not tried again: it
  // is withdrawn here, without a retry or repost event (C2).
  if (task.latched().has_value() && !Mut(base::Mutation::kEngineC2RepostLatched)) {
    Requeue(route, slice);
    return;
  }
  if (sl.reposts_used + 1 >= cfg_.slice_attempts_max) {
    task.Resolve(slice, SliceOutcome::kFailed);
    return;
  }
  if (!innocent) {
    // RETRY_EXC_ERR and other transport errors (and flushes after a QP
    // error we did not cause): retried on a fresh endpoint, with budget.
    if (sl.retries_used >= cfg_.slice_retries) {
      task.Resolve(slice, SliceOutcome::kFailed);
      return;
    }
    ++sl.retries_used;
    NoteEvent("retry", Key{route.context, *route.peer_path}, slice, sl.retries_used);
  } else {
    NoteEvent("repost", Key{route.context, *route.peer_path}, slice, sl.reposts_used + 1);
  }
  ++sl.reposts_used;
  Requeue(route, slice);
}

void Worker::Requeue(TaskRoute& route, uint32_t slice) {
  route.task->Requeue(slice);
  if (route.task->slice(slice).Load().state == SliceState::kQueued)
    QueueOf(route).push_front(Pending{&route, slice});
}

void Worker::ResolveFifoByEvidence(DataQp& q, RetireReason why) {
  ReleaseRecvSlots(q);
  // Bounded by the FIFO (at most wr_depth WRs); each slot is freed once.
  while (!q.fifo.empty()) {
    const uint32_t slot = q.fifo.front();
    q.fifo.pop_front();
    Slot& s = slots_[slot];
    TaskRoute* route = ClearSlotRoute(s);
    const uint32_t slice = s.slice;
    s.in_use = false;
    free_slots_.push_back(slot);
    if (route == nullptr) continue;  // a window bind: revoked with its endpoint
    ResolveAttempt(*route, slice, hal::WcStatus::kWrFlushErr, true, why, env_->clock->NowNs());
  }
}

void Worker::DetachDestroyed(hal::QpHandle qp) {
  auto uit = uid_by_qp_.find(qp.id);
  FERRY_CHECK(uit != uid_by_qp_.end());
  QpRef& ref = qp_by_uid_.at(uit->second);
  DataQp& q = ref.ep->qps()[ref.index];
  FERRY_CHECK(q.destroyed && !q.released);
  const RetireReason why = ref.ep->retire_reason();
  // The ledger already returned the quota; the WRs resolve on the
  // evidence "destroyed + empty poll" (C1, C4).
  NoteEvent("qp_released", Key{ref.ep->context(), ref.ep->peer_path()}, q.qpn, q.fifo.size());
  ResolveFifoByEvidence(q, why);
  q.released = true;
  q.quota_hint = CqQuota::QpHint{};  // the ledger forgot the QP
}

}  // namespace ferry::engine
