// engine/endpoint_store.h: one owner's endpoint store, with SIEVE eviction.
//
// The store maps EndpointKey -> V (the owner's endpoint record) with a fixed
// capacity. Eviction follows SIEVE (Zhang et al., "SIEVE is Simpler than
// LRU", NSDI'24), written from its published description:
//   - entries sit in a queue, new ones inserted at the head, each with a
//     `visited` bit that a hit (Find) sets;
//   - the hand starts at the tail and moves toward the head; a visited entry
//     has its bit cleared and is passed; the first unvisited entry is the
//     victim; the hand stays at the victim's predecessor (toward the head)
//     and wraps to the tail after the head.
// Ferry's twist (issue 4 item 4): idle victims first. The first sweep passes
// over entries the caller's predicate calls busy (they keep their place and
// their bit is cleared as usual); only when two full turns find no idle
// unvisited entry does the plain SIEVE choice (any unvisited entry) apply.
// The victim is removed and returned: the caller retires it (eviction never
// destroys anything itself), and the key is free at once for a reconnect.
//
// Thread safety: none; each owner worker has its own store per device
// context, and only that worker touches it (C5). Eviction therefore never
// crosses owners.
// What must stay true: size() <= capacity(); every key appears once; the
// hand is either unset or points at a live entry; every walk is bounded by
// 2 x size + 1 steps (CheckInvariants()); epoch_ moves with every insert
// and removal, so a Memo filled before one is never taken after it (list
// nodes live until their removal).
#ifndef FERRY_ENGINE_ENDPOINT_STORE_H_
#define FERRY_ENGINE_ENDPOINT_STORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <list>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "engine/owner.h"

namespace ferry::engine {

std::string EndpointKeyString(const EndpointKey& key);

template <typename V>
class EndpointStore {
 private:
  struct Node;

 public:
  // A holder's memo of one key's entry (a worker keeps one per key with
  // queued slices): Find and Peek through it skip the lookup while it
  // names this store and nothing was inserted or removed since it was
  // filled (list nodes move only then). `node` null: the key was absent.
  struct Memo {
    const EndpointStore* store = nullptr;
    uint64_t epoch = 0;
    Node* node = nullptr;
  };
  struct Evicted {
    EndpointKey key;
    V value;
    bool was_idle = false;
  };
  using IdleFn = absl::FunctionRef<bool(const EndpointKey&, const V&)>;

  explicit EndpointStore(size_t capacity) : capacity_(capacity) { FERRY_CHECK_GT(capacity, 0u); }
  EndpointStore(const EndpointStore&) = delete;
  EndpointStore& operator=(const EndpointStore&) = delete;

  size_t size() const { return index_.size(); }
  size_t capacity() const { return capacity_; }

  // A hit: returns the value and marks the entry visited. nullptr if absent.
  // `K`: EndpointKey, EndpointKeyView or HashedEndpointKeyView.
  template <typename K>
  V* Find(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    it->second->visited = true;
    return &it->second->value;
  }
  // Looks without counting as a hit.
  template <typename K>
  const V* Peek(const K& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &it->second->value;
  }
  // Find and Peek through `memo` (refreshed when stale); `key` is looked
  // up only then, and must be the key the memo was filled for.
  template <typename K>
  V* Find(const K& key, Memo* memo) {
    Node* n = Through(key, memo);
    if (n == nullptr) return nullptr;
    n->visited = true;
    return &n->value;
  }
  // Whether `memo` is current: Find(key, memo) would look nothing up.
  bool Fresh(const Memo& memo) const { return memo.store == this && memo.epoch == epoch_; }
  // Find through a memo that is Fresh (no key needed).
  V* FindFresh(const Memo& memo) {
    FERRY_CHECK(Fresh(memo));
    if (memo.node == nullptr) return nullptr;
    memo.node->visited = true;
    return &memo.node->value;
  }
  template <typename K>
  V* Peek(const K& key, Memo* memo) {
    Node* n = Through(key, memo);
    return n == nullptr ? nullptr : &n->value;
  }

  // Inserts `key` at the head (not visited). When the store is full, first
  // evicts one entry (idle first) and returns it for retiring.
  // kAlreadyExists (nothing changes) if the key is present.
  absl::StatusOr<std::optional<Evicted>> Insert(EndpointKey key, V value, IdleFn is_idle) {
    if (index_.contains(key))
      return absl::AlreadyExistsError(
          absl::StrFormat("endpoint store: %s already present", EndpointKeyString(key)));
    std::optional<Evicted> victim;
    if (size() >= capacity_) {
      victim = EvictOne(is_idle);
      FERRY_CHECK(victim.has_value());
    }
    queue_.push_front(Node{key, std::move(value), false});
    index_.emplace(std::move(key), queue_.begin());
    ++epoch_;
    FERRY_CHECK_LE(size(), capacity_);
    return victim;
  }

