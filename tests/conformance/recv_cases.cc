// tests/conformance/recv_cases.cc: the receive side of an RC QP, one case
// per rule (docs/simulator.md section 4 lists them with their mutations):
// SEND placed into the posted receive WR and completed RECV with its
// length; WRITE with immediate placed where it names and reported through
// a receive WR (RECV_RDMA_WITH_IMM, the immediate in host order); RNR NAK
// retried rnr_retry times, then RNR_RETRY_EXC_ERR, and an RNR wait that
// ends when a receive WR is posted; receive WRs flushed at ERR, in post
// order; the receive queue's depth; post_recv in RESET; a SEND longer
// than its receive WR; a duplicate SEND consumes nothing (sim only: it
// needs ACK loss); receive completions overrunning the CQ. Each failure
// message names the rule it breaks.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "tests/conformance/conformance_env.h"
#include "tests/conformance/rig.h"

namespace ferry::conformance {
namespace {

constexpr uint64_t kRecvOff = 0x8000;  // receive buffers live in B's upper half

void Fill(std::vector<uint8_t>& buf, uint64_t off, uint64_t len, uint8_t seed) {
  for (uint64_t i = 0; i < len; ++i) buf[off + i] = static_cast<uint8_t>(seed + i * 7);
}
bool Same(const std::vector<uint8_t>& a, uint64_t a_off, const std::vector<uint8_t>& b,
          uint64_t b_off, uint64_t len) {
  return std::equal(a.begin() + static_cast<std::ptrdiff_t>(a_off),
                    a.begin() + static_cast<std::ptrdiff_t>(a_off + len),
                    b.begin() + static_cast<std::ptrdiff_t>(b_off));
}

TEST_P(Conformance, RecvSendPlacedAndCompleted) {
  Rig rig(env());
  ASSERT_TRUE(rig.ok());
  rig.recv_depth = 4;
  auto p = rig.Connect();
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(rig.PostRecv(1, p->b.qp, 900, kRecvOff, 4096).ok());
  Fill(rig.a().buf, 0, 3000, 0x31);  // three packets at MTU 1024
  hal::SendWr s = rig.Send(1, 0, 3000);
  ASSERT_TRUE(rig.a().v->PostSend(p->a.qp, {&s, 1}).status.ok());
  auto sent = rig.PollN(0, 1, 5 * kSecond);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, WcStatus::kSuccess);
  EXPECT_EQ(sent[0].opcode, hal::Opcode::kSend);
  auto got = rig.PollN(1, 1, 5 * kSecond);
  ASSERT_EQ(got.size(), 1u) << "no receive completion for a SEND";
  EXPECT_EQ(got[0].wr_id, 900u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess);
  EXPECT_EQ(got[0].opcode, hal::Opcode::kRecv);
  EXPECT_EQ(got[0].byte_len, 3000u);
  EXPECT_EQ(got[0].wc_flags & hal::kWcWithImm, 0u);
  EXPECT_TRUE(Same(rig.a().buf, 0, rig.b().buf, kRecvOff, 3000)) << "SEND bytes not placed";
  EXPECT_EQ(rig.b().buf[kRecvOff + 3000], 0x11) << "placed past the message";
}

TEST_P(Conformance, RecvWriteWithImmediate) {
  Rig rig(env());
  ASSERT_TRUE(rig.ok());
  rig.recv_depth = 4;
  auto p = rig.Connect();
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(rig.PostRecv(1, p->b.qp, 901, 0, 0).ok());  // no SGE: enough for the immediate
  Fill(rig.a().buf, 0, 2500, 0x52);
  hal::SendWr w = rig.Wr(hal::Opcode::kRdmaWriteWithImm, 2, 0, 2500);
  w.imm_data = 0xdeadbeef;
  ASSERT_TRUE(rig.a().v->PostSend(p->a.qp, {&w, 1}).status.ok());
  auto sent = rig.PollN(0, 1, 5 * kSecond);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, WcStatus::kSuccess);
  EXPECT_EQ(sent[0].opcode, hal::Opcode::kRdmaWrite) << "WRITE_WITH_IMM completes RDMA_WRITE";
  auto got = rig.PollN(1, 1, 5 * kSecond);
  ASSERT_EQ(got.size(), 1u) << "a WRITE with immediate produced no receive completion";
  EXPECT_EQ(got[0].wr_id, 901u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess);
  EXPECT_EQ(got[0].opcode, hal::Opcode::kRecvRdmaWithImm);
  EXPECT_EQ(got[0].wc_flags & hal::kWcWithImm, uint32_t{hal::kWcWithImm});
  EXPECT_EQ(got[0].imm_data, 0xdeadbeefu);
  EXPECT_EQ(got[0].byte_len, 2500u);
  EXPECT_TRUE(Same(rig.a().buf, 0, rig.b().buf, 0, 2500)) << "WRITE bytes not placed";
}

