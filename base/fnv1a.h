// base/fnv1a.h: the one fixed hash of the project (FNV-1a, 64 bit).
//
// Owns: Fnv1a64 and its incremental form. What must stay true: every hashed
// decision (owner choice, trace hash, rail choice) uses this function, so the
// same input gives the same value in every process, build and run
// (docs/design.md section 7). Never absl::Hash (seeded per process), never
// std::hash of pointers.
#ifndef FERRY_BASE_FNV1A_H_
#define FERRY_BASE_FNV1A_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ferry::base {

inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ULL;
inline constexpr uint64_t kFnv1a64Prime = 0x100000001b3ULL;

// Folds `len` bytes into `state` (start from kFnv1a64Offset).
constexpr uint64_t Fnv1a64Update(uint64_t state, const unsigned char* data, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    state ^= data[i];
    state *= kFnv1a64Prime;
  }
  return state;
}

// Folds the 8 little-endian bytes of `value` into `state`.
constexpr uint64_t Fnv1a64UpdateU64(uint64_t state, uint64_t value) {
  for (int i = 0; i < 8; ++i) {
    state ^= (value >> (8 * i)) & 0xffU;
    state *= kFnv1a64Prime;
  }
  return state;
}

constexpr uint64_t Fnv1a64(std::string_view s) {
  uint64_t state = kFnv1a64Offset;
  for (char c : s) {
    state ^= static_cast<unsigned char>(c);
    state *= kFnv1a64Prime;
  }
  return state;
}

static_assert(Fnv1a64("") == kFnv1a64Offset);
static_assert(Fnv1a64("a") == 0xaf63dc4c8601ec8cULL);  // published test vector

}  // namespace ferry::base

#endif  // FERRY_BASE_FNV1A_H_
