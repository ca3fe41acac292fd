// engine/worker_notify.cc: the receive side of notifications on the owner
// (docs/design.md section 4, "Notifications"; N3, N4).
//
// What must stay true (see also worker.h):
// - Every receive WR holds one notification slot and one CQE of its CQ's
//   quota from its post until its CQE is polled or its QP's destroy
//   evidence (then the ledger returns the quota with the QP's, and
//   ReleaseRecvSlots the slots): the RNIC writes a slot only while it is
//   posted, and the receive CQEs never overrun the CQ (N4, C4).
// - A QP's receive CQEs complete in post order (RC receive queue), flushes
//   included: a CQE is applied only when its receive seq is the front of
//   the QP's `recv` deque (anything else is a stale duplicate: dropped).
// - A receive WR is re-posted only on an endpoint that is not retiring and
//   only after a successful receive (a flush means the QP is in ERR; rxe
//   would keep a WR posted in ERR unflushed until the next ERR).
#include <algorithm>
#include <optional>

#include "base/check.h"
#include "engine/worker.h"
#include "engine/worker_internal.h"
#include "engine/wr_id.h"

namespace ferry::engine {

void Worker::PostRecvs(Endpoint* ep, uint32_t qi, uint32_t n) {
  NotifySlots* slots = env_->notify_slots;
  if (slots == nullptr || n == 0) return;
  DataQp& q = ep->qps()[qi];
  FERRY_CHECK_LE(q.uid, kRecvQpUidMax);
  auto keys = env_->contexts[ep->context()]->KeysOf(kNotifyArenaRegion);
  if (!keys.ok()) {  // the context is down: its QPs are going away too
    stats_.recv_short += n;
    return;
  }
  const bool quota = RecvHoldsQuota();
  CqQuota& ledger = Ledger(ep->cq());
  for (uint32_t i = 0; i < n; ++i) {  // bounded: n <= notify_recv_slots
    std::optional<uint32_t> slot = slots->Take(NotifySlots::Pool::kRecv);
    if (!slot.has_value()) {
      stats_.recv_short += n - i;
      return;
    }
    if (quota && !ledger.Reserve(q.qp.get(), 1).ok()) {
      slots->Give(*slot);
      stats_.recv_short += n - i;
      return;
    }
    hal::RecvWr wr;
    wr.wr_id = EncodeRecvWrId(RecvWrId{q.uid, q.recv_seq});
    wr.num_sge = 1;
    wr.sg_list[0] =
        hal::Sge{slots->Addr(*slot), static_cast<uint32_t>(kNotifySlotBytes), keys->lkey};
    const hal::PostResult r = env_->verbs->PostRecv(q.qp.get(), absl::MakeConstSpan(&wr, 1));
    if (!r.status.ok()) {
      if (quota) FERRY_CHECK(ledger.Unreserve(q.qp.get(), 1).ok());
      slots->Give(*slot);
      stats_.recv_short += n - i;
      return;
    }
    q.recv.emplace_back(*slot, q.recv_seq++);
    recv_held_ += quota ? 1 : 0;
    ++stats_.recv_posted;
  }
}

void Worker::PostRecvsAll(Endpoint* ep) {
  for (uint32_t i = 0; i < ep->qps().size(); ++i) PostRecvs(ep, i, cfg_.notify_recv_slots);
}

void Worker::HandleRecvCqe(const hal::WorkCompletion& wc) {
  const RecvWrId id = DecodeRecvWrId(wc.wr_id);
  auto it = qp_by_uid_.find(id.qp_uid);
  // A duplicate of a CQE whose WR is gone (its QP released, or a later
  // receive WR at the head): dropped, like a send CQE of another
  // generation. Receive CQEs of one QP otherwise keep post order.
  DataQp* found = it == qp_by_uid_.end() ? nullptr : &it->second.ep->qps()[it->second.index];
  if (found == nullptr || found->released || found->recv.empty() ||
      found->recv.front().second != id.seq) {
    ++stats_.stale_cqes;
    return;
  }
  Endpoint* ep = it->second.ep;
  const uint32_t qi = it->second.index;
  DataQp& q = *found;
  const uint32_t slot = q.recv.front().first;
  q.recv.pop_front();
  if (RecvHoldsQuota()) {
    FERRY_CHECK(Ledger(ep->cq()).ReleaseOnCqe(it->second.qp).ok());
    FERRY_CHECK_GT(recv_held_, 0u);
    --recv_held_;
  }
  const bool ok = wc.status == hal::WcStatus::kSuccess;
  if (ok && env_->notify_received) {
    ++stats_.notify_received;
    const uint32_t len = std::min<uint32_t>(wc.byte_len, kNotifySlotBytes);
    env_->notify_received(id_, ep->peer_path(), ep->peer() ? ep->peer()->incarnation : 0,
                          absl::MakeConstSpan(env_->notify_slots->Data(slot), len));
  }
  env_->notify_slots->Give(slot);
  if (!ok) {
    ++stats_.recv_errors;
    const Key key{ep->context(), ep->peer_path()};
    NoteEvent("cqe_error", key, static_cast<uint64_t>(wc.status), ep->generation());
    // Not a flush of ours: the QP is in ERR (a SEND too long for the slot,
    // or the peer's error); the endpoint retires like on any error CQE.
    if (ep->state() != EndpointState::kRetiring) Retire(ep, RetireReason::kErrorCompletion);
    return;
  }
  if (ep->state() != EndpointState::kRetiring && !shutdown_) PostRecvs(ep, qi, 1);
}

void Worker::ReleaseRecvSlots(DataQp& q) {
  const bool quota = RecvHoldsQuota();
  // Receive WRs that never completed: the QP was destroyed before their
  // flush (or a late success) was polled: the drain deadline passed, or
  // the zombie cap or a CQ or device failure cut the drain short. One of
  // them may have held a notification its sender saw COMPLETED
  // (docs/contract.md N5): counted and recorded, never silent.
  if (!q.recv.empty()) {
    stats_.recv_abandoned += q.recv.size();
    if (env_->observer != nullptr)
      env_->observer->OnEvent(id_, "recv_abandoned", "", q.qpn, q.recv.size());
  }
  // Bounded by the receive depth; the ledger returned their quota with the
  // QP's (destroy + empty poll) or dropped it with the CQ.
  while (!q.recv.empty()) {
    env_->notify_slots->Give(q.recv.front().first);
    q.recv.pop_front();
    if (quota) {
      FERRY_CHECK_GT(recv_held_, 0u);
      --recv_held_;
    }
  }
}

}  // namespace ferry::engine