// No receive WR: RNR NAKs, rnr_retry of them resent, then
// RNR_RETRY_EXC_ERR; the requester enters ERR, the responder stays in RTS.
TEST_P(Conformance, RnrRetryExhausted) {
  Rig rig(env());
  ASSERT_TRUE(rig.ok());
  rig.rnr_retry = 2;
  rig.min_rnr_timer = 1;  // 10 us (rxe: one jiffy)
  auto p = rig.Connect();
  ASSERT_TRUE(p.ok()) << p.status();
  hal::SendWr s = rig.Send(3, 0, 64);
  const uint64_t t0 = env().NowNs();
  ASSERT_TRUE(rig.a().v->PostSend(p->a.qp, {&s, 1}).status.ok());
  auto wcs = rig.PollN(0, 1, 5 * kSecond);
  ASSERT_EQ(wcs.size(), 1u) << "no RNR_RETRY_EXC_ERR: the SEND never completed";
  EXPECT_EQ(wcs[0].status, WcStatus::kRnrRetryExcErr);
  // Two waits (rnr_retry 2) of at least the device's floor came first.
  EXPECT_GE(env().NowNs() - t0, 2 * env().traits().rnr_wait_floor_ns);
  EXPECT_EQ(StateOf(rig.a(), p->a.qp), QpState::kErr);
  EXPECT_EQ(StateOf(rig.b(), p->b.qp), QpState::kRts);
  EXPECT_TRUE(rig.PollN(1, 1, 10'000'000).empty()) << "the responder completed something";
}

// A WRITE with immediate needs a receive WR too: without one it is
// refused like a SEND, and nothing completes at the responder.
TEST_P(Conformance, WriteImmWithoutRecvIsRnr) {
  Rig rig(env());
  ASSERT_TRUE(rig.ok());
  rig.rnr_retry = 1;
  rig.min_rnr_timer = 1;
  auto p = rig.Connect();
  ASSERT_TRUE(p.ok()) << p.status();
  hal::SendWr w = rig.Wr(hal::Opcode::kRdmaWriteWithImm, 4, 0, 64);
  w.imm_data = 7;
  ASSERT_TRUE(rig.a().v->PostSend(p->a.qp, {&w, 1}).status.ok());
  auto wcs = rig.PollN(0, 1, 5 * kSecond);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRnrRetryExcErr)
      << "a WRITE with immediate completed with no receive WR posted: "
      << hal::WcStatusName(wcs[0].status);
  EXPECT_TRUE(rig.PollN(1, 1, 10'000'000).empty());
}

// RNR is a wait, not an error, while retries last: a receive WR posted
// during the wait lets the resent SEND through.
TEST_P(Conformance, RnrWaitEndsWhenRecvPosted) {
  Rig rig(env());
  ASSERT_TRUE(rig.ok());
  rig.recv_depth = 4;
  rig.min_rnr_timer = 1;  // retried forever (rnr_retry 7)
  auto p = rig.Connect();
  ASSERT_TRUE(p.ok()) << p.status();
  Fill(rig.a().buf, 0, 512, 0x70);
  hal::SendWr s = rig.Send(5, 0, 512);
  ASSERT_TRUE(rig.a().v->PostSend(p->a.qp, {&s, 1}).status.ok());
  env().Wait(20'000'000);
  EXPECT_TRUE(rig.PollN(0, 1, 0).empty()) << "the SEND completed with no receive WR";
  ASSERT_TRUE(rig.PostRecv(1, p->b.qp, 905, kRecvOff, 1024).ok());
  auto sent = rig.PollN(0, 1, 10 * kSecond);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, WcStatus::kSuccess);
  auto got = rig.PollN(1, 1, 5 * kSecond);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 905u);
  EXPECT_EQ(got[0].byte_len, 512u);
  EXPECT_TRUE(Same(rig.a().buf, 0, rig.b().buf, kRecvOff, 512));
}

