// Tests of engine/request_validation (C8): each bad input gets its own code
// and names its request; a bad request anywhere makes all_ok false so the
// caller enqueues nothing; RangeSet rejects overlaps and wrapping ranges.
#include "engine/request_validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::engine {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kLocal = 0x10000;
constexpr uint64_t kRemote = 0x900000;
constexpr SegmentHandle kSeg{7};

class RequestValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(local_.Add(kLocal, 0x1000).ok());
    ASSERT_TRUE(local_.Add(kLocal + 0x1000, 0x1000).ok());  // adjacent, separate MR
    ASSERT_TRUE(
        remote_.Add(kRemote, 0x4000, 0, static_cast<uint32_t>(RemoteAccess::kReadWrite)).ok());
  }
  Request Good() const {
    return Request{OpKind::kWrite, kLocal + 0x10, 0x100, kSeg, kRemote + 0x20};
  }
  BatchValidation Run(const std::vector<Request>& rs, uint64_t free_slots = 16) {
    return ValidateRequests(
        rs, local_,
        [this](SegmentHandle h, size_t) -> const RangeSet* {
          return h == kSeg ? &remote_ : nullptr;
        },
        /*request_bytes_max=*/0x2000, free_slots);
  }
  void ExpectOne(const Request& r, absl::StatusCode code, const std::string& what) {
    const BatchValidation v = Run({Good(), r});
    EXPECT_FALSE(v.all_ok);
    ASSERT_EQ(v.per_request.size(), 2u);
    EXPECT_TRUE(v.per_request[0].ok());  // the good one is reported OK
    EXPECT_EQ(v.per_request[1].code(), code) << v.per_request[1];
    EXPECT_THAT(std::string(v.per_request[1].message()), HasSubstr("request 1"));
    EXPECT_THAT(std::string(v.per_request[1].message()), HasSubstr(what));
  }
  RangeSet local_;
  RangeSet remote_;
};

TEST_F(RequestValidationTest, AllGoodRequestsPass) {
  Request read = Good();
  read.opcode = OpKind::kRead;
  read.local_addr = kLocal + 0x1000;  // second MR, exactly its first byte
  read.length_bytes = 0x1000;         // and exactly its whole length
  const BatchValidation v = Run({Good(), read});
  EXPECT_TRUE(v.all_ok);
  ASSERT_EQ(v.per_request.size(), 2u);
  EXPECT_TRUE(v.per_request[1].ok()) << v.per_request[1];
}

TEST_F(RequestValidationTest, UnknownOpcode) {
  Request r = Good();
  r.opcode = static_cast<OpKind>(9);
  ExpectOne(r, absl::StatusCode::kInvalidArgument, "unknown opcode 9");
}

TEST_F(RequestValidationTest, ZeroLength) {
  Request r = Good();
  r.length_bytes = 0;
  ExpectOne(r, absl::StatusCode::kInvalidArgument, "zero length");
}

TEST_F(RequestValidationTest, OversizedLength) {
  Request r = Good();
  r.length_bytes = 0x2001;
  ExpectOne(r, absl::StatusCode::kInvalidArgument, "oversized");
}

TEST_F(RequestValidationTest, LocalRangeWraps) {
  Request r = Good();
  r.local_addr = UINT64_MAX - 10;
  ExpectOne(r, absl::StatusCode::kOutOfRange, "wraps");
}

TEST_F(RequestValidationTest, UnregisteredLocalMemory) {
  Request r = Good();
  r.local_addr = kLocal - 0x100;
  ExpectOne(r, absl::StatusCode::kFailedPrecondition, "not in registered memory");
  r.local_addr = kLocal + 0x2000;  // just past the last MR
  ExpectOne(r, absl::StatusCode::kFailedPrecondition, "not in registered memory");
}

TEST_F(RequestValidationTest, LocalRangeRunsPastItsRegistration) {
  Request r = Good();
  r.local_addr = kLocal + 0xf00;
  r.length_bytes = 0x200;  // spans the two adjacent MRs: one WR, one key
  ExpectOne(r, absl::StatusCode::kOutOfRange, "runs past its registration");
}

TEST_F(RequestValidationTest, UnknownPeerSegment) {
  Request r = Good();
  r.segment = SegmentHandle{8};
  ExpectOne(r, absl::StatusCode::kNotFound, "unknown peer segment 8");
  r.segment = SegmentHandle{};
  ExpectOne(r, absl::StatusCode::kNotFound, "unknown peer segment 0");
}

