// examples/sim_fault_test.cc: testing your own code against the simulated
// RNIC's faults with <ferry/testing.h> (libferry-testing), no RDMA hardware.
//
// CopyToPeer is "the user's code": it WRITEs a buffer to a peer and says
// whether it landed. The test runs it twice on a two-host SimCluster: with
// no fault (it must succeed and the bytes must be at the peer), and with
// the peer's link down (the WRITE cannot land: CopyToPeer must say so).
// Built with -DEXAMPLE_IGNORES_FAILED, CopyToPeer ignores the task status
// (a common bug: it treats FAILED or TIMEOUT as done): the faulted run then reports success for
// bytes that never landed, and the test fails. Exit 0 = pass, 1 = fail.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ferry/engine.h"
#include "ferry/testing.h"

namespace {

constexpr uint64_t kBytes = 64 * 1024;

// ---- the code under test
absl::Status CopyToPeer(ferry::Engine& e, ferry::SegmentHandle seg, const uint8_t* src,
                        uint64_t remote_addr) {
  absl::StatusOr<ferry::BatchId> batch = e.AllocateBatch(1);
  if (!batch.ok()) return batch.status();
  ferry::Request r;
  r.opcode = ferry::OpKind::kWrite;
  r.local_addr = reinterpret_cast<uint64_t>(src);
  r.length_bytes = kBytes;
  r.segment = seg;
  r.remote_addr = remote_addr;
  ferry::SubmitResult sr = e.Submit(*batch, {r});
  if (!sr.status.ok()) return sr.status;
  absl::StatusOr<ferry::BatchStatus> bs = e.WaitBatch(*batch, 30'000'000'000);
  if (!bs.ok()) return bs.status();
  (void)e.FreeBatch(*batch);
#ifndef EXAMPLE_IGNORES_FAILED
  if (bs->overall != ferry::TaskStatus::kCompleted)
    return absl::UnavailableError(std::string("WRITE ended ") +
                                  std::string(ferry::TaskStatusName(bs->overall)));
#endif
  return absl::OkStatus();
}

// ---- the test
// Runs CopyToPeer from h0 to h1 on a fresh cluster; "" when its answer is
// right (OK only if the bytes landed), else what is wrong.
std::string Case(const std::string& fault_script, bool expect_landed) {
  ferry::testing::SimClusterOptions o;
  o.seed = 7;
  o.fault_script = fault_script;
  o.engine_config.qp_timeout_exp = 8;              // ~1 ms ACK timeout: a lost link fails fast
  o.engine_config.slice_timeout_ns = 200'000'000;  // and a stuck WRITE times out in 0.2 s
  absl::StatusOr<std::unique_ptr<ferry::testing::SimCluster>> c =
      ferry::testing::SimCluster::Create(o);
  if (!c.ok()) return "cluster: " + c.status().ToString();
  std::vector<uint8_t> src(kBytes), dst(kBytes, 0);
  for (uint64_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i * 13 + 1);
  if (!(*c)->engine(0).RegisterMemory(src.data(), kBytes).ok() ||
      !(*c)->engine(1).RegisterMemory(dst.data(), kBytes).ok())
    return "register";
  absl::StatusOr<ferry::SegmentHandle> seg =
      (*c)->engine(0).OpenSegment((*c)->address(1), 10'000'000'000);
  if (!seg.ok()) return "open: " + seg.status().ToString();
  absl::Status st =
      CopyToPeer((*c)->engine(0), *seg, src.data(), reinterpret_cast<uint64_t>(dst.data()));
  const bool landed = std::memcmp(src.data(), dst.data(), kBytes) == 0;
  std::string verdict = (*c)->Finish(1'000'000'000);
  if (!verdict.empty()) return "simulated RNIC: " + verdict;
  if (st.ok() && !landed) return "CopyToPeer reported success, but the bytes did not land";
  if (expect_landed && !st.ok()) return "CopyToPeer failed with no fault: " + st.ToString();
  if (!expect_landed && st.ok()) return "CopyToPeer succeeded although the link was down";
  std::printf("  CopyToPeer: %s, bytes %s\n", st.ok() ? "OK" : st.ToString().c_str(),
              landed ? "landed" : "not landed");
  return "";
}

}  // namespace

int main() {
  int failed = 0;
  for (const auto& [name, script, landed] :
       {std::tuple<const char*, const char*, bool>{"no fault", "", true},
        {"peer link down", "at 0 link_down dev:h1/sim0", false}}) {
    std::printf("case %s (faults: \"%s\")\n", name, script);
    const std::string r = Case(script, landed);
    std::printf("%s %s%s%s\n", r.empty() ? "PASS" : "FAIL", name, r.empty() ? "" : ": ", r.c_str());
    failed += !r.empty();
  }
  return failed == 0 ? 0 : 1;
}