TEST_P(Conformance, RecvFlushedInOrderAtErr) {
  Rig rig(env());
  ASSERT_TRUE(rig.ok());
  rig.recv_depth = 8;
  auto p = rig.Connect();
  ASSERT_TRUE(p.ok()) << p.status();
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(rig.PostRecv(1, p->b.qp, 910 + i, kRecvOff + 1024 * i, 1024).ok());
  }
  ASSERT_TRUE(rig.ToErr(1, p->b.qp).ok());
  auto wcs = rig.PollN(1, 3, 5 * kSecond);
  ASSERT_EQ(wcs.size(), 3u) << "receive WRs not flushed at ERR: " << wcs.size()
                            << " of 3 completions";
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].wr_id, 910 + i) << "post order";
    EXPECT_EQ(wcs[i].status, WcStatus::kWrFlushErr);
  }
}

// A receive WR posted in ERR: mlx5 flushes it at once; rxe keeps it until
// the next move to ERR (user-space post_recv only writes the ring).
TEST_P(Conformance, RecvPostedInErr) {
  Rig rig(env());
  ASSERT_TRUE(rig.ok());
  rig.recv_depth = 4;
  auto p = rig.Connect();
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(rig.ToErr(1, p->b.qp).ok());
  ASSERT_TRUE(rig.PostRecv(1, p->b.qp, 920, kRecvOff, 64).ok());
  auto wcs = rig.PollN(1, 1, env().traits().recv_posted_in_err_flushes ? 5 * kSecond : 50'000'000);
  if (!env().traits().recv_posted_in_err_flushes) {
    EXPECT_TRUE(wcs.empty()) << "rxe flushed a receive WR posted in ERR at once";
    ASSERT_TRUE(rig.ToErr(1, p->b.qp).ok());  // ERR -> ERR runs the flush
    wcs = rig.PollN(1, 1, 5 * kSecond);
  }
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 920u);
  EXPECT_EQ(wcs[0].status, WcStatus::kWrFlushErr);
}

TEST_P(Conformance, RecvQueueDepthAndReset) {
  Rig rig(env());
  ASSERT_TRUE(rig.ok());
  rig.recv_depth = 4;
  hal::QpInfo q = rig.MakeQp(1);
  ASSERT_TRUE(q.qp.valid());
  // RESET: post_recv is refused.
  EXPECT_EQ(rig.PostRecv(1, q.qp, 1, kRecvOff, 64).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(rig.ToInit(1, q.qp).ok());
  auto attr = rig.b().v->QueryQp(q.qp);
  ASSERT_TRUE(attr.ok()) << attr.status();
  const uint32_t depth = attr->cap.max_recv_wr;  // the device's rounding of 4
  if (env().traits().recv_ring_2k_minus_1) {
    EXPECT_EQ(depth, 7u) << "rxe's ring for 4 receive WRs";
  } else {
    EXPECT_EQ(depth, 4u) << "a power of two";
  }
  ASSERT_GE(depth, 4u);
  ASSERT_LE(depth, 64u);
  for (uint32_t i = 0; i < depth; ++i) {
    ASSERT_TRUE(rig.PostRecv(1, q.qp, 100 + i, kRecvOff, 64).ok()) << "receive WR " << i;
  }
  const absl::Status over = rig.PostRecv(1, q.qp, 999, kRecvOff, 64);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted)
      << "post_recv beyond the receive queue's depth (" << depth << ") was accepted: " << over;
}

