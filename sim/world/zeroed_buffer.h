// sim/world/zeroed_buffer.h: a host's registered memory in the simulated
// world, zero-filled lazily.
//
// The random world gives each host up to tens of MiB that a run touches in
// small part; std::vector<uint8_t>(n) writes every page (and each forked
// seed faulted all of them in), so the buffer comes from calloc, whose large
// blocks are fresh zero pages the kernel maps on first touch.
//
// What must stay true: data() is non-null for size() > 0, every byte reads
// zero until written, and the memory is owned here (moved, never copied).
#ifndef FERRY_SIM_WORLD_ZEROED_BUFFER_H_
#define FERRY_SIM_WORLD_ZEROED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "base/check.h"

namespace ferry::simworld {

class ZeroedBuffer {
 public:
  ZeroedBuffer() = default;
  // Replaces the contents with `n` zero bytes.
  void Reset(size_t n) {
    bytes_.reset();
    size_ = 0;
    if (n == 0) return;
    bytes_.reset(static_cast<uint8_t*>(std::calloc(n, 1)));
    FERRY_CHECK(bytes_ != nullptr);
    size_ = n;
  }
  uint8_t* data() { return bytes_.get(); }
  const uint8_t* data() const { return bytes_.get(); }
  size_t size() const { return size_; }
  uint8_t* begin() { return data(); }
  uint8_t* end() { return data() + size_; }
  const uint8_t* begin() const { return data(); }
  const uint8_t* end() const { return data() + size_; }
  uint8_t& operator[](size_t i) {
    FERRY_CHECK_LT(i, size_);
    return bytes_[i];
  }
  const uint8_t& operator[](size_t i) const {
    FERRY_CHECK_LT(i, size_);
    return bytes_[i];
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t[], Free> bytes_;
  size_t size_ = 0;
};

}  // namespace ferry::simworld

#endif  // FERRY_SIM_WORLD_ZEROED_BUFFER_H_
