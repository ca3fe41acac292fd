// Tests of engine/pending_keys.h against the structure it replaced: a
// std::map from key to queue whose walk erases the keys it leaves empty.
// Seeded runs push to keys, walk (popping, listing other keys and
// draining others during the visits) and look keys up; every walk must
// visit the keys with queued items in the map's order, every queue must
// hold what the map's does, and the idle bounds must hold.
#include "engine/pending_keys.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/fnv1a.h"
#include "base/ring_queue.h"

namespace ferry::engine {
namespace {

using Queue = base::RingQueue<int>;
using Keys = PendingKeys<Queue>;
using Key = Keys::Key;
using Model = std::map<Key, std::deque<int>>;

// splitmix64: the test's own deterministic source (no engine PRNG here).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t s_;
};

uint64_t HashOf(const Key& k, bool collide) {
  if (collide) return 7;  // every key in one probe chain
  uint64_t h = base::Fnv1a64UpdateU64(base::kFnv1a64Offset, k.first);
  return base::Fnv1a64Update(h, reinterpret_cast<const unsigned char*>(k.second.data()),
                             k.second.size());
}

uint64_t Plain(uint32_t c, std::string_view p) { return HashOf(Key{c, std::string(p)}, false); }

std::vector<int> Contents(const Queue& q) {
  std::vector<int> v;
  for (size_t i = 0; i < q.size(); ++i) v.push_back(q[i]);
  return v;
}

class Run {
 public:
  Run(uint64_t seed, size_t keys, size_t idle_max, bool collide)
      : rng_(seed),
        idle_max_(idle_max),
        collide_(collide),
        pk_(idle_max, [collide](uint32_t c, std::string_view p) {
          return HashOf(Key{c, std::string(p)}, collide);
        }) {
    for (size_t i = 0; i < keys; ++i)
      all_.push_back(Key{static_cast<uint32_t>(rng_.Below(3)), AnyPath()});
  }

  // Paths the walk's order must sort as std::string does: short ones, long
  // ones sharing their first eight bytes (the prefix compare ties), bytes
  // >= 0x80 (unsigned order), NULs (a path's own against the padding).
  std::string AnyPath() {
    const uint64_t n = rng_.Below(40);
    switch (rng_.Below(5)) {
      case 0:
        return absl::StrCat("h", n);
      case 1:
        return absl::StrCat("host-000", n % 7, "/dev", n);
      case 2:
        return std::string("h\0", 2) + std::string(n % 3, '\0');
      case 3:
        return std::string(1, static_cast<char>(0x7e + n % 4)) + absl::StrCat(n);
      default:
        return std::string("abcdefgh", n % 9);
    }
  }

  const Key& AnyKey() { return all_[rng_.Below(all_.size())]; }

  void Push(const Key& k) {
    const int v = next_value_++;
    pk_.Of(k.first, k.second, HashOf(k, collide_)).push_back(v);
    model_[k].push_back(v);
  }

  // Empties k's queue in both, if either knows it (a key drained elsewhere).
  void Drain(const Key& k) {
    if (Queue* q = pk_.FindListed(k.first, k.second))
      while (!q->empty()) q->pop_front();
    if (auto it = model_.find(k); it != model_.end()) it->second.clear();
  }

  // One walk of each; the same actions in the same visits. Returns the
  // keys the real walk visited with items queued.
  void Walk() {
    std::vector<Key> want, got;
    // Decide the visits' actions on the model's walk, replay them on the
    // real one (the same visits must come in the same order to match).
    struct Action {
      size_t pops;
      std::vector<Key> push_to;
      std::vector<Key> drain;
    };
    std::vector<Action> actions;
    for (auto it = model_.begin(); it != model_.end();) {
      auto& [key, dq] = *it;
      if (!dq.empty()) {
        want.push_back(key);
        Action a{rng_.Below(dq.size() + 1), {}, {}};
        for (size_t i = 0; i < a.pops; ++i) dq.pop_front();
        if (rng_.Below(4) == 0) a.push_to.push_back(AnyKey());
        if (rng_.Below(8) == 0) a.drain.push_back(AnyKey());
        for (const Key& k : a.push_to) model_[k].push_back(next_value_ + 1'000'000);
        for (const Key& k : a.drain)
          if (auto d = model_.find(k); d != model_.end() && d->first != key) d->second.clear();
        actions.push_back(std::move(a));
      }
      if (dq.empty()) {
        it = model_.erase(it);
      } else {
        ++it;
      }
    }
    size_t n = 0;
    pk_.Walk([&](const Key& key, Queue& dq, NoMemo&) {
      if (dq.empty()) return;
      got.push_back(key);
      ASSERT_LT(n, actions.size()) << "the walk visits more keys than the map";
      const Action& a = actions[n++];
      for (size_t i = 0; i < a.pops; ++i) dq.pop_front();
      for (const Key& k : a.push_to)
        pk_.Of(k.first, k.second, HashOf(k, collide_)).push_back(next_value_ + 1'000'000);
      for (const Key& k : a.drain)
        if (k != key)
          if (Queue* q = pk_.FindListed(k.first, k.second))
            while (!q->empty()) q->pop_front();
    });
    next_value_ += 1;
    ASSERT_EQ(got, want) << "the walk's order is not the map's";
  }

