// engine/worker_sweep.cc: deadlines: task timeouts with the C3 stale check,
// handshake timers and resends, the retire ladder's destroy steps
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

bool Worker::WrStillOnFifo(const TaskRoute::PostedWr& e) const {
  auto it = qp_by_uid_.find(e.qp_uid);
  if (it == qp_by_uid_.end()) return false;
  if (e.slot >= slots_.size() || !slots_[e.slot].in_use ||
      slots_[e.slot].generation != e.generation || slots_[e.slot].qp_uid != e.qp_uid)
    return false;
  const DataQp& q = it->second.ep->qps()[it->second.index];
  for (size_t i = 0; i < q.fifo.size(); ++i)  // bounded by wr_depth
    if (q.fifo[i] == e.slot) return true;
  return false;
}

void Worker::SweepTimeouts(uint64_t now) {
  // No task can expire before the earliest deadline seen by the last full
  // sweep (OnSubmit lowers it): most steps skip the walk over tasks_.
  // Test-only: the bug of judging a deadline early (half a slice timeout).
  const uint64_t judged_ns =
      Mut(base::Mutation::kEngineTimeoutBeforeDeadline) ? now + cfg_.slice_timeout_ns / 2 : now;
  // Finished tasks also leave the list whenever it has doubled since the
  // last prune (amortized O(1) per task): else each would stay held, with
  // its block (engine/task_block.h), until the next deadline sweep, up to a
  // slice timeout later.
  if (tasks_.size() >= 2 * tasks_kept_ + kTasksPruneMin) PruneFinishedTasks();
  if (judged_ns < next_task_deadline_ns_) return;
  next_task_deadline_ns_ = UINT64_MAX;
  for (const auto& t : tasks_) {
    Task& task = *t->task;
    if (t->timeout_handled || IsTerminal(task.status())) continue;
    if (!task.Expired(judged_ns)) {
      next_task_deadline_ns_ = std::min(next_task_deadline_ns_, task.geometry().deadline_ns);
      continue;
    }
    t->timeout_handled = true;
    // A task canceled before its deadline keeps CANCELED, but its posted
    // WRs need evidence all the same: without this retire a canceled task
    // whose WR hangs would stay PENDING for as long as the QP hangs.
    if (!task.TryLatch(TaskStatus::kTimeout) && !task.latched().has_value()) continue;
    const Key key{t->context, *t->peer_path};
    if (env_->observer != nullptr) env_->observer->OnTaskTimeout(id_, task);
    NoteEvent("timeout", key, task.slice_count(), t->posted.size());
    // C3: for each WR the task posted, retire its endpoint (to obtain
    // evidence) only if that very WR is still on its QP's FIFO.
    for (const TaskRoute::PostedWr& e : t->posted) {
      const bool on_fifo = WrStillOnFifo(e);
      if (!on_fifo && !Mut(base::Mutation::kEngineC3NoStaleCheck)) {
        ++stats_.stale_sweep_entries;
        NoteEvent("stale_entry", key, e.slot, e.qp_uid);
        continue;
      }
      auto it = qp_by_uid_.find(e.qp_uid);
      if (it == qp_by_uid_.end()) continue;
      Endpoint* ep = it->second.ep;
      if (ep->state() == EndpointState::kRetiring || ep->state() == EndpointState::kDestroyed)
        continue;
      ++stats_.timeout_retires;
      NoteEvent("timeout_retire", key, ep->qps()[it->second.index].qpn, ep->generation());
      Retire(ep, RetireReason::kTimeout);
    }
    // C2: only this task's queued slices are withdrawn.
    std::optional<TaskStatus> published;
    task.WithdrawQueued(&published);
  }
  PruneFinishedTasks();
}

void Worker::PruneFinishedTasks() {
  // Order kept. A terminal task's route stays while a queue entry or a
  // slot of this owner still points at it (owner_refs: a canceled task's
  // withdrawn slices wait in their queue until PostAll drops them).
  tasks_.erase(std::remove_if(tasks_.begin(), tasks_.end(),
                              [](const std::shared_ptr<TaskRoute>& t) {
                                return t->owner_refs == 0 && IsTerminal(t->task->status());
                              }),
               tasks_.end());
  tasks_kept_ = tasks_.size();
}

