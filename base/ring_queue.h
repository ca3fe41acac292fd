// base/ring_queue.h: a FIFO queue in one growable ring buffer.
//
// Why not std::deque: libstdc++'s deque allocates a 512-byte chunk per 512
// bytes of elements, so a queue of large elements (a worker's inbox items
// are a few hundred bytes) allocates on almost every push_back even when it
// never holds more than a handful. A RingQueue allocates only when it grows
// past its largest size so far (doubling), so a queue that is filled and
// drained in steady state allocates nothing. absl has no ring buffer.
//
// Thread safety: none (the owner of the queue locks around it).
// Elements can also be put back at the front (push_front: a worker returns
// slices it did not post to the head of their queue) and read by position
// (operator[]: 0 is the oldest).
//
// What must stay true: elements leave in the order they entered (an element
// pushed to the front leaves first); `head_`
// indexes the oldest element when size_ > 0; the capacity is 0 or a power
// of two; slots outside [head_, head_ + size_) hold moved-from values.
#ifndef FERRY_BASE_RING_QUEUE_H_
#define FERRY_BASE_RING_QUEUE_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "base/check.h"

namespace ferry::base {

template <typename T>
class RingQueue {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return slots_.size(); }

  void push_back(T&& v) { emplace_back(std::move(v)); }
  void push_back(const T& v) { emplace_back(v); }
  // Assigns a T made of `args` to the free slot past the back.
  template <typename... Args>
  void emplace_back(Args&&... args) {
    if (size_ == slots_.size()) Grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = T{std::forward<Args>(args)...};
    ++size_;
  }
  void push_front(T v) {
    if (size_ == slots_.size()) Grow();
    head_ = (head_ + slots_.size() - 1) & (slots_.size() - 1);
    slots_[head_] = std::move(v);
    ++size_;
  }
  T& front() {
    FERRY_CHECK_GT(size_, 0u);
    return slots_[head_];
  }
  const T& front() const {
    FERRY_CHECK_GT(size_, 0u);
    return slots_[head_];
  }
  T& back() {
    FERRY_CHECK_GT(size_, 0u);
    return slots_[(head_ + size_ - 1) & (slots_.size() - 1)];
  }
  // The i-th element from the front.
  const T& operator[](size_t i) const {
    FERRY_CHECK_LT(i, size_);
    return slots_[(head_ + i) & (slots_.size() - 1)];
  }
  // Frees the ring of an empty queue (capacity 0 after).
  void ReleaseStorage() {
    FERRY_CHECK_EQ(size_, 0u);
    std::vector<T>().swap(slots_);
    head_ = 0;
  }
  void pop_front() {
    FERRY_CHECK_GT(size_, 0u);
    slots_[head_] = T();  // releases what the element held
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
  }

 private:
  void Grow() {
    const size_t n = slots_.empty() ? 8 : slots_.size() * 2;
    std::vector<T> grown(n);
    for (size_t i = 0; i < size_; ++i)
      grown[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    slots_ = std::move(grown);
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace ferry::base

#endif  // FERRY_BASE_RING_QUEUE_H_
