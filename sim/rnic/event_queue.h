// sim/rnic/event_queue.h: the simulated RNIC's queue of future events,
// popped in (t_ns, seq) order.
//
// Thread-safety: none; owned by one Fabric and used by its stepping thread.
//
// What must stay true:
// - Events pop in strictly increasing (t_ns, seq) order over the events
//   present; seq is unique (the fabric numbers every push), so the order
//   does not depend on how the heap is laid out, and a different layout
//   replays every trace unchanged.
// - A channel (Event::chan != kNoChannel) is a FIFO in time: its events
//   are pushed with non-decreasing t_ns, and only its head is in the heap.
// - The heap holds each channel's head and every standalone event; a
//   channel's FIFO keeps at most twice its live events.
// - (Tried 2026-12-06 and not kept: 24-byte heap entries {t_ns, seq, ref}
//   with the events in their FIFOs and a slab. bench/scale at 1024
//   endpoints, an average of 100 entries in the heap, counted the same
//   instructions per slice: the cost is the levels' compares, not the
//   bytes moved.)
// - Bounded: at most 2^28 entries in the heap, 2^26 events per channel.
#ifndef FERRY_SIM_RNIC_EVENT_QUEUE_H_
#define FERRY_SIM_RNIC_EVENT_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/check.h"

namespace ferry::sim {

// Event: a struct with `uint64_t t_ns`, `uint64_t seq` and `uint32_t chan`
// (kNoChannel for a standalone event).
template <typename Event>
class EventQueue {
 public:
  static constexpr uint32_t kNoChannel = 0xffffffffu;

  bool empty() const { return heap_.empty(); }
  // Heap entries: channel heads plus standalone events.
  size_t size() const { return heap_.size(); }
  // Time of the next event to pop; the queue must not be empty.
  uint64_t top_t_ns() const { return heap_.front().t_ns; }
  // True when `chan` holds events behind the one last popped from it.
  bool ChannelHasMore(uint32_t chan) const { return chan < chans_.size() && !chans_[chan].empty(); }

  void Push(const Event& e) {
    FERRY_CHECK_LT(heap_.size(), size_t{1} << 28);
    if (e.chan == kNoChannel) {
      HeapPush(e);
      return;
    }
    if (e.chan >= chans_.size()) chans_.resize(e.chan + 1);
    Fifo& f = chans_[e.chan];
    FERRY_CHECK_LT(f.size(), size_t{1} << 26);
    if (f.empty()) {
      HeapPush(e);
    } else {
      FERRY_CHECK_LE(f.back().t_ns, e.t_ns);  // a channel is FIFO in time
    }
    f.push_back(e);
  }

  // Removes and returns the earliest event; the queue must not be empty.
  Event PopNext() {
    const Event e = heap_.front();
    if (e.chan != kNoChannel) {
      Fifo& f = chans_[e.chan];
      FERRY_CHECK(!f.empty() && f.front().seq == e.seq);
      f.pop_front();
      if (!f.empty()) {
        SiftDown(f.front());  // the channel's next event replaces the top
        return e;
      }
    }
    HeapPop();
    return e;
  }

 private:
  // A channel's FIFO: a vector read from `head` (reset when drained), not a
  // std::deque: libstdc++'s deque allocates when constructed and is copied
  // (not moved) when chans_ grows, which cost more than the events did.
  struct Fifo {
    std::vector<Event> v;
    size_t head = 0;
    bool empty() const { return head == v.size(); }
    size_t size() const { return v.size() - head; }
    const Event& front() const { return v[head]; }
    const Event& back() const { return v.back(); }
    void push_back(const Event& e) { v.push_back(e); }
    void pop_front() {
      if (++head == v.size()) {
        v.clear();
        head = 0;
      } else if (head >= 1024 && head * 2 >= v.size()) {
        // A channel that never drains keeps at most twice its live events.
        v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(head));
        head = 0;
      }
    }
  };

  static bool Less(const Event& x, const Event& y) {
    return x.t_ns != y.t_ns ? x.t_ns < y.t_ns : x.seq < y.seq;
  }
  // A binary min-heap with a moving hole (a 4-ary one was tried and cost
  // more: docs/operations.md 3.2).
  void HeapPush(const Event& e) {
    heap_.push_back(e);
    size_t i = heap_.size() - 1;
    while (i > 0) {
      const size_t p = (i - 1) / 2;
      if (!Less(e, heap_[p])) break;
      heap_[i] = heap_[p];
      i = p;
    }
    heap_[i] = e;
  }
  void HeapPop() {
    const Event last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) SiftDown(last);
  }
  // Puts `e` in place of the top and sifts it down.
  void SiftDown(const Event& e) {
    const size_t n = heap_.size();
    size_t i = 0;
    for (;;) {
      size_t c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && Less(heap_[c + 1], heap_[c])) ++c;
      if (!Less(heap_[c], e)) break;
      heap_[i] = heap_[c];
      i = c;
    }
    heap_[i] = e;
  }

  std::vector<Event> heap_;
  std::vector<Fifo> chans_;
};

}  // namespace ferry::sim

#endif  // FERRY_SIM_RNIC_EVENT_QUEUE_H_
