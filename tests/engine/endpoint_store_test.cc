// Tests of engine/owner.h and engine/endpoint_store: the owner hash, SIEVE
// eviction (against a straightforward reference model), idle victims first,
// eviction returning the victim, and a key free again right after eviction.
#include "engine/endpoint_store.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/owner.h"

namespace ferry::engine {
namespace {

EndpointKey Key(const std::string& peer) { return EndpointKey{"mlx5_0", peer}; }
bool AllIdle(const EndpointKey&, const int&) { return true; }

TEST(Owner, HashIsPinnedAndSeparatesTheFields) {
  // Pinned: changing the hash would move every endpoint to another owner.
  EXPECT_EQ(EndpointKeyHash("", ""), base::Fnv1a64UpdateU64(base::kFnv1a64Offset, 0));
  EXPECT_NE(EndpointKeyHash("ab", "c"), EndpointKeyHash("a", "bc"));
  const uint64_t h = EndpointKeyHash("mlx5_0", "10.0.0.2:7000@mlx5_1");
  EXPECT_EQ(OwnerForKey(EndpointKey{"mlx5_0", "10.0.0.2:7000@mlx5_1"}, 7), h % 7);
  EXPECT_EQ(OwnerForKey(EndpointKey{"mlx5_0", "10.0.0.2:7000@mlx5_1"}, 1), 0u);
}

TEST(Owner, SpreadsKeysOverWorkers) {
  std::vector<int> per_owner(4, 0);
  for (int i = 0; i < 1000; ++i) {
    ++per_owner[OwnerForKey(Key(absl::StrFormat("10.0.%d.%d:7000@mlx5_0", i / 250, i % 250)), 4)];
  }
  for (int n : per_owner) EXPECT_GT(n, 180);
}

TEST(EndpointStore, InsertFindPeekRemove) {
  EndpointStore<int> s(4);
  ASSERT_TRUE(s.Insert(Key("a"), 1, AllIdle).ok());
  EXPECT_EQ(s.Insert(Key("a"), 2, AllIdle).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(*s.Peek(Key("a")), 1);  // the refused insert changed nothing
  EXPECT_EQ(s.Find(Key("b")), nullptr);
  EXPECT_EQ(*s.Find(Key("a")), 1);
  EXPECT_EQ(s.Remove(Key("a")), 1);
  EXPECT_EQ(s.Remove(Key("a")), std::nullopt);
  EXPECT_EQ(s.size(), 0u);
  EXPECT_TRUE(s.CheckInvariants().ok());
}

TEST(EndpointStore, AMemoSkipsTheLookupUntilAnInsertOrRemoval) {
  EndpointStore<int> s(2);
  EndpointStore<int>::Memo memo;
  EXPECT_EQ(s.Find(Key("a"), &memo), nullptr);  // absent, remembered as absent
  ASSERT_TRUE(s.Insert(Key("a"), 1, AllIdle).ok());
  int* v = s.Find(Key("a"), &memo);  // the insert made the memo stale
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(*v, 1);
  *v = 7;
  // While valid the memo answers whatever key is passed (the caller keeps
  // one memo per key): proof that no lookup was made.
  EXPECT_EQ(*s.Peek(Key("zzz"), &memo), 7);
  ASSERT_TRUE(s.Insert(Key("b"), 2, AllIdle).ok());
  EXPECT_EQ(*s.Peek(Key("b"), &memo), 2);  // stale again: looked up
  EndpointStore<int>::Memo memo_a;
  ASSERT_NE(s.Find(Key("a"), &memo_a), nullptr);  // a is visited: b is evicted next
  ASSERT_TRUE(s.Remove(Key("b")).has_value());
  EXPECT_EQ(s.Find(Key("b"), &memo), nullptr);
  EXPECT_EQ(*s.Find(Key("a"), &memo_a), 7);
  // Find through a memo marks the entry visited, as Find does.
  ASSERT_TRUE(s.Insert(Key("c"), 3, AllIdle).ok());
  EndpointStore<int>::Memo memo_c;
  ASSERT_NE(s.Find(Key("a"), &memo_c), nullptr);
  auto ev = s.Insert(Key("d"), 4, AllIdle);
  ASSERT_TRUE(ev.ok() && ev->has_value());
  EXPECT_EQ((*ev)->key, Key("c"));
  // A memo of another store is never taken.
  EndpointStore<int> other(2);
  ASSERT_TRUE(other.Insert(Key("a"), 9, AllIdle).ok());
  EXPECT_EQ(*other.Peek(Key("a"), &memo_a), 9);
  EXPECT_TRUE(s.CheckInvariants().ok());
}

TEST(EndpointStore, SieveKeepsVisitedEntriesAndMovesTheHand) {
  EndpointStore<int> s(3);
  ASSERT_TRUE(s.Insert(Key("A"), 1, AllIdle).ok());
  ASSERT_TRUE(s.Insert(Key("B"), 2, AllIdle).ok());
  ASSERT_TRUE(s.Insert(Key("C"), 3, AllIdle).ok());
  s.Find(Key("A"));  // A (the tail) is visited
  auto ev = s.Insert(Key("D"), 4, AllIdle);
  ASSERT_TRUE(ev.ok());
  ASSERT_TRUE(ev->has_value());
  EXPECT_EQ((*ev)->key, Key("B"));  // A passed (bit cleared), B evicted
  EXPECT_EQ((*ev)->value, 2);
  EXPECT_TRUE((*ev)->was_idle);
  // The hand stayed at C (B's predecessor toward the head): C goes next,
  // although A is older, because A was passed in this turn.
  auto ev2 = s.Insert(Key("E"), 5, AllIdle);
  ASSERT_TRUE(ev2.ok() && ev2->has_value());
  EXPECT_EQ((*ev2)->key, Key("C"));
  EXPECT_TRUE(s.CheckInvariants().ok());
}

TEST(EndpointStore, IdleVictimsFirst) {
  EndpointStore<int> s(3);
  for (const char* k : {"A", "B", "C"}) ASSERT_TRUE(s.Insert(Key(k), 0, AllIdle).ok());
  auto busy_a = [](const EndpointKey& k, const int&) { return k != Key("A"); };
  auto ev = s.Insert(Key("D"), 0, busy_a);
  ASSERT_TRUE(ev.ok() && ev->has_value());
  EXPECT_EQ((*ev)->key, Key("B"));  // A (tail) is busy: skipped
  EXPECT_TRUE((*ev)->was_idle);
  EXPECT_NE(s.Peek(Key("A")), nullptr);
}

TEST(EndpointStore, AllBusyFallsBackToPlainSieve) {
  EndpointStore<int> s(2);
  ASSERT_TRUE(s.Insert(Key("A"), 0, AllIdle).ok());
  ASSERT_TRUE(s.Insert(Key("B"), 0, AllIdle).ok());
  s.Find(Key("A"));
  s.Find(Key("B"));
  auto none_idle = [](const EndpointKey&, const int&) { return false; };
  auto ev = s.Insert(Key("C"), 0, none_idle);
  ASSERT_TRUE(ev.ok() && ev->has_value());
  EXPECT_FALSE((*ev)->was_idle);
  EXPECT_EQ(s.size(), 2u);
  EXPECT_TRUE(s.CheckInvariants().ok());
}

TEST(EndpointStore, EvictedKeyCanReconnectAtOnce) {
  EndpointStore<int> s(1);
  ASSERT_TRUE(s.Insert(Key("A"), 1, AllIdle).ok());
  auto ev = s.Insert(Key("B"), 2, AllIdle);
  ASSERT_TRUE(ev.ok() && ev->has_value());
  EXPECT_EQ((*ev)->key, Key("A"));
  auto back = s.Insert(Key("A"), 3, AllIdle);  // the evicted peer reconnects
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*s.Peek(Key("A")), 3);
  EXPECT_EQ(s.Peek(Key("B")), nullptr);
}

TEST(EndpointStore, EvictOneOnEmptyAndRemovingTheHandEntry) {
  EndpointStore<int> s(3);
  EXPECT_EQ(s.EvictOne(AllIdle), std::nullopt);
  for (const char* k : {"A", "B", "C"}) ASSERT_TRUE(s.Insert(Key(k), 0, AllIdle).ok());
  s.Find(Key("A"));
  ASSERT_TRUE(s.EvictOne(AllIdle).has_value());  // evicts B, hand at C
  ASSERT_TRUE(s.Remove(Key("C")).has_value());   // remove the entry under the hand
  EXPECT_TRUE(s.CheckInvariants().ok());
  auto ev = s.EvictOne(AllIdle);
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->key, Key("A"));
  EXPECT_EQ(s.size(), 0u);
  EXPECT_TRUE(s.CheckInvariants().ok());
}

// A direct transcription of SIEVE on a vector (index 0 = head).
class ReferenceSieve {
 public:
  explicit ReferenceSieve(size_t cap) : cap_(cap) {}
  bool Hit(const std::string& k) {
    for (auto& e : q_) {
      if (e.key == k) {
        e.visited = true;
        return true;
      }
    }
    return false;
  }
  bool Remove(const std::string& k) {
    for (size_t j = 0; j < q_.size(); ++j) {
      if (q_[j].key != k) continue;
      if (hand_ != kNoHand) {
        if (hand_ == j) {
          hand_ = j == 0 ? kNoHand : j - 1;  // predecessor toward the head
        } else if (hand_ > j) {
          --hand_;
        }
      }
      q_.erase(q_.begin() + static_cast<ptrdiff_t>(j));
      return true;
    }
    return false;
  }
  std::optional<std::string> Insert(const std::string& k) {
    std::optional<std::string> victim;
    if (q_.size() >= cap_) victim = Evict();
    q_.insert(q_.begin(), Entry{k, false});
    if (hand_ != kNoHand) ++hand_;
    return victim;
  }