  void Check() {
    for (const Key& k : all_) {
      const Queue* q = pk_.Find(k.first, k.second);
      const auto it = model_.find(k);
      const std::vector<int> want = it == model_.end()
                                        ? std::vector<int>{}
                                        : std::vector<int>(it->second.begin(), it->second.end());
      ASSERT_EQ(q == nullptr ? std::vector<int>{} : Contents(*q), want)
          << "queue of (" << k.first << ", " << k.second << ")";
    }
    ASSERT_LE(pk_.idle(), idle_max_);
    ASSERT_LE(pk_.idle_slots(), idle_max_ * Keys::kIdleSlotsPerKey);
  }

  Rng rng_;
  const size_t idle_max_;
  const bool collide_;
  Keys pk_;
  Model model_;
  std::vector<Key> all_;
  int next_value_ = 0;
};

void RunSeed(uint64_t seed, bool collide) {
  Rng pick(seed);
  const size_t keys = 1 + pick.Below(60);
  const size_t idle_max = 1 + pick.Below(12);
  Run r(seed * 7919 + 1, keys, idle_max, collide);
  for (int round = 0; round < 60; ++round) {
    const uint64_t pushes = r.rng_.Below(30);
    for (uint64_t i = 0; i < pushes; ++i) r.Push(r.AnyKey());
    if (r.rng_.Below(6) == 0) r.Drain(r.AnyKey());
    r.Walk();
    if (::testing::Test::HasFatalFailure()) return;
    r.Check();
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(PendingKeys, WalksInTheOrderOfTheMapItReplaced) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE(seed);
    RunSeed(seed, /*collide=*/false);
    if (HasFatalFailure()) return;
  }
}

TEST(PendingKeys, AllHashesEqualStillFindsEachKey) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE(seed);
    RunSeed(seed, /*collide=*/true);
    if (HasFatalFailure()) return;
  }
}

TEST(PendingKeys, AKeyListedDuringTheWalkIsVisitedOnlyWhenAfterTheCurrentOne) {
  Keys pk(4, Plain);
  const Key b{0, "b"}, a{0, "a"}, c{0, "c"}, d{0, "d"};
  pk.Of(b.first, b.second, HashOf(b, false)).push_back(1);
  pk.Of(d.first, d.second, HashOf(d, false)).push_back(2);
  std::vector<std::string> visited;
  pk.Walk([&](const Key& k, Queue& q, NoMemo&) {
    visited.push_back(k.second);
    q.pop_front();
    if (k == b) {
      pk.Of(a.first, a.second, HashOf(a, false)).push_back(3);  // before b: next walk
      pk.Of(c.first, c.second, HashOf(c, false)).push_back(4);  // after b: this walk
    }
  });
  EXPECT_EQ(visited, (std::vector<std::string>{"b", "c", "d"}));
  EXPECT_EQ(pk.listed(), 1u);  // a
  EXPECT_EQ(pk.idle(), 3u);    // b, c, d
  visited.clear();
  pk.Walk([&](const Key& k, Queue& q, NoMemo&) {
    visited.push_back(k.second);
    q.pop_front();
  });
  EXPECT_EQ(visited, (std::vector<std::string>{"a"}));
}

TEST(PendingKeysDeathTest, AHashThatIsNotTheKeysIsRefused) {
  Keys pk(4, Plain);
  EXPECT_DEATH(pk.Of(0, "a", Plain(0, "b")), "hash_of_");
}

TEST(PendingKeys, IdleKeysAreBoundedAndTheOldestIsReused) {
  Keys pk(2, Plain);
  for (int i = 0; i < 5; ++i) {
    const Key k{1, absl::StrCat("p", i)};
    pk.Of(k.first, k.second, HashOf(k, false)).push_back(i);
    pk.Walk([](const Key&, Queue& q, NoMemo&) { q.pop_front(); });
    EXPECT_LE(pk.idle(), 2u);
  }
  // p3 and p4 are the idle ones; p0..p2 were reused or freed.
  for (int i = 0; i < 5; ++i) {
    const Key k{1, absl::StrCat("p", i)};
    EXPECT_EQ(pk.Find(k.first, k.second) != nullptr, i >= 3) << i;
  }
}

TEST(PendingKeys, AnIdleKeysLargeRingIsReleased) {
  Keys pk(1, Plain);  // idle rings hold at most kIdleSlotsPerKey slots in all
  const Key k{0, "big"};
  Queue& q = pk.Of(k.first, k.second, HashOf(k, false));
  for (size_t i = 0; i <= Keys::kIdleSlotsPerKey; ++i) q.push_back(static_cast<int>(i));
  EXPECT_GT(q.capacity(), Keys::kIdleSlotsPerKey);
  pk.Walk([](const Key&, Queue& dq, NoMemo&) {
    while (!dq.empty()) dq.pop_front();
  });
  EXPECT_EQ(pk.idle(), 1u);
  EXPECT_EQ(pk.idle_slots(), 0u);
  EXPECT_EQ(pk.Find(k.first, k.second)->capacity(), 0u);
  EXPECT_EQ(pk.FindListed(k.first, k.second), nullptr);  // idle: read only
}

}  // namespace
}  // namespace ferry::engine
