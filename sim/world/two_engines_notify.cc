// sim/world/two_engines_notify.cc: the world's notifications: submitting one
// with its tracking, and the oracle's judgement of every delivery
// (docs/design.md section 6; contracts N1-N3 in docs/contract.md).
//
// What must stay true: a delivery is judged in the receiving engine's step
// that delivered it, before any other actor moves: N1 every WRITE of the
// notification's Submit holds the bytes it wrote (unless another tracked
// task writes an overlapping range: then that WRITE is not judged), N2
// every data task published COMPLETED at the sender (a dead sender's tasks
// are not judged), N3 no (sender incarnation, seq) is delivered twice.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "sim/world/two_engines.h"

namespace ferry::simworld {

SubmitResult TwoEngines::SubmitNotify(uint32_t h, BatchId batch, const std::vector<Request>& reqs,
                                      uint32_t to, SegmentHandle seg, std::string_view message) {
  MainScope main(this);
  engine::SteppedEngine& e = *hosts_[h].engine;
  SubmitResult sr = e.SubmitNotify(batch, absl::MakeConstSpan(reqs), seg, message);
  if (!sr.status.ok()) return sr;
  TrackedNotify n;
  n.host = h;
  n.to = to;
  n.incarnation = e.incarnation();
  n.seq = sr.notify_seq;
  n.to_incarnation = hosts_[to].incarnation;
  if (auto info = e.GetSegmentInfo(seg); info.ok()) n.to_engine = info->incarnation;
  n.to_records = hosts_[to].obs->records().size();
  for (size_t i = 0; i < sr.tasks.size(); ++i) {
    const Request& r = reqs[i];
    const auto* local = reinterpret_cast<const uint8_t*>(r.local_addr);
    n.data.push_back(tracked_.size());
    if (r.opcode == OpKind::kWrite)
      n.writes.push_back({tracked_.size(), std::vector<uint8_t>(local, local + r.length_bytes)});
    TrackTask(h, sr.tasks[i], local, r.length_bytes, r.opcode,
              reinterpret_cast<const uint8_t*>(r.remote_addr), false);
  }
  FERRY_CHECK(sr.notify_task.has_value());
  const auto [slot, bytes] = e.LocalRangeOf(*sr.notify_task);
  FERRY_CHECK_NE(slot, 0u);
  n.notify = tracked_.size();
  TrackTask(h, *sr.notify_task, reinterpret_cast<const uint8_t*>(slot), bytes, OpKind::kWrite,
            nullptr, true);
  notifies_.push_back(std::move(n));
  return sr;
}

// The receiver lost CQEs since `from` (docs/contract.md N5): its CQ
// failed (CQ_ERR: the CQEs in it are gone), its device did (DEVICE_FATAL:
// closing the device destroys every QP and CQ at once), or it destroyed a
// QP whose receive WRs had not all completed ("recv_abandoned": a drain
// cut short by its deadline, the zombie cap or those failures).
bool TwoEngines::ReceiverLostCqes(uint32_t h, size_t from) const {
  const auto& r = hosts_[h].obs->records();
  for (size_t i = from; i < r.size(); ++i)
    if (r[i].kind == "cq_err" || r[i].kind == "device_fatal" || r[i].kind == "recv_abandoned")
      return true;
  return false;
}

std::string TwoEngines::NotifiesUndelivered() const {
  for (const TrackedNotify& n : notifies_) {
    const Tracked& t = tracked_[n.notify];
    if (n.delivered > 0 || t.dead || hosts_[n.to].incarnation != n.to_incarnation) continue;
    if (t.task->status() != TaskStatus::kCompleted) continue;
    if (ReceiverLostCqes(n.to, n.to_records)) continue;
    return absl::StrCat("notify_completed_undelivered: notification seq ", n.seq, " of h", n.host,
                        " to h", n.to, " (task ", t.label, ") COMPLETED but never delivered");
  }
  return "";
}

bool TwoEngines::OverlapsOther(const TrackedNotify& n, const uint8_t* p, uint64_t len) const {
  auto overlaps = [p, len](const uint8_t* q, uint64_t qlen) {
    return q != nullptr && q < p + len && p < q + qlen;
  };
  for (size_t i = 0; i < tracked_.size(); ++i) {
    if (std::find(n.data.begin(), n.data.end(), i) != n.data.end()) continue;
    const Tracked& t = tracked_[i];
    if (t.notify) continue;
    if (t.op == OpKind::kWrite && overlaps(t.remote, t.len)) return true;
    // A READ writes its local range; the workload fills its remote range
    // with the bytes to read before it submits.
    if (t.op == OpKind::kRead && (overlaps(t.addr, t.len) || overlaps(t.remote, t.len)))
      return true;
  }
  return false;
}

void TwoEngines::OnNotifyDelivered(uint32_t h, const LifecycleRecord& r) {
  auto it = std::find_if(notifies_.begin(), notifies_.end(), [&](const TrackedNotify& n) {
    return n.to == h && n.incarnation == r.a && n.seq == r.b &&
           n.to_engine == hosts_[h].engine->incarnation();
  });
  if (it == notifies_.end()) return;  // not one the world submitted
  TrackedNotify& n = *it;
  const std::string what = absl::StrCat("h", h, " delivered notification seq ", n.seq, " of h",
                                        n.host, " (task ", tracked_[n.notify].label, ")");
  if (++n.delivered > 1) {
    Fail(absl::StrCat("notify_delivered_twice: ", what, " ", n.delivered, " times"));
    return;
  }
  for (const TrackedNotify::Write& w : n.writes) {
    const Tracked& t = tracked_[w.tracked];
    if (OverlapsOther(n, t.remote, t.len)) {
      ++n.writes_unjudged;
      continue;
    }
    for (uint64_t k = 0; k < t.len; ++k) {
      if (t.remote[k] == w.bytes[k]) continue;
      Fail(absl::StrCat("notify_before_data: ", what, " while byte ", k, " of its WRITE task ",
                        t.label, " (", t.len, " bytes) is not placed"));
      return;
    }
  }
  for (size_t i : n.data) {
    const Tracked& t = tracked_[i];
    if (t.dead) continue;
    const TaskStatus st = t.task->status();
    if (st == TaskStatus::kCompleted) continue;
    Fail(absl::StrCat(
        st == TaskStatus::kPending ? "notify_before_completed: " : "notify_on_failed_batch: ", what,
        " while its task ", t.label, " is ", std::string(TaskStatusName(st)), " at the sender"));
    return;
  }
}

}  // namespace ferry::simworld
