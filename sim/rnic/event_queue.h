// sim/rnic/event_queue.h: the simulated RNIC's queue of future events,
// popped in (t_ns, seq) order.
//
// Thread-safety: none; owned by one Fabric and used by its stepping thread.
//
// What must stay true:
// - Events pop in strictly increasing (t_ns, seq) order over the events
//   present. seq is unique (the fabric numbers every push), so the order
//   does not depend on where an event waits: any layout below replays every
//   trace unchanged.
// - An event waits in one of three places, each sorted by (t_ns, seq):
//   * a lane (a FIFO the caller names, e.g. one device's packets), when
//     the lane is empty or its last event is not later than this one;
//   * else its channel's FIFO (Event::chan, e.g. one QP's requests);
//   * else alone.
//   Only a FIFO's head and the lone events are in the heap, so the heap is
//   as deep as the number of FIFOs that hold events, not the events.
// - A channel is FIFO in time: the fabric gives its events non-decreasing
//   t_ns (a path's arrivals, a QP's CQE ready times); checked among those
//   that wait in the channel's FIFO.
// - Why lanes (2026-12-06): with per-QP channels alone the heap held a head
//   per busy QP (bench/scale at 1024 endpoints: 100 entries on average
//   against 1 at one endpoint, and popping was the simulated RNIC's largest
//   cost per slice). A device serializes everything it sends, so its
//   packets leave in time order, and without jitter they arrive in it.
// - Bounded: at most 2^28 heap entries, 2^26 events per channel; a FIFO
//   that never drains keeps at most twice its live events.
#ifndef FERRY_SIM_RNIC_EVENT_QUEUE_H_
#define FERRY_SIM_RNIC_EVENT_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/check.h"

namespace ferry::sim {

// Event: a struct with `uint64_t t_ns`, `uint64_t seq` and `uint32_t chan`
// (kNoChannel: the event is in no channel).
template <typename Event>
class EventQueue {
 public:
  static constexpr uint32_t kNoChannel = 0xffffffffu;
  static constexpr uint32_t kNoLane = 0xffffffffu;

  bool empty() const { return heap_.empty(); }
  // Heap entries: FIFO heads plus lone events.
  size_t size() const { return heap_.size(); }
  // Time of the next event to pop; the queue must not be empty.
  uint64_t top_t_ns() const { return heap_.front().t_ns; }

  // Queues `e` in `lane` (kNoLane: none) if it keeps the lane sorted.
  void Push(const Event& e, uint32_t lane) {
    FERRY_CHECK_LT(heap_.size(), size_t{1} << 28);
    if (lane != kNoLane && PushToLane(e, lane)) return;
    if (e.chan != kNoChannel) {
      if (e.chan >= chans_.size()) GrowChannels(e.chan);
      Fifo& f = chans_[e.chan];
      FERRY_CHECK(f.empty() || f.back().t_ns <= e.t_ns);  // a channel is FIFO in time
      FERRY_CHECK_LT(f.v.size(), size_t{1} << 26);
      PushTo(f, e, kChanTag | e.chan);
      return;
    }
    uint32_t slot;
    if (free_.empty()) {
      slot = static_cast<uint32_t>(loose_.size());
      loose_.push_back(e);
    } else {
      slot = free_.back();
      free_.pop_back();
      loose_[slot] = e;
    }
    HeapPush(Entry{e.t_ns, e.seq, kLooseTag | slot});
  }

  // Removes and returns the earliest event; the queue must not be empty.
  Event PopNext() {
    const Entry top = heap_.front();
    const uint32_t index = top.ref & kIndexMask;
    Event e;
    if ((top.ref & kTagMask) == kLooseTag) {
      e = loose_[index];
      FERRY_CHECK_EQ(e.seq, top.seq);
      free_.push_back(index);
      HeapPop();
    } else {
      Fifo& f = (top.ref & kTagMask) == kLaneTag ? lanes_[index] : chans_[index];
      FERRY_CHECK(!f.empty() && f.front().seq == top.seq);
      e = f.front();
      f.pop_front();
      if (f.empty()) {
        HeapPop();
      } else {
        SiftDown(Entry{f.front().t_ns, f.front().seq, top.ref});  // the FIFO's next head
      }
    }
    return e;
  }

 private:
  static constexpr uint32_t kTagMask = 0xc0000000u;
  static constexpr uint32_t kIndexMask = 0x3fffffffu;
  static constexpr uint32_t kLaneTag = 0x00000000u;
  static constexpr uint32_t kChanTag = 0x40000000u;
  static constexpr uint32_t kLooseTag = 0x80000000u;
  struct Entry {
    uint64_t t_ns;
    uint64_t seq;
    uint32_t ref;  // a tag (lane, channel, lone) | its index
  };
  // A FIFO: a vector read from `head` (reset when drained), not a
  // std::deque: libstdc++'s deque allocates when constructed and is copied
  // (not moved) when its owner vector grows, which cost more than the
  // events did.
  struct Fifo {
    std::vector<Event> v;
    size_t head = 0;
    bool empty() const { return head == v.size(); }
    const Event& front() const { return v[head]; }
    const Event& back() const { return v.back(); }
    void pop_front() {
      if (++head == v.size()) {
        v.clear();
        head = 0;
      } else if (head >= 1024 && head * 2 >= v.size()) {
        v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(head));
        head = 0;
      }
    }
  };

  [[gnu::noinline]] void GrowChannels(uint32_t chan) {
    FERRY_CHECK_LT(chan, kIndexMask);
    chans_.resize(size_t{chan} + 1);
  }
  bool PushToLane(const Event& e, uint32_t lane) {
    if (lane >= lanes_.size()) {
      FERRY_CHECK_LT(lane, kIndexMask);
      lanes_.resize(size_t{lane} + 1);
    }
    Fifo& l = lanes_[lane];
    if (!l.empty() && e.t_ns < l.back().t_ns) return false;
    PushTo(l, e, kLaneTag | lane);
    return true;
  }
  void PushTo(Fifo& f, const Event& e, uint32_t ref) {
    if (f.empty()) HeapPush(Entry{e.t_ns, e.seq, ref});
    f.v.push_back(e);
  }

  static bool Less(const Entry& x, const Entry& y) {
    return x.t_ns != y.t_ns ? x.t_ns < y.t_ns : x.seq < y.seq;
  }
  // A binary min-heap with a moving hole (a 4-ary one was tried and cost
  // more: docs/operations.md 3.2).
  void HeapPush(const Entry& e) {
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
    const Entry last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) SiftDown(last);
  }
  // Puts `e` in place of the top and sifts it down.
  void SiftDown(const Entry& e) {
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

  std::vector<Entry> heap_;
  std::vector<Fifo> lanes_;
  std::vector<Fifo> chans_;
  std::vector<Event> loose_;    // lone events, by slot
  std::vector<uint32_t> free_;  // free slots of loose_
};

}  // namespace ferry::sim

#endif  // FERRY_SIM_RNIC_EVENT_QUEUE_H_
