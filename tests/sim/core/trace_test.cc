// Tests of sim::Trace: the rolling hash is pinned for a fixed sequence, depends
// on every argument and on order but not on time or record size, and the
// record stays bounded (rolling tail or window) with correct seq and hashes.
#include "sim/trace.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "base/fnv1a.h"

namespace ferry::sim {
namespace {

TEST(Trace, EmptyTraceHashIsTheFnvOffset) {
  Trace trace;
  EXPECT_EQ(trace.hash(), base::kFnv1a64Offset);
  EXPECT_EQ(trace.entries(), 0U);
  EXPECT_TRUE(trace.record().empty());
}

// Pinned: FNV-1a 64 over 'D', le64(3), le64(0x1234), then 'E', "step", 0,
// le64(1), le64(2), le64(3) (values from an independent model).
TEST(Trace, HashOfAFixedSequenceIsPinned) {
  Trace trace;
  trace.Draw(3, 0x1234);
  EXPECT_EQ(trace.hash(), 0x26d8364fb6fbafcaULL);
  trace.Event("step", 1, 2, 3);
  EXPECT_EQ(trace.hash(), 0x02341f7504396ee5ULL);
  EXPECT_EQ(trace.entries(), 2U);
}

uint64_t HashOf(void (*fill)(Trace&), size_t record_max = 0) {
  Trace trace(record_max);
  fill(trace);
  return trace.hash();
}

TEST(Trace, HashCoversEveryArgumentAndOrderButNotTimeOrRecordSize) {
  auto base = [](Trace& t) {
    t.Draw(1, 10);
    t.Event("a", 1, 2, 3);
  };
  const uint64_t h = HashOf(base);
  EXPECT_EQ(HashOf(base, 1), h);
  EXPECT_EQ(HashOf(base, 100), h);
  EXPECT_EQ(HashOf([](Trace& t) {
              t.SetTimeNs(999);
              t.Draw(1, 10);
              t.SetTimeNs(5000);
              t.Event("a", 1, 2, 3);
            }),
            h);
  EXPECT_NE(HashOf([](Trace& t) {
              t.Event("a", 1, 2, 3);
              t.Draw(1, 10);
            }),
            h);
  EXPECT_NE(HashOf([](Trace& t) {
              t.Draw(2, 10);
              t.Event("a", 1, 2, 3);
            }),
            h);
  EXPECT_NE(HashOf([](Trace& t) {
              t.Draw(1, 11);
              t.Event("a", 1, 2, 3);
            }),
            h);
  EXPECT_NE(HashOf([](Trace& t) {
              t.Draw(1, 10);
              t.Event("b", 1, 2, 3);
            }),
            h);
  EXPECT_NE(HashOf([](Trace& t) {
              t.Draw(1, 10);
              t.Event("a", 1, 2, 4);
            }),
            h);
  // The kind is terminated: "ab" + args differs from "a" + other bytes.
  EXPECT_NE(HashOf([](Trace& t) { t.Event("ab", 0, 0, 0); }),
            HashOf([](Trace& t) { t.Event("a", 'b', 0, 0); }));
}

TEST(Trace, RollingRecordKeepsTheLatestEntries) {
  Trace trace(3);
  for (uint64_t i = 0; i < 10; ++i) {
    trace.SetTimeNs(100 * i);
    trace.Draw(7, i);
    ASSERT_LE(trace.record().size(), 3U);
  }
  ASSERT_EQ(trace.record().size(), 3U);
  EXPECT_EQ(trace.entries(), 10U);
  EXPECT_EQ(trace.record()[0].seq, 7U);
  EXPECT_EQ(trace.record()[2].seq, 9U);
  EXPECT_EQ(trace.record()[2].time_ns, 900U);
  EXPECT_EQ(trace.record()[2].hash_after, trace.hash());
  EXPECT_EQ(trace.record()[0].text, "draw s=7 v=0x0000000000000007");
  trace.Event("jump", 5, 6, 0);
  EXPECT_EQ(trace.record().back().text, "event jump 5 6 0");
}

TEST(Trace, WindowRecordKeepsEntriesFromFirstSeq) {
  Trace trace(4);
  trace.RecordFrom(5);
  Trace reference(100);
  for (uint64_t i = 0; i < 20; ++i) {
    trace.Event("e", i, 0, 0);
    reference.Event("e", i, 0, 0);
  }
  ASSERT_EQ(trace.record().size(), 4U);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(trace.record()[i].seq, 5 + i);
    EXPECT_EQ(trace.record()[i].hash_after, reference.record()[5 + i].hash_after);
    EXPECT_EQ(trace.record()[i].text, reference.record()[5 + i].text);
  }
  EXPECT_EQ(trace.hash(), reference.hash());
}

TEST(Trace, HashOnlyTraceKeepsNoRecord) {
  Trace trace;
  for (int i = 0; i < 100; ++i) trace.Draw(0, static_cast<uint64_t>(i));
  EXPECT_TRUE(trace.record().empty());
  EXPECT_EQ(trace.entries(), 100U);
}

}  // namespace
}  // namespace ferry::sim
