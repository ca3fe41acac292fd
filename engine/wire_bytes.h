// engine/wire_bytes.h: the little-endian byte writer and bounds-checked
// reader the control-message codecs share (descriptor_wire.cc,
// auth/auth_wire.cc).
//
// What must stay true: integers are written byte by byte, least significant
// first (never memcpy of a value), so every host encodes alike; a Reader
// never reads past its span: any short read latches !ok() and returns 0 or
// empty from then on; a string is a u16 length then its bytes, and a Reader
// refuses (latching !ok()) one longer than the bound it is asked with, before
// allocating.
//
// Thread safety: values; one thread per object.
#ifndef FERRY_ENGINE_WIRE_BYTES_H_
#define FERRY_ENGINE_WIRE_BYTES_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace ferry::engine {

class WireWriter {
 public:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  // Writes at most `max` bytes of `s` (the caller validated the length).
  void Str(const std::string& s, size_t max) {
    const size_t n = std::min(s.size(), max);
    Le(n, 2);
    out_.insert(out_.end(), s.begin(), s.begin() + static_cast<ptrdiff_t>(n));
  }
  void Bytes(absl::Span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class WireReader {
 public:
  explicit WireReader(absl::Span<const uint8_t> in) : in_(in) {}
  bool ok() const { return ok_; }
  bool done() const { return pos_ == in_.size(); }
  size_t remaining() const { return in_.size() - pos_; }
  uint64_t Le(int n) {
    if (!ok_ || in_.size() - pos_ < static_cast<size_t>(n)) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{in_[pos_ + static_cast<size_t>(i)]} << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  std::string Str(size_t max) {
    const size_t n = Le(2);
    if (!ok_ || n > max || in_.size() - pos_ < n) {
      ok_ = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  // Fills `out` entirely, or latches !ok() and leaves it untouched.
  void Bytes(absl::Span<uint8_t> out) {
    if (!ok_ || in_.size() - pos_ < out.size()) {
      ok_ = false;
      return;
    }
    std::copy_n(in_.begin() + static_cast<ptrdiff_t>(pos_), out.size(), out.begin());
    pos_ += out.size();
  }
  // The next n bytes as a span (empty and !ok() when fewer remain).
  absl::Span<const uint8_t> Take(size_t n) {
    if (!ok_ || in_.size() - pos_ < n) {
      ok_ = false;
      return {};
    }
    auto s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  absl::Span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_WIRE_BYTES_H_