TEST_F(RequestValidationTest, RemoteRangeOutsideTheSegment) {
  Request r = Good();
  r.remote_addr = kRemote + 0x3f80;  // 0x100 bytes from here run past the buffer
  ExpectOne(r, absl::StatusCode::kOutOfRange, "not inside one buffer");
  r.remote_addr = UINT64_MAX - 1;
  ExpectOne(r, absl::StatusCode::kOutOfRange, "not inside one buffer");
  r.remote_addr = 0;
  ExpectOne(r, absl::StatusCode::kOutOfRange, "not inside one buffer");
}

TEST_F(RequestValidationTest, FullBatch) {
  const BatchValidation v = Run({Good(), Good(), Good()}, /*free_slots=*/2);
  EXPECT_FALSE(v.all_ok);
  EXPECT_TRUE(v.per_request[0].ok());
  EXPECT_TRUE(v.per_request[1].ok());
  EXPECT_EQ(v.per_request[2].code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(v.per_request[2].message()), HasSubstr("batch full"));
  EXPECT_FALSE(Run({Good()}, 0).all_ok);
}

TEST_F(RequestValidationTest, OneCodePerRequestInTheDocumentedOrder) {
  Request r = Good();
  r.length_bytes = 0;
  r.segment = SegmentHandle{99};  // also wrong, but length is checked first
  const BatchValidation v = Run({r, Good(), Good()}, 1);
  ASSERT_EQ(v.per_request.size(), 3u);
  EXPECT_EQ(v.per_request[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(v.per_request[0].message().find("zero length") != std::string::npos);
  EXPECT_EQ(v.per_request[2].code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(RequestValidationTest, EmptyBatchIsTriviallyOk) {
  const BatchValidation v = Run({});
  EXPECT_TRUE(v.all_ok);
  EXPECT_TRUE(v.per_request.empty());
}

TEST(RangeSet, RejectsOverlapsZeroLengthAndWrap) {
  RangeSet s;
  ASSERT_TRUE(s.Add(100, 50).ok());
  EXPECT_EQ(s.Add(149, 10).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s.Add(90, 11).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s.Add(90, 100).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(s.Add(150, 10).ok());  // adjacent is fine
  EXPECT_TRUE(s.Add(90, 10).ok());
  EXPECT_EQ(s.Add(0, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Add(UINT64_MAX, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.Covering(149), (Range{100, 50}));
  EXPECT_EQ(s.Covering(160), std::nullopt);
  EXPECT_TRUE(s.Contains(100, 50));
  EXPECT_FALSE(s.Contains(100, 51));
  EXPECT_FALSE(s.Contains(100, 0));
  EXPECT_EQ(s.Remove(101).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(s.Remove(100).ok());
  EXPECT_FALSE(s.Contains(120, 1));
}

// The tag given to Add comes back with the covering range (RouteOf takes a
// peer buffer's rkeys by it); a rejected overlap keeps the first range's.
TEST(RangeSet, CoveringReturnsTheTagOfTheRangeAdded) {
  RangeSet s;
  ASSERT_TRUE(s.Add(1000, 100, 7).ok());
  ASSERT_TRUE(s.Add(0, 10, 3).ok());
  EXPECT_EQ(s.Add(1050, 100, 9).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s.Covering(1099), (Range{1000, 100, 7}));
  EXPECT_EQ(s.Covering(5), (Range{0, 10, 3}));
  EXPECT_EQ(s.Covering(1100), std::nullopt);
}

// The ranges validation found come out per request (Submit routes by
// them without searching again): the local registration and the remote
// buffer, with the tag and flags Add was given; zeros for a bad request.
TEST(ResolvedRangesTest, EachValidRequestNamesItsRegistrationAndBuffer) {
  RangeSet local;
  RangeSet remote;
  ASSERT_TRUE(local.Add(0x1000, 0x1000, /*tag=*/11).ok());
  ASSERT_TRUE(local.Add(0x4000, 0x1000, /*tag=*/12).ok());
  const auto rw = static_cast<uint32_t>(RemoteAccess::kReadWrite);
  ASSERT_TRUE(remote.Add(0x10000, 0x1000, /*tag=*/0, rw).ok());
  ASSERT_TRUE(remote.Add(0x20000, 0x2000, /*tag=*/1, rw).ok());
  const SegmentHandle seg{3};
  auto lookup = [&](SegmentHandle h, size_t) -> const RangeSet* {
    return h == seg ? &remote : nullptr;
  };
  const std::vector<Request> rs = {
      {OpKind::kWrite, 0x4010, 0x100, seg, 0x21000},  // second MR, second buffer
      {OpKind::kRead, 0x1000, 0x1000, seg, 0x10000},  // first MR, first buffer, whole
      {OpKind::kRead, 0x1f00, 0x200, seg, 0x10000},   // runs past its MR: invalid
      {OpKind::kRead, 0x1000, 0x100, seg, 0x11000},   // remote in no buffer: invalid
  };
  std::vector<absl::Status> per_request;
  std::vector<ResolvedRanges> found = {ResolvedRanges{}};  // replaced, not appended to
  EXPECT_FALSE(ValidateRequestsInto(rs, local, lookup, 1 << 20, 16, true, &per_request, &found));
  ASSERT_EQ(found.size(), rs.size());
  EXPECT_TRUE(per_request[0].ok());
  EXPECT_EQ(found[0].local, (Range{0x4000, 0x1000, 12, 0}));
  EXPECT_EQ(found[0].remote, (Range{0x20000, 0x2000, 1, rw}));
  EXPECT_TRUE(per_request[1].ok());
  EXPECT_EQ(found[1].local, (Range{0x1000, 0x1000, 11, 0}));
  EXPECT_EQ(found[1].remote, (Range{0x10000, 0x1000, 0, rw}));
  EXPECT_EQ(per_request[2].code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(found[2].local, Range{});
  EXPECT_EQ(found[2].remote, Range{});
  EXPECT_EQ(per_request[3].code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(found[3].remote, Range{});
  // A remote range that wraps is refused before any search.
  const std::vector<Request> wrap = {{OpKind::kRead, 0x1000, 0x100, seg, ~uint64_t{0} - 0x10}};
  EXPECT_FALSE(ValidateRequestsInto(wrap, local, lookup, 1 << 20, 16, true, &per_request, &found));
  EXPECT_EQ(per_request[0].code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(per_request[0].message()), HasSubstr("is not inside one buffer"));
}

}  // namespace
}  // namespace ferry::engine

namespace ferry::engine {
namespace {

// Check 8a: a peer buffer's RemoteAccess (the Range flags) decides which
// operation may target it; the batch is refused as a whole.
TEST(RemoteAccessCheck, ReadOnlyRefusesWriteAndWriteOnlyRefusesRead) {
  RangeSet local, remote;
  ASSERT_TRUE(local.Add(0x1000, 0x1000).ok());
  ASSERT_TRUE(remote.Add(0x10000, 0x1000, 0, static_cast<uint32_t>(RemoteAccess::kRead)).ok());
  ASSERT_TRUE(remote.Add(0x20000, 0x1000, 1, static_cast<uint32_t>(RemoteAccess::kWrite)).ok());
  const SegmentHandle seg{3};
  auto lookup = [&](SegmentHandle h, size_t) -> const RangeSet* {
    return h == seg ? &remote : nullptr;
  };
  const std::vector<Request> rs = {
      {OpKind::kRead, 0x1000, 0x100, seg, 0x10000},   // read from read-only: ok
      {OpKind::kWrite, 0x1000, 0x100, seg, 0x10000},  // write into read-only: refused
      {OpKind::kWrite, 0x1000, 0x100, seg, 0x20000},  // write into write-only: ok
      {OpKind::kRead, 0x1000, 0x100, seg, 0x20000},   // read from write-only: refused
  };
  const BatchValidation v = ValidateRequests(rs, local, lookup, 1 << 20, 16);
  EXPECT_FALSE(v.all_ok);
  EXPECT_TRUE(v.per_request[0].ok());
  EXPECT_EQ(v.per_request[1].code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(v.per_request[1].message()),
              ::testing::HasSubstr("WRITE into a read-only buffer of segment 3"));
  EXPECT_TRUE(v.per_request[2].ok());
  EXPECT_EQ(v.per_request[3].code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(v.per_request[3].message()),
              ::testing::HasSubstr("READ from a write-only buffer"));
  // The test-only bypass (kEngineC8NoRemoteAccessCheck passes false).
  EXPECT_TRUE(ValidateRequests(rs, local, lookup, 1 << 20, 16, false).all_ok);
}

}  // namespace
}  // namespace ferry::engine
