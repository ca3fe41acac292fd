// tests/property/endpoint_store_prop_test.cc: EndpointStore<V>
// (engine/endpoint_store.h) against a simple reference model (a map from key
// to value, plus the caller's idle flags).
//
// Owns: random operation sequences (insert, find, peek, remove, evict, flip
// a key's idle flag) over a small key pool and a small capacity, and the
// checks after every operation: size() <= capacity(), the store holds
// exactly the model's keys with the model's values (Peek, ForEach, each key
// once), CheckInvariants() is OK, an evicted key is gone (Peek/Find miss, a
// re-insert succeeds), the victim was present, and an idle victim is chosen
// whenever some entry is idle (was_idle reports exactly that).
// What must stay true: operation sequences are bounded by RapidCheck's size.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "engine/endpoint_store.h"
#include "engine/owner.h"

namespace ferry::engine {
namespace {

constexpr int kKeyPool = 10;

EndpointKey KeyOf(uint8_t k) {
  return EndpointKey{k % 2 == 0 ? "mlx5_0" : "mlx5_1",
                     "10.0.0." + std::to_string(k % kKeyPool) + ":7000@mlx5_0"};
}

enum class Op : uint8_t { kInsert, kFind, kPeek, kRemove, kEvict, kFlipIdle, kCount };
std::ostream& operator<<(std::ostream& os, Op op) {
  static constexpr const char* kNames[] = {"Insert", "Find", "Peek", "Remove", "Evict", "FlipIdle"};
  const auto i = static_cast<size_t>(op);
  return os << (i < std::size(kNames) ? kNames[i] : "?");
}

struct Model {
  std::map<EndpointKey, int> entries;
  std::map<EndpointKey, bool> idle;  // the caller's view; absent = idle
  bool IsIdle(const EndpointKey& k) const {
    auto it = idle.find(k);
    return it == idle.end() || it->second;
  }
  bool AnyIdle() const {
    for (const auto& [k, v] : entries)
      if (IsIdle(k)) return true;
    return false;
  }
};

void ExpectSame(const EndpointStore<int>& s, const Model& m) {
  RC_ASSERT(s.CheckInvariants().ok());
  RC_ASSERT(s.size() <= s.capacity());
  RC_ASSERT(s.size() == m.entries.size());
  for (int k = 0; k < kKeyPool; ++k) {
    const EndpointKey key = KeyOf(static_cast<uint8_t>(k));
    auto it = m.entries.find(key);
    const int* got = s.Peek(key);
    if (it == m.entries.end()) {
      RC_ASSERT(got == nullptr);
    } else {
      RC_ASSERT(got != nullptr);
      RC_ASSERT(*got == it->second);
    }
  }
  std::map<EndpointKey, int> seen;
  s.ForEach([&](const EndpointKey& k, const int& v, bool) {
    RC_ASSERT(seen.emplace(k, v).second);  // every key once
  });
  RC_ASSERT(seen == m.entries);
}

void CheckVictim(Model& m, const EndpointStore<int>::Evicted& v, bool any_idle_before) {
  auto it = m.entries.find(v.key);
  RC_ASSERT(it != m.entries.end());  // the victim was present
  RC_ASSERT(it->second == v.value);
  RC_ASSERT(v.was_idle == any_idle_before);  // idle first whenever one exists
  if (v.was_idle) RC_ASSERT(m.IsIdle(v.key));
  m.entries.erase(it);
}

RC_GTEST_PROP(EndpointStoreProp, MatchesTheReferenceModel, ()) {
  const size_t capacity = *rc::gen::inRange<size_t>(1, 7);
  const auto ops = *rc::gen::container<std::vector<std::tuple<Op, uint8_t>>>(
      rc::gen::tuple(rc::gen::cast<Op>(rc::gen::inRange<uint8_t>(0, uint8_t(Op::kCount))),
                     rc::gen::inRange<uint8_t>(0, kKeyPool)));
  // Each key starts idle or busy at random; kFlipIdle changes it later.
  const auto idle0 = *rc::gen::container<std::vector<bool>>(kKeyPool, rc::gen::arbitrary<bool>());
  EndpointStore<int> s(capacity);
  Model m;
  for (int k = 0; k < kKeyPool; ++k) m.idle[KeyOf(static_cast<uint8_t>(k))] = idle0[k];
  int next_value = 1;
  int idle_victims = 0;
  int busy_victims = 0;
  for (const auto& [op, k] : ops) {
    const EndpointKey key = KeyOf(k);
    auto is_idle = [&m](const EndpointKey& key, const int&) { return m.IsIdle(key); };
    switch (op) {
      case Op::kInsert: {
        const bool present = m.entries.contains(key);
        const bool full = m.entries.size() >= capacity;
        const bool any_idle = m.AnyIdle();
        auto r = s.Insert(key, next_value, is_idle);
        if (present) {
          RC_ASSERT(r.status().code() == absl::StatusCode::kAlreadyExists);
          break;
        }
        RC_ASSERT(r.ok());
        RC_ASSERT(r->has_value() == full);
        if (full) {
          CheckVictim(m, **r, any_idle);
          ++((*r)->was_idle ? idle_victims : busy_victims);
        }
        m.entries[key] = next_value++;
        break;
      }
      case Op::kFind: {
        int* v = s.Find(key);
        RC_ASSERT((v != nullptr) == m.entries.contains(key));
        if (v != nullptr) RC_ASSERT(*v == m.entries[key]);
        break;
      }
      case Op::kPeek:
        RC_ASSERT((s.Peek(key) != nullptr) == m.entries.contains(key));
        break;
      case Op::kRemove: {
        const std::optional<int> v = s.Remove(key);
        RC_ASSERT(v.has_value() == m.entries.contains(key));
        if (v.has_value()) {
          RC_ASSERT(*v == m.entries[key]);
          m.entries.erase(key);
        }
        break;
      }
      case Op::kEvict: {
        const bool any_idle = m.AnyIdle();
        auto v = s.EvictOne(is_idle);
        RC_ASSERT(v.has_value() == !m.entries.empty());
        if (v.has_value()) {
          CheckVictim(m, *v, any_idle);
          ++(v->was_idle ? idle_victims : busy_victims);
          // Gone: a miss, and the key is free at once.
          RC_ASSERT(s.Find(v->key) == nullptr);
          ExpectSame(s, m);
        }
        break;
      }
      case Op::kFlipIdle:
        m.idle[key] = !m.IsIdle(key);
        break;
      case Op::kCount:
        RC_FAIL("unknown op");
    }
    ExpectSame(s, m);
  }
  RC_CLASSIFY(idle_victims > 0, "idle victim");
  RC_CLASSIFY(busy_victims > 0, "busy victim (no idle entry)");
}

}  // namespace
}  // namespace ferry::engine
