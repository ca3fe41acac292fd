// engine/notify.cc: the notification slots, the Submit gate, the sender's
// sequence space and the receiver's inbox (see notify.h for what must stay
// true).
#include "engine/notify.h"

#include <algorithm>
#include <utility>

#include "base/check.h"
#include "engine/worker.h"

namespace ferry::engine {

NotifySlots::NotifySlots(uint32_t send_slots, uint32_t recv_slots)
    : send_(send_slots),
      total_(send_slots + recv_slots),
      mem_(std::make_unique<uint8_t[]>(size_t{send_slots + recv_slots} * kNotifySlotBytes)) {
  base::MutexLock l(&mu_);
  taken_.assign(total_, false);
  // Taken from the back: slot 0 of each pool first (a readable trace).
  for (uint32_t i = send_; i-- > 0;) free_send_.push_back(i);
  for (uint32_t i = total_; i-- > send_;) free_recv_.push_back(i);
}

uint64_t NotifySlots::Addr(uint32_t slot) const {
  FERRY_CHECK_LT(slot, total_);
  return reinterpret_cast<uint64_t>(mem_.get()) + uint64_t{slot} * kNotifySlotBytes;
}

std::optional<uint32_t> NotifySlots::Take(Pool pool) {
  base::MutexLock l(&mu_);
  std::vector<uint32_t>& f = pool == Pool::kSend ? free_send_ : free_recv_;
  if (f.empty()) return std::nullopt;
  const uint32_t s = f.back();
  f.pop_back();
  FERRY_CHECK(!taken_[s]);
  taken_[s] = true;
  return s;
}

void NotifySlots::Give(uint32_t slot) {
  base::MutexLock l(&mu_);
  FERRY_CHECK_LT(slot, total_);
  FERRY_CHECK(taken_[slot]);  // each slot returns once
  taken_[slot] = false;
  (slot < send_ ? free_send_ : free_recv_).push_back(slot);
}

uint32_t NotifySlots::free(Pool pool) const {
  base::MutexLock l(&mu_);
  return static_cast<uint32_t>(pool == Pool::kSend ? free_send_.size() : free_recv_.size());
}

NotifyGate::NotifyGate(uint32_t tasks, std::shared_ptr<TaskRoute> notify, Dispatch dispatch,
                       const base::Mutations* mutations)
    : remaining_(tasks),
      notify_(std::move(notify)),
      dispatch_(std::move(dispatch)),
      mutations_(mutations) {
  FERRY_CHECK_GT(tasks, 0u);
  FERRY_CHECK(notify_ != nullptr);
}

void NotifyGate::OnPublished(TaskStatus status) {
  // Test-only (N2): every terminal status counts down, so a batch with a
  // failed task still sends its notification.
  const bool any_status = Mut(base::Mutation::kEngineNotifyOnFailedBatch);
  if (status != TaskStatus::kCompleted && !any_status) {
    // N2: nothing is sent; the notification, never handed to an owner,
    // is withdrawn FAILED (no WR exists for it: C1 holds trivially).
    if (!spoiled_.exchange(true, std::memory_order_acq_rel))
      (void)notify_->task->TryWithdrawSlice(0, SliceOutcome::kFailed);
    return;
  }
  // Every task publishes once, so `remaining_` reaches 0 once, after the
  // last of them COMPLETED; a spoiled gate never reaches it (the failed
  // task did not count down).
  if (remaining_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (spoiled_.load(std::memory_order_acquire)) return;
  dispatch_(notify_);
}

absl::StatusOr<uint64_t> NotifySeqs::Next(uint64_t peer, std::shared_ptr<const Task> task) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    if (peers_.size() >= kPeersMax)
      return absl::ResourceExhaustedError("notifications: too many receiver processes");
    it = peers_.emplace(peer, Peer{}).first;
  }
  Peer& p = it->second;
  std::shared_ptr<const Task>& held = p.ring[p.next_seq % kNotifyWindow];
  // The notification kNotifyWindow before this one must be terminal: then
  // every live one to this receiver is inside its duplicate window.
  if (held != nullptr && !IsTerminal(held->status()))
    return absl::ResourceExhaustedError(
        "notifications: 64 to this peer are not terminal yet; retry when one is");
  held = std::move(task);
  return p.next_seq++;
}

NotifyInbox::Verdict NotifyInbox::Deliver(Notification n) {
  base::MutexLock l(&mu_);
  const SenderKey key{n.from, n.incarnation};
  auto it = dedup_.find(key);
  if (it == dedup_.end()) {
    if (dedup_.size() >= kSendersMax) {
      dedup_.erase(dedup_order_.front());
      dedup_order_.pop_front();
    }
    it = dedup_.emplace(key, NotifyDedup{}).first;
    dedup_order_.push_back(key);
  }
  const NotifyDedup::Verdict v = it->second.Admit(n.incarnation, n.seq);
  // Test-only (N3): a resend whose first SEND landed is delivered again.
  const bool no_dedup =
      mutations_ != nullptr && mutations_->on(base::Mutation::kEngineNotifyNoDedup);
  if (v == NotifyDedup::Verdict::kDuplicate && !no_dedup) {
    ++stats_.duplicates;
    return Verdict::kDuplicate;
  }
  if (v == NotifyDedup::Verdict::kTooOld && !no_dedup) {
    ++stats_.too_old;
    return Verdict::kTooOld;
  }
  if (queue_.size() >= kQueueMax) {
    ++stats_.queue_full;
    return Verdict::kQueueFull;
  }
  queue_.push_back(std::move(n));
  ++stats_.delivered;
  return Verdict::kDelivered;
}

std::vector<Notification> NotifyInbox::Poll(size_t max) {
  base::MutexLock l(&mu_);
  std::vector<Notification> out;
  const size_t n = std::min(max, queue_.size());
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return out;
}

size_t NotifyInbox::queued() const {
  base::MutexLock l(&mu_);
  return queue_.size();
}

NotifyInbox::Stats NotifyInbox::stats() const {
  base::MutexLock l(&mu_);
  return stats_;
}

}  // namespace ferry::engine
