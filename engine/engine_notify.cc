// engine/engine_notify.cc: the engine's side of notifications: the slot
// arena at Create, a Submit's notification (checks, route, gate), and
// delivery at the receiver (docs/design.md section 4, "Notifications";
// engine/notify.h has the parts and what must stay true).
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "engine/engine_impl.h"
#include "engine/notify_wire.h"

namespace ferry {

using engine::TaskRoute;

absl::Status EngineImpl::SetUpNotify() {
  if (config_.notify_recv_slots == 0) return absl::OkStatus();
  // Receive slots for every QP the stores may hold, twice over (retiring
  // endpoints keep theirs until their destroy evidence). A QP that finds
  // the pool empty posts fewer (WorkerStats::recv_short).
  const uint64_t recv = uint64_t{2} * config_.notify_recv_slots * config_.qps_per_endpoint *
                        config_.endpoint_store_capacity * config_.workers * contexts_.size();
  if (recv + engine::kNotifySendSlots > UINT32_MAX)
    return absl::InvalidArgumentError("notify_recv_slots: the receive slots do not fit 2^32");
  notify_slots_ =
      std::make_unique<engine::NotifySlots>(engine::kNotifySendSlots, static_cast<uint32_t>(recv));
  // Local write only: no peer can address the arena; the RNIC writes the
  // receive slots and reads the send slots.
  for (auto& c : contexts_) {
    FERRY_RETURN_IF_ERROR(c->RegisterRegion(engine::kNotifyArenaRegion, notify_slots_->base(),
                                            notify_slots_->bytes(), hal::kAccessLocalWrite)
                              .status());
  }
  return absl::OkStatus();
}

absl::Status EngineImpl::CheckNotify(const Batch& b, absl::Span<const Request> requests,
                                     const NotifyRequest& n) const {
  if (notify_slots_ == nullptr)
    return absl::FailedPreconditionError(
        "notifications are off: EngineConfig::notify_recv_slots is 0");
  if (n.message.size() > kNotifyMessageBytesMax)
    return absl::InvalidArgumentError(absl::StrCat("notification message of ", n.message.size(),
                                                   " bytes: at most ", kNotifyMessageBytesMax));
  for (const Request& r : requests) {
    if (r.segment != n.segment)
      return absl::InvalidArgumentError(
          "a Submit with a notification addresses one segment: every request must name it");
  }
  if (!segments_.contains(n.segment.id)) return absl::NotFoundError("unknown segment");
  if (b.tasks.size() + requests.size() + 1 > b.capacity)
    return absl::InvalidArgumentError(absl::StrCat("batch capacity ", b.capacity, ": ",
                                                   b.tasks.size(), " tasks, ", requests.size(),
                                                   " requests and a notification do not fit"));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<TaskRoute>> EngineImpl::NotifyRouteOf(BatchId batch,
                                                                     const NotifyRequest& n,
                                                                     uint32_t index, uint64_t now,
                                                                     uint64_t* seq) {
  std::optional<uint32_t> slot = notify_slots_->Take(engine::NotifySlots::Pool::kSend);
  if (!slot.has_value())
    return absl::ResourceExhaustedError(absl::StrCat(
        "notifications: all ", engine::kNotifySendSlots, " send slots are in use; retry later"));
  const SegmentDescriptor& seg = segments_.at(n.segment.id).descriptor;
  // One slice: the whole encoded message in one SEND.
  engine::TaskGeometry g;
  g.length_bytes = engine::kNotifyHeaderBytes + n.message.size();
  g.slice_size_bytes = engine::kNotifySlotBytes;
  g.submit_ns = now;
  g.deadline_ns = now + config_.slice_timeout_ns;
  auto task = std::make_shared<engine::Task>(g, mutations_);
  absl::StatusOr<uint64_t> s = notify_seqs_.Next(seg.incarnation, task);
  if (!s.ok()) {
    notify_slots_->Give(*slot);
    return s.status();
  }
  *seq = *s;
  const std::vector<uint8_t> wire = engine::EncodeNotify(
      engine::NotifyMessage{incarnation_, *s, batch.id, std::string(n.message)});
  FERRY_CHECK_EQ(wire.size(), g.length_bytes);
  std::copy(wire.begin(), wire.end(), notify_slots_->Data(*slot));
  // The slot returns when the task publishes: the RNIC reads it no more (C1).
  task->set_publish_hook(std::make_shared<engine::SendSlotRelease>(notify_slots_.get(), *slot));
  // The rail as a request of this index would take; the local side is the
  // send slot, the remote side none.
  Request r;
  r.opcode = OpKind::kWrite;
  r.local_addr = notify_slots_->Addr(*slot);
  r.length_bytes = g.length_bytes;
  r.segment = n.segment;
  RouteMemo memo;
  std::shared_ptr<TaskRoute> route =
      RouteOf(r, index, now, engine::ResolvedRanges{}, nullptr, memo);
  route->HoldTask(std::move(task));
  route->send = true;
  route->remote_addr = 0;
  route->rkey = 0;
  route->window = 0;
  route->region = engine::kNotifyArenaRegion;
  route->lkey_epoch = contexts_[route->context]->epoch();
  auto keys = contexts_[route->context]->KeysOf(engine::kNotifyArenaRegion);
  route->lkey = keys.ok() ? keys->lkey : 0;
  return route;
}

void EngineImpl::EnqueueNotify(Routed& routed, size_t data,
                               const std::shared_ptr<TaskRoute>& note) {
  // Sent once every data task of this call COMPLETED (N1, N2); alone
  // (SendNotify) at once. Test-only: at once anyway (N1's bug).
  const bool now_anyway =
      mutations_ != nullptr && mutations_->on(base::Mutation::kEngineNotifyBeforeData);
  if (data == 0 || now_anyway) {
    routed.emplace_back(OwnerOfRoute(*note), note);
    return;
  }
  GateOn(absl::MakeSpan(routed).subspan(routed.size() - data), note);
}

void EngineImpl::GateOn(absl::Span<std::pair<uint32_t, std::shared_ptr<TaskRoute>>> data,
                        const std::shared_ptr<TaskRoute>& note) {
  const uint32_t owner = OwnerOfRoute(*note);
  auto gate = std::make_shared<engine::NotifyGate>(
      static_cast<uint32_t>(data.size()), note,
      [this, owner](const std::shared_ptr<TaskRoute>& r) {
        workers_[owner]->Push(engine::InboxSubmit{r});
        Wake(owner);
      },
      mutations_);
  // Set before the routes reach any owner (Submit pushes them after).
  for (auto& [w, route] : data) route->task->set_publish_hook(gate);
}

void EngineImpl::NotifyReceived(uint32_t worker, const std::string& peer_path,
                                uint64_t peer_incarnation, absl::Span<const uint8_t> bytes) {
  const std::string from = peer_path.substr(0, peer_path.rfind('@'));
  absl::StatusOr<engine::NotifyMessage> m = engine::DecodeNotify(bytes);
  // The sender is the process the endpoint's handshake paired with: a
  // message naming another incarnation is refused like a malformed one
  // (it could spend another sender's sequence numbers).
  if (m.ok() && m->incarnation != peer_incarnation) m = absl::InvalidArgumentError("incarnation");
  if (!m.ok()) {
    notify_malformed_.fetch_add(1);
    Note(worker, "notify_malformed", from, bytes.size(), 0);
    return;
  }
  Notification n;
  n.from = from;
  n.incarnation = m->incarnation;
  n.seq = m->seq;
  n.batch = m->batch;
  n.message = std::move(m->message);
  const engine::NotifyInbox::Verdict v = notify_inbox_.Deliver(std::move(n));
  const char* kind = v == engine::NotifyInbox::Verdict::kDelivered   ? "notify_delivered"
                     : v == engine::NotifyInbox::Verdict::kQueueFull ? "notify_queue_full"
                                                                     : "notify_duplicate";
  Note(worker, kind, from, m->incarnation, m->seq);
}

}  // namespace ferry
