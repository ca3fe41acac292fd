// engine/pending_keys.h: a worker's queues of slices waiting to be posted,
// one per key (context, peer NIC path), walked in key order.
//
// Thread safety: none. One worker's owner thread owns and uses it.
//
// What it replaces and why: a std::map from key to queue, whose keys left
// the map when their queue emptied. With traffic spread over many peers
// (a request per key per round) every request paid a tree search of string
// keys, an insert and an erase (~600 instructions per slice at 1024 keys,
// docs/operations.md 3.2). Here a key is found by its hash, a key that
// empties stays (idle) for its next request, and the sorted list of keys
// with work is rebuilt only from the keys that gained work since.
//
// What must stay true:
//   - Walk visits the listed keys in (context, path) order, each once: the
//     order of that std::map, including keys listed during a walk (visited
//     by that walk exactly when they sort after the key being visited). So
//     every post, and every trace, is what the map made.
//   - A key is listed from Of() until a walk ends with its queue empty. A
//     listed key is in sorted_ or in incoming_, once; sorted_ is in key
//     order.
//   - A key not listed is idle: its queue is empty and it is in the idle
//     FIFO (oldest first). At most idle_keys_max idle keys exist; past
//     that the oldest is re-keyed for a new key (no allocation) or freed.
//     The idle keys' rings hold at most idle_keys_max * kIdleSlotsPerKey
//     slots in all; a ring that would pass that is released.
//   - The directory is a hash set by the caller's key hash, hash_of(context,
//     path) (checked each time an entry takes a key). It is looked up,
//     never iterated (docs/design.md 7).
#ifndef FERRY_ENGINE_PENDING_KEYS_H_
#define FERRY_ENGINE_PENDING_KEYS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "base/check.h"

namespace ferry::engine {

// `Queue`: a FIFO with empty(), capacity() and ReleaseStorage() (a
// base::RingQueue). `Memo`: what the caller keeps per key besides the
// queue (the worker: where the key's endpoint sits in its store), reset to
// Memo{} when an entry takes a new key.
struct NoMemo {};
template <typename Queue, typename Memo = NoMemo>
class PendingKeys {
 public:
  using Key = std::pair<uint32_t, std::string>;  // (context, peer path)
  struct Entry {
    Key key;
    uint64_t hash = 0;         // the caller's hash of key
    uint64_t path_prefix = 0;  // PrefixOf(key.second): the walk's order, compared first
    Queue queue;
    Memo memo;
    bool listed = false;
    Entry* idle_prev = nullptr;  // idle FIFO links, null while listed
    Entry* idle_next = nullptr;
  };
  static constexpr size_t kIdleSlotsPerKey = 16;

  // `hash_of(context, path)`: the key hash callers pass to Of and Find;
  // checked against the hash Of was given whenever an entry takes a key.
  using HashFn = std::function<uint64_t(uint32_t, std::string_view)>;
  PendingKeys(size_t idle_keys_max, HashFn hash_of)
      : idle_keys_max_(idle_keys_max), hash_of_(std::move(hash_of)) {
    FERRY_CHECK_GT(idle_keys_max, 0u);
    FERRY_CHECK(hash_of_ != nullptr);
  }
  PendingKeys(const PendingKeys&) = delete;
  PendingKeys& operator=(const PendingKeys&) = delete;

  // The queue of (context, path), listed: the next walk visits it.
  Queue& Of(uint32_t context, std::string_view path, uint64_t hash) {
    Entry* e = Lookup(context, path, hash);
    if (e == nullptr) {
      e = Make(context, path, hash);
    } else if (e->listed) {
      return e->queue;
    } else {
      Unidle(e);
    }
    e->listed = true;
    incoming_.push_back(e);
    return e->queue;
  }

  // The key hash Of takes (a caller without one computes it here).
  uint64_t HashOf(uint32_t context, std::string_view path) const { return hash_of_(context, path); }

