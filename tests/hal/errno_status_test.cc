// tests/hal/errno_status_test.cc: every row of the errno table in
// hal/errno_status.h, the message format, and the errno names.
#include "hal/errno_status.h"

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::hal {
namespace {

using ::absl::StatusCode;
using ::testing::HasSubstr;

struct Row {
  int err;
  const char* name;
  StatusCode code;
};

// One line per errno of the documented table (hal/errno_status.h).
const std::vector<Row>& Table() {
  static const auto* rows = new std::vector<Row>{
      {EINVAL, "EINVAL", StatusCode::kInvalidArgument},
      {EFAULT, "EFAULT", StatusCode::kInvalidArgument},
      {E2BIG, "E2BIG", StatusCode::kInvalidArgument},
      {ENOMEM, "ENOMEM", StatusCode::kResourceExhausted},
      {ENOSPC, "ENOSPC", StatusCode::kResourceExhausted},
      {ENOBUFS, "ENOBUFS", StatusCode::kResourceExhausted},
      {EMFILE, "EMFILE", StatusCode::kResourceExhausted},
      {ENFILE, "ENFILE", StatusCode::kResourceExhausted},
      {EDQUOT, "EDQUOT", StatusCode::kResourceExhausted},
      {EAGAIN, "EAGAIN", StatusCode::kUnavailable},
      {EINTR, "EINTR", StatusCode::kUnavailable},
      {EBUSY, "EBUSY", StatusCode::kUnavailable},
      {ECONNREFUSED, "ECONNREFUSED", StatusCode::kUnavailable},
      {ECONNRESET, "ECONNRESET", StatusCode::kUnavailable},
      {EPIPE, "EPIPE", StatusCode::kUnavailable},
      {EHOSTUNREACH, "EHOSTUNREACH", StatusCode::kUnavailable},
      {ENETUNREACH, "ENETUNREACH", StatusCode::kUnavailable},
      {ENETDOWN, "ENETDOWN", StatusCode::kUnavailable},
      {ECONNABORTED, "ECONNABORTED", StatusCode::kUnavailable},
      {ENOTCONN, "ENOTCONN", StatusCode::kUnavailable},
      {ETIMEDOUT, "ETIMEDOUT", StatusCode::kDeadlineExceeded},
      {ENOENT, "ENOENT", StatusCode::kNotFound},
      {ENODEV, "ENODEV", StatusCode::kNotFound},
      {ENXIO, "ENXIO", StatusCode::kNotFound},
      {ESRCH, "ESRCH", StatusCode::kNotFound},
      {EEXIST, "EEXIST", StatusCode::kAlreadyExists},
      {EADDRINUSE, "EADDRINUSE", StatusCode::kAlreadyExists},
      {EPERM, "EPERM", StatusCode::kPermissionDenied},
      {EACCES, "EACCES", StatusCode::kPermissionDenied},
      {EOPNOTSUPP, "EOPNOTSUPP", StatusCode::kUnimplemented},
      {ENOSYS, "ENOSYS", StatusCode::kUnimplemented},
      {EPROTONOSUPPORT, "EPROTONOSUPPORT", StatusCode::kUnimplemented},
      {ERANGE, "ERANGE", StatusCode::kOutOfRange},
      {EOVERFLOW, "EOVERFLOW", StatusCode::kOutOfRange},
      {EIO, "EIO", StatusCode::kInternal},
  };
  return *rows;
}

TEST(ErrnoStatusTest, EveryTableRowMapsToItsCode) {
  for (const Row& row : Table()) {
    EXPECT_EQ(ErrnoToCode(row.err), row.code) << row.name;
    EXPECT_EQ(ErrnoName(row.err), row.name);
  }
}

TEST(ErrnoStatusTest, AliasesAndUnknownValues) {
  EXPECT_EQ(ErrnoToCode(EWOULDBLOCK), StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoToCode(EDEADLK), StatusCode::kInternal);  // not in the table
  EXPECT_EQ(ErrnoToCode(-1), StatusCode::kInternal);
  EXPECT_EQ(ErrnoToCode(100000), StatusCode::kInternal);
  EXPECT_EQ(ErrnoName(100000), "E?");
}

TEST(ErrnoStatusTest, StatusNamesCallErrnoAndText) {
  for (const Row& row : Table()) {
    absl::Status s = ErrnoToStatus("ibv_destroy_qp", row.err);
    EXPECT_EQ(s.code(), row.code) << row.name;
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("ibv_destroy_qp: "));
    EXPECT_THAT(s.message(),
                HasSubstr(std::string(row.name) + " (" + std::to_string(row.err) + "): "));
  }
  absl::Status busy = ErrnoToStatus("ibv_destroy_qp", EBUSY);
  EXPECT_EQ(busy.message(), "ibv_destroy_qp: EBUSY (16): Device or resource busy");
}

TEST(ErrnoStatusTest, ZeroErrnoIsNeverOk) {
  absl::Status s = ErrnoToStatus("ibv_poll_cq", 0);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("failed without errno"));
}

}  // namespace
}  // namespace ferry::hal
