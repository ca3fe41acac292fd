// engine/notify.h: notifications inside the engine (docs/design.md section 4,
// "Notifications"; contracts N1-N5 in docs/contract.md).
//
// Owns:
// - NotifySlots: one arena cut into slots of kNotifySlotBytes, in two pools:
//   send payloads (taken at Submit, returned when the notification task
//   publishes) and receive buffers (taken by an owner for each receive WR,
//   returned at its CQE or at its QP's destroy evidence). The engine
//   registers the arena on every context as region kNotifyArenaRegion with
//   local write only: no peer can address it.
// - NotifyGate: the countdown of one Submit's data tasks. Once every one of
//   them published COMPLETED the notification's route goes to its owner;
//   the first that publishes anything else withdraws the notification
//   FAILED, unsent (N2).
// - SendSlotRelease: a notification task's send slot goes back to its pool
//   when the task publishes (C1: the RNIC reads it no more).
// - NotifySeqs: the sender's sequence space per receiver process, with at
//   most kNotifyWindow notifications to one receiver not yet terminal (so a
//   live one never falls out of the receiver's duplicate window).
// - NotifyInbox: the receiver's side: a NotifyDedup per sender (control
//   address, process incarnation; N3) and the bounded queue PollNotifies
//   reads. The engine hands it only messages whose incarnation is the one
//   the endpoint's handshake recorded for the peer.
//
// What must stay true: a slot is in exactly one place (its pool's free
// list, a notification route, or one posted receive WR), and the RNIC can
// reach it only while it is posted; a gate dispatches at most once and
// never after it was spoiled.
//
// Thread safety: NotifySlots and NotifyInbox have a mutex each, a leaf
// (nothing is called under it). NotifyGate is lock-free; its dispatch runs
// on whichever thread published the last task. NotifySeqs is used under
// the engine's mutex.
#ifndef FERRY_ENGINE_NOTIFY_H_
#define FERRY_ENGINE_NOTIFY_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/mutation.h"
#include "base/mutex.h"
#include "engine/notify_wire.h"
#include "engine/task.h"
#include "ferry/types.h"

namespace ferry::engine {

struct TaskRoute;

// A slot holds one encoded notification (64-byte multiple).
inline constexpr uint64_t kNotifySlotBytes = (kNotifyWireBytesMax + 63) / 64 * 64;
// The arena's region id in each context's MR table: user regions count up
// from 1, so they never reach it.
inline constexpr uint64_t kNotifyArenaRegion = ~uint64_t{0};
inline constexpr uint32_t kNotifySendSlots = 256;
// Notifications to one receiver process not yet terminal, at most.
inline constexpr uint64_t kNotifyWindow = NotifyDedup::kWindow;

class NotifySlots {
 public:
  enum class Pool : uint8_t { kSend, kRecv };
  NotifySlots(uint32_t send_slots, uint32_t recv_slots);
  NotifySlots(const NotifySlots&) = delete;
  NotifySlots& operator=(const NotifySlots&) = delete;

  void* base() const { return mem_.get(); }
  size_t bytes() const { return size_t{total_} * kNotifySlotBytes; }
  uint64_t Addr(uint32_t slot) const;
  uint8_t* Data(uint32_t slot) const { return reinterpret_cast<uint8_t*>(Addr(slot)); }
  // A free slot of `pool`, or nullopt when none is left.
  std::optional<uint32_t> Take(Pool pool);
  // Returns a taken slot to its pool (CHECKs it was taken).
  void Give(uint32_t slot);
  uint32_t free(Pool pool) const;

 private:
  const uint32_t send_;
  const uint32_t total_;
  std::unique_ptr<uint8_t[]> mem_;
  mutable base::Mutex mu_;
  std::vector<uint32_t> free_send_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_recv_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> taken_ ABSL_GUARDED_BY(mu_);
};

// The notification task's hook: its send slot returns when it publishes.
class SendSlotRelease final : public PublishHook {
 public:
  SendSlotRelease(NotifySlots* slots, uint32_t slot) : slots_(slots), slot_(slot) {}
  void OnPublished(TaskStatus) override { slots_->Give(slot_); }

 private:
  NotifySlots* const slots_;
  const uint32_t slot_;
};

// The data tasks' hook (one gate per Submit with a notification).
class NotifyGate final : public PublishHook {
 public:
  using Dispatch = std::function<void(const std::shared_ptr<TaskRoute>&)>;
  // `tasks` >= 1 data tasks; `mutations` may be null.
  NotifyGate(uint32_t tasks, std::shared_ptr<TaskRoute> notify, Dispatch dispatch,
             const base::Mutations* mutations);
  void OnPublished(TaskStatus status) override;

 private:
  bool Mut(base::Mutation m) const { return mutations_ != nullptr && mutations_->on(m); }
  std::atomic<uint32_t> remaining_;
  std::atomic<bool> spoiled_{false};
  const std::shared_ptr<TaskRoute> notify_;
  const Dispatch dispatch_;
  const base::Mutations* const mutations_;
};

// Sender side, under the engine mutex.
class NotifySeqs {
 public:
  static constexpr size_t kPeersMax = 1 << 16;
  // The next sequence number to receiver process `peer`, recorded as held
  // by `task`; kResourceExhausted when the notification kNotifyWindow
  // before it is not terminal yet, or kPeersMax receivers are known.
  absl::StatusOr<uint64_t> Next(uint64_t peer, std::shared_ptr<const Task> task);

 private:
  struct Peer {
    uint64_t next_seq = 1;
    std::array<std::shared_ptr<const Task>, kNotifyWindow> ring;  // [seq % window]
  };
  std::map<uint64_t, Peer> peers_;
};

// Receiver side (any owner delivers; the user polls).
class NotifyInbox {
 public:
  static constexpr size_t kQueueMax = 1 << 16;
  static constexpr size_t kSendersMax = 1 << 16;
  enum class Verdict : uint8_t { kDelivered, kDuplicate, kTooOld, kQueueFull };
  struct Stats {
    uint64_t delivered = 0;
    uint64_t duplicates = 0;  // refused by NotifyDedup (a resend that had landed)
    uint64_t too_old = 0;
    uint64_t queue_full = 0;  // dropped: kQueueMax undelivered (the user does not poll)
  };
  explicit NotifyInbox(const base::Mutations* mutations) : mutations_(mutations) {}
  Verdict Deliver(Notification n);
  std::vector<Notification> Poll(size_t max);
  size_t queued() const;
  Stats stats() const;

 private:
  const base::Mutations* const mutations_;
  mutable base::Mutex mu_;
  // By sender (control address, incarnation), FIFO-bounded by kSendersMax.
  using SenderKey = std::pair<std::string, uint64_t>;
  std::map<SenderKey, NotifyDedup> dedup_ ABSL_GUARDED_BY(mu_);
  std::deque<SenderKey> dedup_order_ ABSL_GUARDED_BY(mu_);
  std::deque<Notification> queue_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_NOTIFY_H_
