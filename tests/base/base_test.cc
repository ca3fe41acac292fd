// Tests of base/: status macros evaluate once and propagate errors; checks abort.
#include <gtest/gtest.h>

#include "base/check.h"
#include "base/fnv1a.h"
#include "base/status_macros.h"

namespace ferry::base {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x, int* evaluations) {
  ++*evaluations;
  FERRY_ASSIGN_OR_RETURN(int h, Half(x));
  FERRY_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status Validate(int x) {
  FERRY_RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPropagatesTheFirstError) {
  int evaluations = 0;
  EXPECT_EQ(*Quarter(8, &evaluations), 2);
  absl::StatusOr<int> bad = Quarter(6, &evaluations);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(evaluations, 2);
}

TEST(StatusMacros, ReturnIfError) {
  EXPECT_TRUE(Validate(4).ok());
  EXPECT_EQ(Validate(3).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Fnv1a, KnownVectorsAndIncrementalAgree) {
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
  const std::string_view s = "foobar";
  EXPECT_EQ(
      Fnv1a64Update(kFnv1a64Offset, reinterpret_cast<const unsigned char*>(s.data()), s.size()),
      Fnv1a64(s));
}

TEST(CheckDeathTest, FailedCheckAbortsWithOperands) {
  EXPECT_DEATH(FERRY_CHECK_EQ(1 + 1, 3), "1 \\+ 1 == 3 \\(2 vs 3\\)");
  EXPECT_DEATH(FERRY_CHECK(false), "FERRY_CHECK failed");
}

}  // namespace
}  // namespace ferry::base
