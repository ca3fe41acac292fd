// engine/notify_wire.h: a notification as it travels in one SEND, and the
// receiver's duplicate filter (docs/design.md section 4, "Notifications";
// engine/notify.h uses both).
//
// Owns: the codec of the SEND payload and NotifyDedup, the per-sender window
// of delivered sequence numbers.
//
// Wire format, little-endian, byte by byte:
//   u32 magic 0x5946544e ("NTFY"), u16 version 1, u16 flags (0), u64 the
//   sender's incarnation, u64 seq (>= 1, one space per (sender incarnation,
//   receiver)), u64 batch (the sender's batch id; 0: a standalone
//   notification), u32 message length (<= kNotifyBytesMax), the message.
//
// What must stay true: DecodeNotify is strict and total (short, oversized,
// trailing bytes, wrong magic, version or flags, seq 0: kInvalidArgument,
// never a crash, nothing allocated past kNotifyBytesMax); Decode(Encode(m))
// == m. NotifyDedup admits a (sender incarnation, seq) at most once: a seq
// it has admitted, or one older than its window, is refused; a new sender
// incarnation starts a new sequence space (the old one is gone with its
// process).
//
// Thread safety: pure functions on values; a NotifyDedup is used by one
// owner worker.
#ifndef FERRY_ENGINE_NOTIFY_WIRE_H_
#define FERRY_ENGINE_NOTIFY_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/types.h"

namespace ferry::engine {

inline constexpr uint32_t kNotifyMagic = 0x5946544eu;
inline constexpr uint16_t kNotifyVersion = 1;
inline constexpr size_t kNotifyBytesMax = kNotifyMessageBytesMax;  // the user's message
inline constexpr size_t kNotifyHeaderBytes = 4 + 2 + 2 + 8 + 8 + 8 + 4;
inline constexpr size_t kNotifyWireBytesMax = kNotifyHeaderBytes + kNotifyBytesMax;

struct NotifyMessage {
  uint64_t incarnation = 0;
  uint64_t seq = 0;
  uint64_t batch = 0;
  std::string message;
  friend bool operator==(const NotifyMessage&, const NotifyMessage&) = default;
};

// The caller keeps message within kNotifyBytesMax (checked).
std::vector<uint8_t> EncodeNotify(const NotifyMessage& m);
absl::StatusOr<NotifyMessage> DecodeNotify(absl::Span<const uint8_t> bytes);

// Per sender: the highest seq admitted and a bitmap of the kWindow seqs at
// and below it. A sender keeps at most kWindow notifications to one peer
// unacknowledged (docs/design.md 10.1), so a seq that falls out of the
// window was admitted or is a stale resend: refused either way.
class NotifyDedup {
 public:
  static constexpr uint64_t kWindow = 64;
  enum class Verdict : uint8_t { kAdmit, kDuplicate, kTooOld };
  // Admits (and records) or refuses seq (>= 1) from `incarnation`.
  Verdict Admit(uint64_t incarnation, uint64_t seq);

 private:
  uint64_t incarnation_ = 0;
  uint64_t highest_ = 0;  // 0: nothing admitted from incarnation_
  uint64_t seen_ = 0;     // bit i: highest_ - i admitted
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_NOTIFY_WIRE_H_
