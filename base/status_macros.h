// base/status_macros.h: early-return helpers for absl::Status / StatusOr.
//
// Owns: FERRY_RETURN_IF_ERROR, FERRY_ASSIGN_OR_RETURN (bookworm's Abseil
// 20220623 ships neither). What must stay true: each macro evaluates its
// expression exactly once and never swallows an error.
#ifndef FERRY_BASE_STATUS_MACROS_H_
#define FERRY_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FERRY_STATUS_CONCAT_INNER_(a, b) a##b
#define FERRY_STATUS_CONCAT_(a, b) FERRY_STATUS_CONCAT_INNER_(a, b)

// Returns the status of `expr` from the enclosing function if it is not OK.
#define FERRY_RETURN_IF_ERROR(expr)        \
  do {                                     \
    ::absl::Status ferry_status_ = (expr); \
    if (!ferry_status_.ok()) [[unlikely]]  \
      return ferry_status_;                \
  } while (0)

// FERRY_ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (a StatusOr<T>); on
// error returns its status, else assigns the value to `lhs` (which may be a
// declaration such as `auto x`).
#define FERRY_ASSIGN_OR_RETURN(lhs, expr) \
  FERRY_ASSIGN_OR_RETURN_IMPL_(FERRY_STATUS_CONCAT_(ferry_statusor_, __LINE__), lhs, expr)

#define FERRY_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) [[unlikely]]                        \
    return std::move(tmp).status();                  \
  lhs = std::move(tmp).value()

#endif  // FERRY_BASE_STATUS_MACROS_H_
