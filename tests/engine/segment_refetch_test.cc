// Tests of engine/segment_refetch (the refetch-on-REM_ACCESS_ERR
// decisions): one refetch per segment, late errors of older versions start
// nothing, and only a strictly newer descriptor of the same peer process
// replaces the held one.
#include "engine/segment_refetch.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace ferry::engine {
namespace {

SegmentDescriptor Desc(const char* addr, uint64_t incarnation, uint64_t version) {
  SegmentDescriptor d;
  d.address = addr;
  d.incarnation = incarnation;
  d.version = version;
  return d;
}

TEST(SegmentRefetch, StartsOnlyForTheHeldVersionAndOnlyOnce) {
  EXPECT_EQ(DecideRefetchStart(3, 3, false), RefetchStart::kStart);
  EXPECT_EQ(DecideRefetchStart(3, 3, true), RefetchStart::kInFlight);
  // A late error of a request submitted with version 2: the held version 3
  // is not known bad.
  EXPECT_EQ(DecideRefetchStart(3, 2, false), RefetchStart::kOlderVersion);
  EXPECT_EQ(DecideRefetchStart(3, 2, true), RefetchStart::kOlderVersion);
  // Reported newer than held cannot come from this engine's Submit, but it
  // is not ignored: the held one is at least as old.
  EXPECT_EQ(DecideRefetchStart(3, 4, false), RefetchStart::kStart);
}

TEST(SegmentRefetch, AppliesOnlyAStrictlyNewerVersionOfTheSamePeer) {
  const SegmentDescriptor held = Desc("h1:7000", 99, 5);
  EXPECT_EQ(DecideRefetchAnswer(held, Desc("h1:7000", 99, 6)), RefetchAnswer::kApply);
  EXPECT_EQ(DecideRefetchAnswer(held, Desc("h1:7000", 99, 5)), RefetchAnswer::kUnchanged);
  EXPECT_EQ(DecideRefetchAnswer(held, Desc("h1:7000", 99, 4)), RefetchAnswer::kUnchanged);
  EXPECT_EQ(DecideRefetchAnswer(held, Desc("h1:7000", 98, 9)), RefetchAnswer::kOtherIncarnation);
  EXPECT_EQ(DecideRefetchAnswer(held, Desc("h2:7000", 99, 9)), RefetchAnswer::kOtherAddress);
}

TEST(SegmentRefetch, NamesAreDistinct) {
  EXPECT_EQ(RefetchStartName(RefetchStart::kStart), "start");
  EXPECT_EQ(RefetchStartName(RefetchStart::kInFlight), "in_flight");
  EXPECT_EQ(RefetchStartName(RefetchStart::kOlderVersion), "older_version");
  EXPECT_EQ(RefetchAnswerName(RefetchAnswer::kApply), "apply");
  EXPECT_EQ(RefetchAnswerName(RefetchAnswer::kUnchanged), "unchanged");
  EXPECT_EQ(RefetchAnswerName(RefetchAnswer::kOtherIncarnation), "other_incarnation");
  EXPECT_EQ(RefetchAnswerName(RefetchAnswer::kOtherAddress), "other_address");
}

}  // namespace
}  // namespace ferry::engine