  // Removes `key` (e.g. the owner retires its endpoint). std::nullopt if
  // absent.
  std::optional<V> Remove(const EndpointKey& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    auto node = it->second;
    if (hand_ == node) hand_ = Prev(node);
    V value = std::move(node->value);
    index_.erase(it);
    queue_.erase(node);
    ++epoch_;
    if (queue_.empty()) hand_ = queue_.end();
    return value;
  }

  // Chooses, removes and returns a victim (see the file comment).
  // std::nullopt only when empty.
  std::optional<Evicted> EvictOne(IdleFn is_idle) {
    if (queue_.empty()) return std::nullopt;
    // Pass 1: idle and unvisited. Two full turns: the first may only clear
    // bits.
    const size_t bound = 2 * queue_.size() + 1;
    if (auto victim = Sweep(bound, [&](const Node& n) { return is_idle(n.key, n.value); })) {
      return TakeVictim(*victim, true);
    }
    // Pass 2: plain SIEVE, any unvisited entry (busy ones too).
    auto victim = Sweep(bound, [](const Node&) { return true; });
    FERRY_CHECK(victim.has_value());  // after a full turn every bit is clear
    return TakeVictim(*victim, false);
  }

  // Visits entries from head (newest) to tail; order is deterministic.
  void ForEach(absl::FunctionRef<void(const EndpointKey&, const V&, bool visited)> fn) const {
    for (const Node& n : queue_) fn(n.key, n.value, n.visited);
  }

  // OK or kInternal naming the broken invariant.
  absl::Status CheckInvariants() const {
    if (index_.size() != queue_.size())
      return absl::InternalError("endpoint store: index and queue sizes differ");
    if (size() > capacity_) return absl::InternalError("endpoint store: over capacity");
    bool hand_found = hand_ == queue_.end();
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      auto idx = index_.find(it->key);
      if (idx == index_.end() || idx->second != it)
        return absl::InternalError("endpoint store: queue entry missing from index");
      if (it == hand_) hand_found = true;
    }
    if (!hand_found) return absl::InternalError("endpoint store: hand points at no entry");
    return absl::OkStatus();
  }

 private:
  struct Node {
    EndpointKey key;
    V value;
    bool visited = false;
  };
  template <typename K>
  Node* Through(const K& key, Memo* memo) {
    if (memo->store != this || memo->epoch != epoch_) {
      auto it = index_.find(key);
      *memo = Memo{this, epoch_, it == index_.end() ? nullptr : &*it->second};
    }
    return memo->node;
  }
  using Iter = typename std::list<Node>::iterator;

  // Toward the head; wraps to the tail. Requires a non-empty queue.
  Iter Prev(Iter it) {
    if (it == queue_.begin()) return queue_.empty() ? queue_.end() : std::prev(queue_.end());
    return std::prev(it);
  }
  Iter Start() { return hand_ == queue_.end() ? std::prev(queue_.end()) : hand_; }

  // Walks from the hand toward the head clearing visited bits, returning the
  // first unvisited entry `eligible` accepts, within `bound` steps.
  template <typename Eligible>
  std::optional<Iter> Sweep(size_t bound, Eligible eligible) {
    Iter it = Start();
    for (size_t step = 0; step < bound; ++step) {
      if (!it->visited && eligible(*it)) return it;
      it->visited = false;
      it = Prev(it);
    }
    return std::nullopt;
  }

  Evicted TakeVictim(Iter victim, bool idle) {
    hand_ = Prev(victim);
    if (hand_ == victim) hand_ = queue_.end();  // it was the only entry
    Evicted out{victim->key, std::move(victim->value), idle};
    index_.erase(victim->key);
    queue_.erase(victim);
    ++epoch_;
    if (queue_.empty()) hand_ = queue_.end();
    return out;
  }

  const size_t capacity_;
  std::list<Node> queue_;  // front = head (newest), back = tail (oldest)
  // Lookups only: index_ is never iterated (the order that matters is
  // queue_'s), so a hash map's layout cannot reach behaviour. Hashed with
  // the project's fixed hash (fnv1a, EndpointKeyHash), never absl::Hash; a
  // btree of string keys cost ~1500 instructions per lookup at 1024
  // endpoints (docs/operations.md 3.2).
  struct KeyHash {
    using is_transparent = void;
    template <typename K>
    size_t operator()(const K& k) const {
      if constexpr (std::is_same_v<K, HashedEndpointKeyView>) {
        return static_cast<size_t>(k.hash);
      } else {
        return static_cast<size_t>(EndpointKeyHash(k.local_nic, k.peer_nic_path));
      }
    }
  };
  struct KeyEq {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return std::string_view(a.local_nic) == std::string_view(b.local_nic) &&
             std::string_view(a.peer_nic_path) == std::string_view(b.peer_nic_path);
    }
  };
  absl::flat_hash_map<EndpointKey, Iter, KeyHash, KeyEq> index_;
  Iter hand_ = queue_.end();
  uint64_t epoch_ = 1;  // bumped by every insert and removal (Memo)
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_ENDPOINT_STORE_H_