 private:
  struct Entry {
    std::string key;
    bool visited;
  };
  std::string Evict() {
    size_t i = hand_ == kNoHand ? q_.size() - 1 : hand_;
    while (q_[i].visited) {
      q_[i].visited = false;
      i = i == 0 ? q_.size() - 1 : i - 1;
    }
    hand_ = i == 0 ? kNoHand : i - 1;
    std::string k = q_[i].key;
    q_.erase(q_.begin() + static_cast<ptrdiff_t>(i));
    return k;
  }
  size_t cap_;
  std::vector<Entry> q_;
  static constexpr size_t kNoHand = SIZE_MAX;  // plain sentinel (gcc 12 false positive on optional)
  size_t hand_ = kNoHand;
};

TEST(EndpointStore, MatchesReferenceSieveOnARandomTrace) {
  constexpr size_t kCap = 8;
  EndpointStore<int> s(kCap);
  ReferenceSieve ref(kCap);
  uint64_t x = 99;
  auto next = [&x](uint64_t n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return (x >> 33) % n;
  };
  int evictions = 0;
  for (int step = 0; step < 20000; ++step) {
    const std::string k = absl::StrFormat("p%d", next(20));
    if (next(10) == 0) {  // the owner retires an endpoint
      ASSERT_EQ(s.Remove(Key(k)).has_value(), ref.Remove(k)) << "step " << step;
      ASSERT_TRUE(s.CheckInvariants().ok());
      continue;
    }
    const bool hit_ref = ref.Hit(k);
    const bool hit = s.Find(Key(k)) != nullptr;
    ASSERT_EQ(hit, hit_ref) << "step " << step;
    if (hit) continue;
    const std::optional<std::string> want = ref.Insert(k);
    auto got = s.Insert(Key(k), step, AllIdle);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(got->has_value(), want.has_value()) << "step " << step;
    if (want.has_value()) {
      ASSERT_EQ((*got)->key, Key(*want)) << "step " << step;
      ++evictions;
    }
    ASSERT_TRUE(s.CheckInvariants().ok());
  }
  EXPECT_GT(evictions, 1000);
}

}  // namespace
}  // namespace ferry::engine