namespace {

// Whether another QP of `ep` than `q` is destroyed already.
bool SiblingDestroyed(const Endpoint& ep, const DataQp& q) {
  for (const DataQp& other : ep.qps())
    if (&other != &q && other.destroyed) return true;
  return false;
}

}  // namespace

void Worker::Sweep() {
  const uint64_t now = env_->clock->NowNs();
  SweepTimeouts(now);
  SweepBinds(now);
  // Handshake timers.
  std::vector<Endpoint*> failed;
  // Only while some endpoint is in the handshake (connecting_ counts them).
  for (Endpoint* ep : connecting_ > 0 ? LiveList() : std::vector<Endpoint*>{}) {
    if (ep->state() != EndpointState::kConnecting) continue;
    const Key key{ep->context(), ep->peer_path()};
    if (now >= ep->handshake_deadline_ns) {
      failed.push_back(ep);
      continue;
    }
    if (now >= ep->next_resend_ns) {
      ep->next_resend_ns = now + cfg_.handshake_timeout_ns;
      if (ep->active && !ep->peer()) {
        // REQ resent unchanged until a REP or the timeout.
        (void)env_->net->Send(AddressOf(key.second), ep->req_bytes);
        ++ep->resends;
        NoteEvent("req_sent", key, ep->generation(), ep->resends);
      } else if (!ep->rep_bytes.empty()) {
        // We accepted and wait for the RTU (or the REP of a simultaneous
        // open): our REP may be lost; resend it.
        (void)env_->net->Send(AddressOf(key.second), ep->rep_bytes);
        if (ep->active) (void)env_->net->Send(AddressOf(key.second), ep->req_bytes);
      }
    }
  }
  for (Endpoint* ep : failed) Retire(ep, RetireReason::kHandshakeFailed);
  // Retire ladder; every destroy result goes to the CQ's ledger.
  ServeParkedContexts();
  for (auto& ep : retiring_) {
    if (ep->state() != EndpointState::kRetiring || rails_[ep->context()].parked) continue;
    RetryRevokes(ep.get());  // windows before QPs: a failed dealloc again
    std::vector<std::pair<bool, uint32_t>> before;
    for (const DataQp& q : ep->qps()) before.emplace_back(q.destroyed, q.destroy_failures);
    ep->RetireStep(now, cfg_.destroy_backoff_ns_min, cfg_.destroy_backoff_ns_max,
                   Mut(base::Mutation::kEngineC9LeakAtShutdown) && shutdown_);
    auto lit = quota_.find(ep->cq().id);
    if (lit == quota_.end()) continue;  // its CQ was recreated: all destroyed
    CqQuota& ledger = *lit->second;
    for (size_t i = 0; i < ep->qps().size(); ++i) {
      DataQp& q = ep->qps()[i];
      const hal::QpHandle h = qp_by_uid_.at(q.uid).qp;
      const Key key{ep->context(), ep->peer_path()};
      if (q.destroyed && !before[i].first) {
        FERRY_CHECK(ledger.OnDestroyResult(h, true).ok());
        NoteEvent("qp_destroyed", key, q.qpn, q.fifo.size());
      }
      if (q.destroy_failures != before[i].second) {
        FERRY_CHECK(ledger.OnDestroyResult(h, false).ok());
        NoteEvent("destroy_failed", key, q.qpn, q.destroy_failures);
        stats_.partial_destroys += SiblingDestroyed(*ep, q);  // a partial destroy
      }
      // Last resort (off by default): a QP whose destroy kept failing for
      // destroy_give_up_ns gets its whole device context closed and
      // re-opened; the close is evidence for every QP on it (C1).
      Rail& rail = rails_[ep->context()];
      if (cfg_.reset_context_on_destroy_give_up && !q.destroyed && q.destroy_failures > 0 &&
          now - q.first_destroy_fail_ns >= cfg_.destroy_give_up_ns && !rail.reset_requested &&
          env_->reset_context) {
        rail.reset_requested = true;
        NoteEvent("destroy_give_up", key, q.qpn, q.destroy_failures);
        env_->reset_context(ep->context());
      }
    }
  }
  RecoverErroredCqs();
}

}  // namespace ferry::engine