TEST_P(Conformance, SendLongerThanRecvWr) {
  Rig rig(env());
  ASSERT_TRUE(rig.ok());
  rig.recv_depth = 4;
  auto p = rig.Connect();
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(rig.PostRecv(1, p->b.qp, 930, kRecvOff, 1024).ok());
  hal::SendWr s = rig.Send(6, 0, 3000);
  ASSERT_TRUE(rig.a().v->PostSend(p->a.qp, {&s, 1}).status.ok());
  auto sent = rig.PollN(0, 1, 5 * kSecond);
  ASSERT_EQ(sent.size(), 1u);
  auto got = rig.PollN(1, 1, 5 * kSecond);
  ASSERT_EQ(got.size(), 1u);
  const bool qp_op = env().traits().send_too_long_qp_op_err;
  EXPECT_EQ(got[0].status, qp_op ? WcStatus::kLocQpOpErr : WcStatus::kLocLenErr)
      << "a SEND longer than its receive WR completed: " << hal::WcStatusName(got[0].status);
  EXPECT_EQ(sent[0].status, qp_op ? WcStatus::kRemOpErr : WcStatus::kRemInvReqErr)
      << "a SEND longer than its receive WR completed: " << hal::WcStatusName(sent[0].status);
  EXPECT_EQ(StateOf(rig.b(), p->b.qp), QpState::kErr);
}

// More receive completions than the responder's CQ holds: an overrun, as
// for send completions (CqOverrunIsReported): the receive side needs CQ
// room for every posted receive WR, which is why the engine will count
// them in its CQ quota (docs/design.md 10.1).
TEST_P(Conformance, RecvCqOverrunIsReported) {
  Rig rig(env(), /*cqe=*/4);
  ASSERT_TRUE(rig.ok());
  const uint32_t cap = rig.b().cqe;
  rig.recv_depth = 64;
  auto p = rig.Connect(64);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_LE(cap + 2, 32u);
  for (uint64_t i = 0; i < cap + 2; ++i) {
    ASSERT_TRUE(rig.PostRecv(1, p->b.qp, 960 + i, kRecvOff + 64 * i, 64).ok());
  }
  std::vector<hal::SendWr> chain;
  for (uint64_t i = 0; i < cap + 2; ++i) chain.push_back(rig.Send(i, 8 * i, 8));
  ASSERT_TRUE(rig.a().v->PostSend(p->a.qp, chain).status.ok());
  env().Wait(env().traits().sim ? 10'000'000 : 2 * kSecond);
  hal::WorkCompletion wc[64];
  auto got = rig.b().v->PollCq(rig.b().cq, absl::MakeSpan(wc, 64));
  const bool poll_failed = !got.ok();
  auto events = rig.DrainAsync(1);
  const bool cq_err = std::count(events.begin(), events.end(), hal::AsyncEventType::kCqErr) > 0;
  EXPECT_TRUE(poll_failed || cq_err) << "a receive CQ overrun went unreported ("
                                     << (got.ok() ? *got : 0) << " polled, capacity " << cap << ")";
}

// A SEND whose ACK is lost is resent; the responder acknowledges the
// duplicate without consuming another receive WR.
TEST_P(Conformance, DuplicateSendConsumesNothing) {
  if (!env().traits().can_lose_acks) GTEST_SKIP() << "needs ACK loss (sim only)";
  Rig rig(env());
  ASSERT_TRUE(rig.ok());
  rig.recv_depth = 4;
  auto p = rig.Connect(64, 8, 7);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(rig.PostRecv(1, p->b.qp, 940, kRecvOff, 64).ok());
  ASSERT_TRUE(rig.PostRecv(1, p->b.qp, 941, kRecvOff + 64, 64).ok());
  hal::SendWr s = rig.Send(7, 0, 64);
  ASSERT_TRUE(rig.a().v->PostSend(p->a.qp, {&s, 1}).status.ok());
  env().Wait(500);
  ASSERT_TRUE(env().SetLinkUp(0, false));  // the ACK will be lost
  env().Wait(5'000);
  ASSERT_TRUE(env().SetLinkUp(0, true));
  rig.DrainAsync(0);
  auto sent = rig.PollN(0, 1, 10 * kSecond);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, WcStatus::kSuccess);
  auto got = rig.PollN(1, 2, 50'000'000);
  ASSERT_GE(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 940u);
  EXPECT_EQ(got.size(), 1u) << "a duplicate SEND was delivered twice";
}

}  // namespace
}  // namespace ferry::conformance
