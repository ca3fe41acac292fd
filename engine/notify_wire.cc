// engine/notify_wire.cc: the notification payload codec and the receiver's
// duplicate filter (see notify_wire.h for what must stay true).
#include "engine/notify_wire.h"

#include "absl/strings/str_format.h"
#include "base/check.h"
#include "engine/wire_bytes.h"

namespace ferry::engine {

std::vector<uint8_t> EncodeNotify(const NotifyMessage& m) {
  FERRY_CHECK_LE(m.message.size(), kNotifyBytesMax);
  WireWriter w;
  w.Le(kNotifyMagic, 4);
  w.Le(kNotifyVersion, 2);
  w.Le(0, 2);
  w.Le(m.incarnation, 8);
  w.Le(m.seq, 8);
  w.Le(m.batch, 8);
  w.Le(m.message.size(), 4);
  w.Bytes(absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(m.message.data()),
                                    m.message.size()));
  return w.Take();
}

absl::StatusOr<NotifyMessage> DecodeNotify(absl::Span<const uint8_t> bytes) {
  auto bad = [](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrFormat("notification: %s", why));
  };
  if (bytes.size() > kNotifyWireBytesMax) return bad("longer than the largest notification");
  WireReader r(bytes);
  const uint64_t magic = r.Le(4);
  const uint64_t version = r.Le(2);
  const uint64_t flags = r.Le(2);
  NotifyMessage m;
  m.incarnation = r.Le(8);
  m.seq = r.Le(8);
  m.batch = r.Le(8);
  const uint64_t len = r.Le(4);
  if (!r.ok()) return bad("truncated header");
  if (magic != kNotifyMagic) return bad("wrong magic");
  if (version != kNotifyVersion) {
    return absl::InvalidArgumentError(
        absl::StrFormat("notification: version %d not supported", version));
  }
  if (flags != 0) return bad("unknown flags");
  if (m.seq == 0) return bad("seq 0");
  if (len > kNotifyBytesMax) return bad("message longer than kNotifyBytesMax");
  const absl::Span<const uint8_t> body = r.Take(len);
  if (!r.ok()) return bad("truncated message");
  if (!r.done()) return bad("trailing bytes");
  m.message.assign(reinterpret_cast<const char*>(body.data()), body.size());
  return m;
}

NotifyDedup::Verdict NotifyDedup::Admit(uint64_t incarnation, uint64_t seq) {
  FERRY_CHECK_GE(seq, 1u);
  if (incarnation != incarnation_) {  // a new sender process: a new space
    incarnation_ = incarnation;
    highest_ = 0;
    seen_ = 0;
  }
  if (seq > highest_) {
    const uint64_t shift = seq - highest_;
    seen_ = shift >= kWindow ? 0 : seen_ << shift;
    seen_ |= 1;
    highest_ = seq;
    return Verdict::kAdmit;
  }
  const uint64_t back = highest_ - seq;
  if (back >= kWindow) return Verdict::kTooOld;
  const uint64_t bit = uint64_t{1} << back;
  if ((seen_ & bit) != 0) return Verdict::kDuplicate;
  seen_ |= bit;
  return Verdict::kAdmit;
}

}  // namespace ferry::engine
