// tests/softroce/probe/window_probe.cc: revocable ranges (memory windows,
// docs/security.md section 6) through two engines on real verbs (issue 14
// item 4). A target on rxe0 registers its buffer revocable; initiators on
// rxe1 (the target's store holds one endpoint, so a second initiator evicts
// the first one's):
//   - the descriptor offers the range with rkey 0 and a window id, the
//     initiator's segment info says windows, and a verified WRITE/READ goes
//     through the window bound on the target's QP (one window per QP);
//   - the second initiator's transfer evicts the first one's endpoint at the
//     target: its window is deallocated (the ledger's mw count: created 2,
//     destroyed 1) and the target holds only the new one;
//   - the first initiator's next transfer fails on its old QP
//     (RETRY_EXC_ERR), reconnects, asks for fresh windows and verifies.
// Under FERRY_MUTATION=engine_mw_reuse_across_endpoints (real_probes_mut)
// the reconnected endpoint posts with the OLD window rkeys and rxe refuses
// them on the new QP: REM_ACCESS_ERR, the transfer FAILED (the guest script
// requires exactly that failure). Every test skips without two devices.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/property/prop_env.h"
#include "tests/softroce/probe/real_side.h"

namespace ferry::probe {
namespace {

constexpr uint64_t kBufBytes = 256 * 1024;
constexpr uint64_t kLen = 64 * 1024;
constexpr uint64_t kWaitNs = 20'000'000'000;

size_t WindowsOf(Side& s) {
  size_t n = 0;
  for (const auto& c : s.engine->contexts()) n += c->window_count();
  return n;
}

std::string Errors(Side& s) {
  std::string out;
  for (const auto& [name, n] : s.verbs->ErrorCounts()) absl::StrAppend(&out, name, "=", n, " ");
  return out.empty() ? "none" : out;
}

TEST(Windows, BoundUsedRevokedOnRetireAndFreshAfterTheReconnect) {
  if (RdmaDevices().size() < 2) GTEST_SKIP() << "needs two RDMA devices";
  const auto devs = RdmaDevices();
  std::atomic<uint64_t> seq{0};
  // FERRY_MUTATION (real_probes_mut only; an unknown name aborts).
  base::Mutations m;
  (void)property::ApplyEnvMutation(m);
  MemoryOptions revocable;
  revocable.revocable = true;
  auto t = StartSide(devs[0], OneEndpointConfig(), kBufBytes, &seq, m, 0, revocable);
  auto i1 = StartSide(devs[1], OneEndpointConfig(), kBufBytes, &seq, m);
  auto i2 = StartSide(devs[1], OneEndpointConfig(), kBufBytes, &seq, m);
  ASSERT_TRUE(t.ok() && i1.ok() && i2.ok());
  Side& T = **t;
  Side& I1 = **i1;
  Side& I2 = **i2;
  const SegmentDescriptor d = T.engine->LocalSegment();
  ASSERT_EQ(d.buffers.size(), 1u);
  const bool windows = d.buffers[0].window_devices == 1;
  std::printf("windows: device %s type 2 windows %s (max_mw %u); range rkey %u window id %llu\n",
              devs[0].c_str(), T.engine->contexts()[0]->device_attr().mw_type2 ? "yes" : "no",
              T.engine->contexts()[0]->device_attr().max_mw, d.buffers[0].rkeys.at(0),
              static_cast<unsigned long long>(d.buffers[0].window));
  ASSERT_TRUE(windows) << "the device offers no type 2 windows: the range fell back to its MR";
  EXPECT_EQ(d.buffers[0].rkeys.at(0), 0u) << "a windowed range must not offer its MR rkey";

  auto s1 = Open(I1, T.net->LocalAddress(), kWaitNs);
  auto s2 = Open(I2, T.net->LocalAddress(), kWaitNs);
  ASSERT_TRUE(s1.ok() && s2.ok());
  ASSERT_TRUE(I1.engine->GetSegmentInfo(*s1)->buffers.at(0).windows);
  ASSERT_EQ(WriteReadBack(I1, *s1, T.addr(0), kLen, 1, kWaitNs), "");
  EXPECT_EQ(WindowsOf(T), 1u) << "one window per QP of the endpoint";
  const auto q1 = I1.verbs->NewestLiveRts();
  ASSERT_TRUE(q1.has_value());
  const auto t1 = T.verbs->PairedWith(q1->qp_num);
  ASSERT_TRUE(t1.has_value());

  // I2 takes the target's only slot: I1's endpoint there retires, and its
  // window with it.
  ASSERT_EQ(WriteReadBack(I2, *s2, T.addr(kLen * 2), kLen, 2, kWaitNs), "");
  const uint64_t end = NowNs() + kWaitNs;
  while (T.engine->ledger().Get(engine::HandleKind::kMw).destroyed < 1 && NowNs() < end)
    SleepNs(1'000'000);
  const engine::HandleLedger::Counts mw = T.engine->ledger().Get(engine::HandleKind::kMw);
  EXPECT_EQ(mw.created, 2u);
  EXPECT_EQ(mw.destroyed, 1u) << "the evicted endpoint's window was not deallocated";
  EXPECT_EQ(WindowsOf(T), 1u);

  // I1's next transfer: the old QP is gone at the target (RETRY_EXC_ERR),
  // the slice goes on a fresh endpoint with fresh windows.
  const std::string third = WriteReadBack(I1, *s1, T.addr(0), kLen, 3, kWaitNs);
  std::printf(
      "windows: after the target retired I1's endpoint, I1's next transfer: %s; I1 errors: %s\n",
      third.empty() ? "verified" : third.c_str(), Errors(I1).c_str());
  EXPECT_EQ(third, "") << "the reconnected transfer failed; I1's CQE errors: " << Errors(I1);
  const engine::HandleLedger::Counts mw_end = T.engine->ledger().Get(engine::HandleKind::kMw);
  std::printf("windows: target windows created %llu, deallocated %llu, held %zu\n",
              static_cast<unsigned long long>(mw_end.created),
              static_cast<unsigned long long>(mw_end.destroyed), WindowsOf(T));
  for (Side* s : {&I1, &I2, &T}) EXPECT_EQ(Shutdown(*s, 10'000'000'000), "");
}

}  // namespace
}  // namespace ferry::probe
