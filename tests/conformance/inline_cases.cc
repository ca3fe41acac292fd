// tests/conformance/inline_cases.cc: IBV_SEND_INLINE (docs/design.md
// section 3, "Inline sends"). An inline WR's bytes are copied into the WQE
// by post_send: when it returns, the buffer is the caller's again, and no
// later change to it reaches the peer. The length is bounded by the QP's
// max_inline_data, itself bounded by the device at create.
#include <algorithm>
#include <cstdio>

#include "gtest/gtest.h"
#include "tests/conformance/conformance_env.h"
#include "tests/conformance/rig.h"

namespace ferry::conformance {
namespace {

constexpr uint32_t kInlineAsked = 64;

TEST_P(Conformance, InlineWriteTakesItsBytesAtPost) {
  Rig rig(env());
  ASSERT_TRUE(rig.ok());
  rig.max_inline_data = kInlineAsked;
  auto p = rig.Connect();
  ASSERT_TRUE(p.ok()) << p.status();
  std::printf("max_inline_data: asked %u, reported %u\n", kInlineAsked, p->a.cap.max_inline_data);
  EXPECT_GE(p->a.cap.max_inline_data, kInlineAsked);
  uint8_t* src = rig.a().buf.data() + 128;
  std::fill(src, src + kInlineAsked, 0x5A);
  hal::SendWr wr = rig.Write(7, 128, kInlineAsked);
  wr.send_flags |= hal::kSendInline;
  ASSERT_TRUE(rig.a().v->PostSend(p->a.qp, {&wr, 1}).status.ok());
  std::fill(src, src + kInlineAsked, 0xEE);  // the buffer is the caller's again
  auto wcs = rig.PollN(0, 1, 2 * kSecond);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 7u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  const auto holds = [&](uint8_t v) {
    return std::all_of(rig.b().buf.begin() + 128, rig.b().buf.begin() + 128 + kInlineAsked,
                       [v](uint8_t b) { return b == v; });
  };
  EXPECT_TRUE(holds(0x5A)) << (holds(0xEE)
                                   ? "an inline WRITE placed bytes written after post_send returned"
                                   : "an inline WRITE placed neither the posted nor later bytes");
}

TEST_P(Conformance, InlineBeyondMaxInlineDataIsRefused) {
  Rig rig(env());
  ASSERT_TRUE(rig.ok());
  rig.max_inline_data = kInlineAsked;
  auto p = rig.Connect();
  ASSERT_TRUE(p.ok()) << p.status();
  const uint32_t too_long = p->a.cap.max_inline_data + 1;
  hal::SendWr wr = rig.Write(8, 0, too_long);
  wr.send_flags |= hal::kSendInline;
  const hal::PostResult r = rig.a().v->PostSend(p->a.qp, {&wr, 1});
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument) << r.status;
  EXPECT_EQ(r.first_bad, 0u);
  // Nothing was posted: no completion, and the QP still works.
  EXPECT_TRUE(rig.PollN(0, 1, env().traits().sim ? 10'000'000 : kSecond / 10).empty());
  hal::SendWr ok = rig.Write(9, 0, too_long);
  ASSERT_TRUE(rig.a().v->PostSend(p->a.qp, {&ok, 1}).status.ok());
  auto wcs = rig.PollN(0, 1, 2 * kSecond);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 9u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
}

TEST_P(Conformance, CreateQpRefusesInlineBeyondTheDevice) {
  Rig rig(env());
  ASSERT_TRUE(rig.ok());
  hal::QpInitAttr init;
  init.send_cq = init.recv_cq = rig.a().cq;
  init.cap.max_send_wr = 16;
  init.cap.max_recv_wr = 1;
  init.cap.max_inline_data = 1u << 20;
  auto qp = rig.a().v->CreateQp(rig.a().pd, init);
  EXPECT_EQ(qp.status().code(), absl::StatusCode::kInvalidArgument) << qp.status();
  if (qp.ok()) {
    EXPECT_TRUE(rig.a().v->DestroyQp(qp->qp).ok());
  }
}

}  // namespace
}  // namespace ferry::conformance
