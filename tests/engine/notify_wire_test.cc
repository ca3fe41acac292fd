// tests/engine/notify_wire_test.cc: the notification payload codec (round
// trip, every truncation, each field rule) and NotifyDedup (at most once per
// (sender incarnation, seq), the window, a new incarnation).
#include "engine/notify_wire.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ferry::engine {
namespace {

NotifyMessage Sample(size_t len) {
  NotifyMessage m;
  m.incarnation = 0x1122334455667788u;
  m.seq = 42;
  m.batch = 7;
  m.message.assign(len, 'x');
  for (size_t i = 0; i < len; ++i) m.message[i] = static_cast<char>('a' + i % 26);
  return m;
}

TEST(NotifyWire, RoundTripsEveryLengthClass) {
  for (size_t len : {size_t{0}, size_t{1}, size_t{100}, kNotifyBytesMax}) {
    const NotifyMessage m = Sample(len);
    const std::vector<uint8_t> w = EncodeNotify(m);
    EXPECT_EQ(w.size(), kNotifyHeaderBytes + len);
    auto d = DecodeNotify(w);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, m);
  }
}

TEST(NotifyWire, EveryTruncationAndTrailingByteIsRefused) {
  const std::vector<uint8_t> w = EncodeNotify(Sample(37));
  for (size_t n = 0; n < w.size(); ++n) {
    auto d = DecodeNotify(absl::MakeConstSpan(w.data(), n));
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << "length " << n;
  }
  std::vector<uint8_t> longer = w;
  longer.push_back(0);
  EXPECT_EQ(DecodeNotify(longer).status().message(), "notification: trailing bytes");
}

TEST(NotifyWire, EachFieldRule) {
  const std::vector<uint8_t> good = EncodeNotify(Sample(5));
  auto with = [&](size_t at, uint8_t v) {
    std::vector<uint8_t> b = good;
    b[at] = v;
    return DecodeNotify(b).status();
  };
  EXPECT_EQ(with(0, 0).message(), "notification: wrong magic");
  EXPECT_EQ(with(4, 2).message(), "notification: version 2 not supported");
  EXPECT_EQ(with(6, 1).message(), "notification: unknown flags");
  // seq is at offset 16: zero it.
  std::vector<uint8_t> zero_seq = good;
  for (size_t i = 16; i < 24; ++i) zero_seq[i] = 0;
  EXPECT_EQ(DecodeNotify(zero_seq).status().message(), "notification: seq 0");
  // length is at offset 32: one past the maximum.
  std::vector<uint8_t> huge = good;
  const uint32_t len = kNotifyBytesMax + 1;
  for (int i = 0; i < 4; ++i) huge[32 + i] = static_cast<uint8_t>(len >> (8 * i));
  EXPECT_EQ(DecodeNotify(huge).status().message(),
            "notification: message longer than kNotifyBytesMax");
  std::vector<uint8_t> oversized(kNotifyWireBytesMax + 1, 0);
  EXPECT_EQ(DecodeNotify(oversized).status().message(),
            "notification: longer than the largest notification");
}

using V = NotifyDedup::Verdict;

TEST(NotifyDedup, AdmitsEachSeqOnceInAnyOrderWithinTheWindow) {
  NotifyDedup d;
  EXPECT_EQ(d.Admit(1, 1), V::kAdmit);
  EXPECT_EQ(d.Admit(1, 1), V::kDuplicate);
  EXPECT_EQ(d.Admit(1, 3), V::kAdmit);
  EXPECT_EQ(d.Admit(1, 2), V::kAdmit);  // a resend overtaken by a later one
  EXPECT_EQ(d.Admit(1, 2), V::kDuplicate);
  EXPECT_EQ(d.Admit(1, 3), V::kDuplicate);
  EXPECT_EQ(d.Admit(1, 3 + NotifyDedup::kWindow), V::kAdmit);
  EXPECT_EQ(d.Admit(1, 3), V::kTooOld);  // out of the window: refused, never twice
  EXPECT_EQ(d.Admit(1, 4), V::kAdmit);   // the oldest seq still inside it
}

TEST(NotifyDedup, ANewIncarnationStartsANewSpace) {
  NotifyDedup d;
  EXPECT_EQ(d.Admit(1, 5), V::kAdmit);
  EXPECT_EQ(d.Admit(2, 5), V::kAdmit);
  EXPECT_EQ(d.Admit(2, 5), V::kDuplicate);
}

// Exhaustive over short arrival orders with duplicates: a seq is admitted
// exactly once when it is within the window of the highest seen.
TEST(NotifyDedup, NeverAdmitsTwiceExhaustive) {
  for (uint32_t code = 0; code < 6 * 6 * 6 * 6 * 6; ++code) {
    NotifyDedup d;
    std::vector<int> admitted(7, 0);
    uint32_t c = code;
    for (int i = 0; i < 5; ++i) {
      const uint64_t seq = 1 + c % 6;
      c /= 6;
      if (d.Admit(9, seq) == V::kAdmit) ++admitted[seq];
    }
    for (int s = 1; s <= 6; ++s) EXPECT_LE(admitted[s], 1) << "code " << code << " seq " << s;
  }
}

}  // namespace
}  // namespace ferry::engine