  // The queue of (context, path) if the key is known (listed or idle), else
  // nullptr. Lists nothing.
  const Queue* Find(uint32_t context, std::string_view path) const {
    const Entry* e = Lookup(context, path, HashOf(context, path));
    return e == nullptr ? nullptr : &e->queue;
  }
  // The queue of a listed key, to change (an idle key's queue is empty and
  // must stay so until Of lists it), else nullptr.
  Queue* FindListed(uint32_t context, std::string_view path) {
    Entry* e = Lookup(context, path, HashOf(context, path));
    return e == nullptr || !e->listed ? nullptr : &e->queue;
  }

  // Calls visit(const Key&, Queue&, Memo&) for every listed key, in key order
  // (see the top comment for keys listed meanwhile); then the keys whose
  // queues are empty become idle. `visit` may call Of() and Find(), never
  // Walk().
  template <typename Visit>
  void Walk(Visit&& visit) {
    FERRY_CHECK(!walking_);
    walking_ = true;
    Merge();
    // Bounded: every pass visits a new sorted_ position; Merge only inserts.
    for (size_t i = 0; i < sorted_.size(); ++i) {
      Entry* e = sorted_[i];
      visit(static_cast<const Key&>(e->key), e->queue, e->memo);
      if (!incoming_.empty()) {
        // Listed during the visit: those after e are visited by this walk.
        Merge();
        i = static_cast<size_t>(std::lower_bound(sorted_.begin(), sorted_.end(), e, EntryLess()) -
                                sorted_.begin());
        FERRY_CHECK(sorted_[i] == e);
      }
    }
    walking_ = false;
    size_t kept = 0;
    for (Entry* e : sorted_) {
      if (e->queue.empty()) {
        Idle(e);
      } else {
        sorted_[kept++] = e;
      }
    }
    sorted_.resize(kept);
  }

  // Calls f(const Key&, const Queue&, Memo&) for every listed key, in no
  // order.
  template <typename F>
  void ForEachListed(F&& f) {
    for (Entry* e : sorted_) f(static_cast<const Key&>(e->key), std::as_const(e->queue), e->memo);
    for (Entry* e : incoming_) f(static_cast<const Key&>(e->key), std::as_const(e->queue), e->memo);
  }

  size_t listed() const { return sorted_.size() + incoming_.size(); }
  size_t idle() const { return idle_count_; }
  size_t idle_slots() const { return idle_slots_; }

 private:
  struct Probe {
    uint32_t context;
    std::string_view path;
    uint64_t hash;
  };
  struct DirHash {
    using is_transparent = void;
    size_t operator()(const std::unique_ptr<Entry>& e) const {
      return static_cast<size_t>(e->hash);
    }
    size_t operator()(const Probe& p) const { return static_cast<size_t>(p.hash); }
  };
  struct DirEq {
    using is_transparent = void;
    static Probe Of(const std::unique_ptr<Entry>& e) {
      return Probe{e->key.first, e->key.second, e->hash};
    }
    static Probe Of(const Probe& p) { return p; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      const Probe x = Of(a), y = Of(b);
      return x.hash == y.hash && x.context == y.context && x.path == y.path;
    }
  };
  // Key's own order (context, then path bytes as unsigned chars). The first
  // eight path bytes, big-endian and zero-padded, decide most pairs in one
  // compare: unequal prefixes order as the paths do (a shorter path's
  // padding sorts first, as the path does), equal ones fall back to the
  // whole key.
  static uint64_t PrefixOf(std::string_view path) {
    uint64_t p = 0;
    for (size_t i = 0; i < 8; ++i)
      p = (p << 8) | (i < path.size() ? static_cast<uint8_t>(path[i]) : 0u);
    return p;
  }
  struct EntryLess {
    bool operator()(const Entry* a, const Entry* b) const {
      if (a->key.first != b->key.first) return a->key.first < b->key.first;
      if (a->path_prefix != b->path_prefix) return a->path_prefix < b->path_prefix;
      return a->key.second < b->key.second;
    }
  };

  Entry* Lookup(uint32_t context, std::string_view path, uint64_t hash) const {
    auto it = directory_.find(Probe{context, path, hash});
    return it == directory_.end() ? nullptr : it->get();
  }

