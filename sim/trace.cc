// sim/trace.cc: the rolling FNV-1a trace hash and its bounded record.
//
// Owns: the byte layout folded into the hash per entry (see sim/trace.h);
// changing it changes every pinned trace hash.
// What must stay true: hash_ and seq_ advance for every Draw/Event whatever
// the record mode; the record holds at most record_max_ entries, in seq
// order, each with the hash after it.
#include "sim/trace.h"

#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/fnv1a.h"

namespace ferry::sim {
namespace {

constexpr unsigned char kDrawTag = 'D';
constexpr unsigned char kEventTag = 'E';

uint64_t FoldByte(uint64_t state, unsigned char byte) {
  return base::Fnv1a64Update(state, &byte, 1);
}

}  // namespace

Trace::Trace(size_t record_max) : record_max_(record_max), hash_(base::kFnv1a64Offset) {}

void Trace::RecordFrom(uint64_t first_seq) {
  FERRY_CHECK_EQ(seq_, 0U);
  window_mode_ = true;
  window_first_seq_ = first_seq;
}

template <typename MakeText>
void Trace::Record(const MakeText& make_text) {
  if (record_max_ == 0) return;
  if (window_mode_) {
    if (seq_ < window_first_seq_ || seq_ - window_first_seq_ >= record_max_) return;
  } else if (record_.size() == record_max_) {
    record_.pop_front();
  }
  record_.push_back(TraceEntry{seq_, now_ns_, hash_, make_text()});
  FERRY_CHECK_LE(record_.size(), record_max_);
}

void Trace::Draw(uint32_t stream, uint64_t value) {
  uint64_t h = FoldByte(hash_, kDrawTag);
  h = base::Fnv1a64UpdateU64(h, stream);
  hash_ = base::Fnv1a64UpdateU64(h, value);
  Record([&] { return absl::StrFormat("draw s=%u v=0x%016x", stream, value); });
  ++seq_;
}

void Trace::Event(std::string_view kind, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = FoldByte(hash_, kEventTag);
  h = base::Fnv1a64Update(h, reinterpret_cast<const unsigned char*>(kind.data()), kind.size());
  h = FoldByte(h, 0);
  h = base::Fnv1a64UpdateU64(h, a);
  h = base::Fnv1a64UpdateU64(h, b);
  hash_ = base::Fnv1a64UpdateU64(h, c);
  Record([&] { return absl::StrFormat("event %s %u %u %u", kind, a, b, c); });
  ++seq_;
}

}  // namespace ferry::sim
