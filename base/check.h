// base/check.h: always-on assertions for invariants.
//
// Owns: FERRY_CHECK and its comparison forms, FERRY_UNREACHABLE.
// What must stay true: these never compile away (release builds included);
// a failed check prints file:line, the expression, the operands where known,
// and aborts. Use them for invariants, never for input validation (bad input
// gets an absl::Status, see docs/design.md section 8). Bookworm's Abseil has no
// CHECK, so this is the project's own.
#ifndef FERRY_BASE_CHECK_H_
#define FERRY_BASE_CHECK_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace ferry::base {

[[noreturn]] inline void CheckFailed(const char* file, int line, const char* expr) {
  std::fprintf(stderr, "FERRY_CHECK failed at %s:%d: %s\n", file, line, expr);
  std::fflush(stderr);
  std::abort();
}

[[noreturn]] inline void CheckOpFailed(const char* file, int line, const char* expr, long long lhs,
                                       long long rhs) {
  std::fprintf(stderr, "FERRY_CHECK failed at %s:%d: %s (%lld vs %lld)\n", file, line, expr, lhs,
               rhs);
  std::fflush(stderr);
  std::abort();
}

}  // namespace ferry::base

#define FERRY_CHECK(cond)                                    \
  do {                                                       \
    if (!(cond)) [[unlikely]]                                \
      ::ferry::base::CheckFailed(__FILE__, __LINE__, #cond); \
  } while (0)

#define FERRY_CHECK_OP_(a, op, b)                                           \
  do {                                                                      \
    const auto ferry_check_a_ = (a);                                        \
    const auto ferry_check_b_ = (b);                                        \
    if (!(ferry_check_a_ op ferry_check_b_)) [[unlikely]]                   \
      ::ferry::base::CheckOpFailed(__FILE__, __LINE__, #a " " #op " " #b,   \
                                   static_cast<long long>(ferry_check_a_),  \
                                   static_cast<long long>(ferry_check_b_)); \
  } while (0)

#define FERRY_CHECK_EQ(a, b) FERRY_CHECK_OP_(a, ==, b)
#define FERRY_CHECK_NE(a, b) FERRY_CHECK_OP_(a, !=, b)
#define FERRY_CHECK_LT(a, b) FERRY_CHECK_OP_(a, <, b)
#define FERRY_CHECK_LE(a, b) FERRY_CHECK_OP_(a, <=, b)
#define FERRY_CHECK_GT(a, b) FERRY_CHECK_OP_(a, >, b)
#define FERRY_CHECK_GE(a, b) FERRY_CHECK_OP_(a, >=, b)

#define FERRY_UNREACHABLE() ::ferry::base::CheckFailed(__FILE__, __LINE__, "unreachable")

#endif  // FERRY_BASE_CHECK_H_
