// tests/softroce/probe/buffer_safety_probe.cc: the field bug's buffer-safety
// probe on real verbs (issue 10, docs/testing.md "Real verbs"). Two Ferry
// engines in one process: a target on the first RDMA device, an initiator
// on the second (rxe0 and rxe1 in the Soft-RoCE VM), each over libibverbs
// behind a HoldVerbs (hold_verbs.h).
//
// Each case (10 READ, 10 WRITE, alternating):
//   1. a transfer on the current endpoint completes and verifies (for every
//      case but the first, this is "the next transfer on a fresh endpoint"
//      of the case before);
//   2. the target's QP of that endpoint is held in INIT: it drops every
//      packet, so the initiator's WR cannot complete and rxe retries it
//      (QP timeout 18 = 1.07 s per try, retry_cnt 7: seconds of budget);
//   3. the initiator's next move to ERR is paused just before it reaches the
//      device; the probe WR is submitted (slice_timeout_ns 200 ms);
//   4. C1: while paused (the deadline has passed, the QP is still RTS) the
//      status must stay PENDING; after the release, TIMEOUT is published
//      only once the real WR_FLUSH_ERR was polled;
//   5. the consumer reuses the buffer only after TIMEOUT (writes a
//      pattern), then the target's QP is moved to RTR/RTS inside the retry
//      budget: a late remote side that would let the old WR through;
//   6. for 2.5 s the probe watches for the RNIC touching the reused memory
//      (READ: a late response overwrites it; WRITE: the late WR carries the
//      new pattern to the peer).
// The table's four rows, expected 0, 0, 20, 20; under
// FERRY_MUTATION=engine_c1_early_publish (buffer_safety_probe_mut) the
// first two become non-zero and the test fails naming them.
//
// Without two RDMA devices every test skips (GTEST_SKIP): meson's hal_real
// suite on a machine without RDMA; the softroce suite runs it in the VM.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/property/prop_env.h"
#include "tests/softroce/probe/real_side.h"