  // A new entry for the key, neither listed nor idle: the oldest idle
  // entry re-keyed when the idle FIFO is full, else a new one.
  Entry* Make(uint32_t context, std::string_view path, uint64_t hash) {
    // A caller's hash that is not the key's would give the key a second
    // entry (and the walk a second visit).
    FERRY_CHECK_EQ(hash, hash_of_(context, path));
    std::unique_ptr<Entry> e;
    if (idle_count_ >= idle_keys_max_) {
      Entry* old = idle_head_;
      Unidle(old);
      auto node = directory_.extract(Probe{old->key.first, old->key.second, old->hash});
      FERRY_CHECK(!node.empty());
      e = std::move(node.value());
      e->key.first = context;
      e->key.second.assign(path);  // reuses the old path's capacity
      e->memo = Memo{};
    } else {
      e = std::make_unique<Entry>();
      e->key = Key{context, std::string(path)};
    }
    e->hash = hash;
    e->path_prefix = PrefixOf(path);
    Entry* raw = e.get();
    const bool inserted = directory_.insert(std::move(e)).second;
    FERRY_CHECK(inserted);
    return raw;
  }

  // Puts incoming_ into sorted_ (key order): an append when incoming_ is
  // sorted and after sorted_'s last key (traffic in key order), else a sort
  // and a merge.
  void Merge() {
    if (incoming_.empty()) return;
    if (!std::is_sorted(incoming_.begin(), incoming_.end(), EntryLess()))
      std::sort(incoming_.begin(), incoming_.end(), EntryLess());
    const size_t mid = sorted_.size();
    sorted_.insert(sorted_.end(), incoming_.begin(), incoming_.end());
    incoming_.clear();
    if (mid > 0 && EntryLess()(sorted_[mid], sorted_[mid - 1]))
      std::inplace_merge(sorted_.begin(), sorted_.begin() + static_cast<ptrdiff_t>(mid),
                         sorted_.end(), EntryLess());
  }

  // Listed -> idle (at the FIFO's back); past idle_keys_max the oldest is
  // freed.
  void Idle(Entry* e) {
    FERRY_CHECK(e->listed && e->queue.empty());
    e->listed = false;
    if (idle_slots_ + e->queue.capacity() > idle_keys_max_ * kIdleSlotsPerKey)
      e->queue.ReleaseStorage();
    idle_slots_ += e->queue.capacity();
    e->idle_prev = idle_tail_;
    e->idle_next = nullptr;
    (idle_tail_ != nullptr ? idle_tail_->idle_next : idle_head_) = e;
    idle_tail_ = e;
    ++idle_count_;
    if (idle_count_ > idle_keys_max_) {
      Entry* old = idle_head_;
      Unidle(old);
      FERRY_CHECK_EQ(directory_.erase(Probe{old->key.first, old->key.second, old->hash}), 1u);
    }
  }

  // Out of the idle FIFO.
  void Unidle(Entry* e) {
    FERRY_CHECK(!e->listed && e->queue.empty());
    FERRY_CHECK_GT(idle_count_, 0u);
    FERRY_CHECK_LE(e->queue.capacity(), idle_slots_);
    idle_slots_ -= e->queue.capacity();
    (e->idle_prev != nullptr ? e->idle_prev->idle_next : idle_head_) = e->idle_next;
    (e->idle_next != nullptr ? e->idle_next->idle_prev : idle_tail_) = e->idle_prev;
    e->idle_prev = e->idle_next = nullptr;
    --idle_count_;
  }

  const size_t idle_keys_max_;
  const HashFn hash_of_;
  absl::flat_hash_set<std::unique_ptr<Entry>, DirHash, DirEq> directory_;  // every entry
  std::vector<Entry*> sorted_;                                             // listed, key order
  std::vector<Entry*> incoming_;  // listed since the last Merge
  Entry* idle_head_ = nullptr;    // oldest idle
  Entry* idle_tail_ = nullptr;
  size_t idle_count_ = 0;
  size_t idle_slots_ = 0;  // ring slots of the idle entries
  bool walking_ = false;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_PENDING_KEYS_H_