namespace ferry::probe {
namespace {

constexpr uint64_t kSliceTimeoutNs = 200'000'000;
constexpr uint64_t kXferBytes = 16 * 1024;  // one slice, one WR
constexpr uint64_t kBufBytes = 64 * 1024;
constexpr uint64_t kWatchNs = 2'500'000'000;  // > 2 retry periods of 1.07 s
constexpr uint64_t kWaitNs = 15'000'000'000;
constexpr int kCasesPerOp = 10;

struct CaseResult {
  bool timeout_while_rts = false;
  bool reused_touched = false;
  bool flush_before_timeout = false;
  bool next_ok = false;
  std::string trace;  // what happened, in order
};

EngineConfig ProbeConfig() {
  EngineConfig c;
  c.workers = 1;
  c.qps_per_endpoint = 1;
  c.slice_timeout_ns = kSliceTimeoutNs;
  c.qp_timeout_exp = 18;
  c.qp_retries = 7;
  return c;
}

std::string Name(TaskStatus s) { return std::string(TaskStatusName(s)); }

uint8_t Pattern(uint32_t salt, uint64_t k) { return static_cast<uint8_t>(salt * 131 + k * 7 + 1); }

class BufferSafetyProbe : public ::testing::Test {
 protected:
  void SetUp() override {
    devs_ = RdmaDevices();
    if (devs_.size() < 2) GTEST_SKIP() << "needs two RDMA devices (have " << devs_.size() << ")";
    // FERRY_MUTATION (real_probes_mut only; an unknown name aborts).
    base::Mutations m;
    (void)property::ApplyEnvMutation(m);
    auto t = StartSide(devs_[0], ProbeConfig(), kBufBytes, &seq_, m);
    ASSERT_TRUE(t.ok()) << t.status();
    tgt_ = std::move(*t);
    auto i = StartSide(devs_[1], ProbeConfig(), kBufBytes, &seq_, m);
    ASSERT_TRUE(i.ok()) << i.status();
    ini_ = std::move(*i);
    auto seg = Open(*ini_, tgt_->net->LocalAddress(), kWaitNs);
    ASSERT_TRUE(seg.ok()) << seg.status();
    seg_ = *seg;
  }
  void TearDown() override {
    if (ini_) {
      EXPECT_EQ(Shutdown(*ini_, 10'000'000'000), "") << "initiator";
    }
    if (tgt_) {
      EXPECT_EQ(Shutdown(*tgt_, 10'000'000'000), "") << "target";
    }
  }

  Request Req(OpKind op) const {
    return Request{op, ini_->addr(0), kXferBytes, seg_, tgt_->addr(0)};
  }

  // A verified transfer on whatever endpoint is current (a new one after a
  // retire). Up to 10 tries: under TCG a fresh handshake can outlast the
  // 200 ms task timeout.
  bool Transfer(OpKind op, uint32_t salt, std::string* trace) {
    for (int attempt = 0; attempt < 10; ++attempt) {
      uint8_t* src = op == OpKind::kWrite ? ini_->at(0) : tgt_->at(0);
      uint8_t* dst = op == OpKind::kWrite ? tgt_->at(0) : ini_->at(0);
      for (uint64_t k = 0; k < kXferBytes; ++k) src[k] = Pattern(salt + attempt, k);
      std::memset(dst, 0, kXferBytes);
      auto t = SubmitOne(*ini_, Req(op));
      if (!t.ok()) {
        absl::StrAppend(trace, " submit:", t.status().ToString());
        return false;
      }
      const TaskStatus st = WaitTerminal(*ini_, *t, kWaitNs);
      if (st == TaskStatus::kCompleted) {
        if (std::memcmp(src, dst, kXferBytes) == 0) return true;
        absl::StrAppend(trace, " COMPLETED with wrong bytes");
        return false;
      }
      absl::StrAppend(trace, " transfer ", Name(st), " (retry)");
    }
    return false;
  }

  // One case on the current endpoint (a transfer on it just completed).
  CaseResult RunCase(OpKind op, uint32_t n);

  std::vector<std::string> devs_;
  std::atomic<uint64_t> seq_{0};
  std::unique_ptr<Side> tgt_, ini_;
  SegmentHandle seg_;
};

std::string StateName(std::optional<hal::QpState> s) {
  return s ? std::string(hal::QpStateName(*s)) : "destroyed";
}

CaseResult BufferSafetyProbe::RunCase(OpKind op, uint32_t n) {
  CaseResult r;
  const std::optional<QpRecord> iq = ini_->verbs->NewestLiveRts();
  // The target moves its QP to RTS when the RTU arrives, which may be after
  // the first transfer completed: wait for it (bounded).
  std::optional<QpRecord> tq;
  for (int i = 0; iq && i < 1000; ++i) {
    tq = tgt_->verbs->PairedWith(iq->qp_num);
    if (tq && tq->rts_mask != 0) break;
    SleepNs(2'000'000);
  }
  if (!iq || !tq) {
    absl::StrAppend(&r.trace, " cannot find the endpoint's QPs");
    return r;
  }
  if (absl::Status s = tgt_->verbs->HoldInInit(tq->qp_num); !s.ok()) {
    absl::StrAppend(&r.trace, " hold: ", s.ToString());
    return r;
  }
  // Fresh contents: the source a pattern, the destination zero.
  uint8_t* src = op == OpKind::kWrite ? ini_->at(0) : tgt_->at(0);
  uint8_t* dst = op == OpKind::kWrite ? tgt_->at(0) : ini_->at(0);
  for (uint64_t k = 0; k < kXferBytes; ++k) src[k] = Pattern(n * 2 + 100, k);
  std::memset(dst, 0, kXferBytes);
  ini_->verbs->ArmErrPause();
  const uint64_t t0 = NowNs();
  auto task = SubmitOne(*ini_, Req(op));
  if (!task.ok()) {
    ini_->verbs->ReleasePause();
    absl::StrAppend(&r.trace, " submit: ", task.status().ToString());
    return r;
  }
  auto ms = [t0] { return (NowNs() - t0) / 1'000'000; };
  // 4. The owner reaches its move to ERR (the deadline latched).
  const bool paused = ini_->verbs->WaitPaused(kWaitNs);
  TaskStatus st = *ini_->engine->GetTaskStatus(*task);
  std::optional<hal::QpState> qs = ini_->verbs->QueryState(iq->qp_num);
  absl::StrAppend(&r.trace, paused ? " paused@" : " NOT paused@", ms(), "ms status=", Name(st),
                  " qp=", StateName(qs));
  if (paused && st == TaskStatus::kPending) {
    // Hold a little: the status must not move while the QP is RTS.
    for (int i = 0; i < 20 && st == TaskStatus::kPending; ++i) {
      SleepNs(5'000'000);
      st = *ini_->engine->GetTaskStatus(*task);
    }
    absl::StrAppend(&r.trace, " +100ms status=", Name(st));
    ini_->verbs->ReleasePause();
    st = WaitTerminal(*ini_, *task, kWaitNs);
    qs = ini_->verbs->QueryState(iq->qp_num);
  }
  const uint64_t timeout_seq = ini_->verbs->Tick();
  absl::StrAppend(&r.trace, " ", Name(st), "@", ms(), "ms qp=", StateName(qs));
  r.timeout_while_rts = st == TaskStatus::kTimeout && qs == hal::QpState::kRts;
  if (st != TaskStatus::kTimeout) {
    ini_->verbs->ReleasePause();
    (void)tgt_->verbs->ReleaseToRts(tq->qp_num);
    absl::StrAppend(&r.trace, " (want TIMEOUT)");
    return r;
  }
  // 5. The consumer reuses the buffer, then the remote side wakes up late.
  const uint8_t reuse = static_cast<uint8_t>(0xA0 + n);
  std::memset(ini_->at(0), reuse, kXferBytes);
  if (absl::Status s = tgt_->verbs->ReleaseToRts(tq->qp_num); !s.ok())
    absl::StrAppend(&r.trace, " release: ", s.ToString());
  // 6. Watch the reused memory (READ) or the peer (WRITE) for the old WR.
  const uint8_t* watch = op == OpKind::kRead ? ini_->at(0) : tgt_->at(0);
  const uint64_t end = NowNs() + kWatchNs;
  while (!r.reused_touched && NowNs() < end) {
    for (uint64_t k = 0; k < kXferBytes && !r.reused_touched; ++k)
      r.reused_touched = op == OpKind::kRead ? watch[k] != reuse : watch[k] == reuse;
    SleepNs(2'000'000);
  }
  absl::StrAppend(&r.trace, r.reused_touched ? " REUSED MEMORY TOUCHED@" : " untouched until ",
                  ms(), "ms");
  ini_->verbs->ReleasePause();
  const std::optional<QpRecord> after = ini_->verbs->RecordOf(iq->qp.id);
  r.flush_before_timeout = after && after->flush_seq != 0 && after->flush_seq < timeout_seq;
  absl::StrAppend(&r.trace, r.flush_before_timeout ? " flush<TIMEOUT" : " no flush before TIMEOUT");
  return r;
}

TEST_F(BufferSafetyProbe, TwentyCasesAReusedBufferIsNeverTouched) {
  std::vector<CaseResult> results;
  const OpKind ops[2] = {OpKind::kRead, OpKind::kWrite};
  std::string warm;
  ASSERT_TRUE(Transfer(OpKind::kWrite, 1000, &warm)) << "the first transfer failed:" << warm;
  for (int n = 0; n < 2 * kCasesPerOp; ++n) {
    results.push_back(RunCase(ops[n % 2], static_cast<uint32_t>(n)));
    // The next transfer runs on a fresh endpoint (the probe's retired); it
    // also carries the next case.
    std::string t;
    const std::optional<QpRecord> old = ini_->verbs->NewestLiveRts();
    results.back().next_ok = Transfer(ops[n % 2], static_cast<uint32_t>(n) * 2 + 1, &t);
    const std::optional<QpRecord> fresh = ini_->verbs->NewestLiveRts();
    if (results.back().next_ok && old && fresh && old->qp.id == fresh->qp.id)
      results.back().next_ok = false, t += " (not a fresh endpoint)";
    results.back().trace += " next:" + std::string(results.back().next_ok ? "ok" : "FAILED") + t;
    std::printf("case %2d %-5s%s\n", n, std::string(OpKindName(ops[n % 2])).c_str(),
                results.back().trace.c_str());
  }
  int rows[4][2] = {};
  for (size_t n = 0; n < results.size(); ++n) {
    const CaseResult& r = results[n];
    const int c = static_cast<int>(n % 2);
    rows[0][c] += r.timeout_while_rts;
    rows[1][c] += r.reused_touched;
    rows[2][c] += r.flush_before_timeout;
    rows[3][c] += r.next_ok;
  }
  const char* names[4] = {"TIMEOUT seen while the QP was still RTS", "reused memory overwritten",
                          "flush handled before TIMEOUT", "next transfer succeeded"};
  std::printf("probe table (%s -> %s, QP timeout 18, retry_cnt 7, slice_timeout 200 ms)\n",
              devs_[1].c_str(), devs_[0].c_str());
  std::printf("%-42s %5s %6s %6s\n", "row", "READ", "WRITE", "total");
  for (int i = 0; i < 4; ++i)
    std::printf("%-42s %5d %6d %6d\n", names[i], rows[i][0], rows[i][1], rows[i][0] + rows[i][1]);
  const int cases = 2 * kCasesPerOp;
  const int total[4] = {rows[0][0] + rows[0][1], rows[1][0] + rows[1][1], rows[2][0] + rows[2][1],
                        rows[3][0] + rows[3][1]};
  EXPECT_EQ(total[0], 0) << "C1 broken on real verbs: " << total[0] << " of " << cases
                         << " cases saw TIMEOUT while the QP was still RTS";
  EXPECT_EQ(total[1], 0) << "C1 broken on real verbs: the RNIC touched reused memory after "
                            "TIMEOUT in "
                         << total[1] << " of " << cases << " cases";
  EXPECT_EQ(total[2], cases) << "TIMEOUT without the flush first in " << cases - total[2] << " of "
                             << cases << " cases";
  EXPECT_EQ(total[3], cases) << "the next transfer failed in " << cases - total[3] << " of "
                             << cases << " cases";
}

}  // namespace
}  // namespace ferry::probe
