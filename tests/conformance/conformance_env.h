// tests/conformance/conformance_env.h: the one verbs conformance set,
// written once against hal::Verbs, and the small environment interface each
// backend implements (sim_env.cc: the simulated RNIC, both profiles;
// ibverbs_env.cc: real devices through libibverbs, e.g. rxe0/rxe1).
//
// Thread safety: none (tests are single-threaded).
// What must stay true: a case uses only hal::Verbs calls plus this
// interface, so the same assertions run on both backends; where real
// hardware differs by design (profile behaviour), the case reads Traits,
// never the backend's name.
#ifndef FERRY_TESTS_CONFORMANCE_CONFORMANCE_ENV_H_
#define FERRY_TESTS_CONFORMANCE_CONFORMANCE_ENV_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hal/types.h"
#include "hal/verbs.h"

namespace ferry::conformance {

struct Traits {
  bool sim = false;
  bool scrubs_on_destroy = false;  // mlx5: yes; rxe: leftover CQEs
  // rxe: error CQEs carry raw opcode 0 (IBV_WC_SEND, which the HAL reports
  // as Opcode::kSend) and vendor_err 0.
  bool error_opcode_zero = false;
  // rxe: retry_cnt 7 means retry forever (rxe_comp.c never decrements 7);
  // elsewhere it is 7 retries like any other count.
  bool retry_cnt7_infinite = false;
  bool qpn_reuse_prompt = false;  // sim: freed QPN reused by the next create
  bool can_lose_acks = false;     // env can drop side A's link (sim only)
  // A request through a memory window's rkey is checked against the
  // window's bound range (IBA); rxe checks only the range of the window's
  // MR (rxe_resp.c check_rkey; measured, docs/hal.md).
  bool mw_checks_range = true;
  // A SEND longer than its receive WR: rxe completes the receive
  // LOC_QP_OP_ERR and the SEND REM_OP_ERR (rxe_resp.c check_length); IBA and
  // mlx5: LOC_LEN_ERR and REM_INV_REQ_ERR.
  bool send_too_long_qp_op_err = false;
  // A receive WR posted while the QP is in ERR completes WR_FLUSH_ERR at
  // once (mlx5); rxe's user-space post only writes the ring, and the WR
  // waits for the next modify to ERR.
  bool recv_posted_in_err_flushes = true;
  // rxe's receive ring holds 2^k - 1 WRs (rdma-core rxe_queue), which
  // ibv_query_qp reports; mlx5 rounds to 2^k.
  bool recv_ring_2k_minus_1 = false;
  // The least wait after an RNR NAK: rxe waits whole jiffies, at least
  // one (4 ms at HZ=250); elsewhere the responder's timer (code 1: 10 us).
  uint64_t rnr_wait_floor_ns = 10'000;
  uint64_t poll_step_ns = 100'000;  // how much time one idle poll lets pass
  uint64_t timing_slack_ns = 0;     // extra allowed on timing assertions
};

class Env {
 public:
  virtual ~Env() = default;
  // side 0 = A (requester), side 1 = B (responder). May be one Verbs.
  virtual hal::Verbs& verbs(int side) = 0;
  virtual std::string device(int side) = 0;
  virtual int gid_index(int side) = 0;
  virtual const Traits& traits() const = 0;
  // Lets `ns` of time pass (sim: virtual time; real: sleeps).
  virtual void Wait(uint64_t ns) = 0;
  virtual uint64_t NowNs() = 0;
  // Sim only: take side's link down/up (returns false when unsupported).
  virtual bool SetLinkUp(int side, bool up) = 0;
  // Sim only: the names of the ground-truth violations recorded so far,
  // which are then cleared (a case that builds a misuse on purpose checks
  // that the sim saw it). Real devices have no ground truth: empty.
  virtual std::vector<std::string> TakeViolations() { return {}; }
};

struct EnvParam {
  std::string name;
  // Returns nullptr (with a reason in *skip) when the backend has no devices.
  std::function<std::unique_ptr<Env>(std::string* skip)> make;
};

class Conformance : public ::testing::TestWithParam<EnvParam> {
 protected:
  void SetUp() override {
    std::string skip;
    env_ = GetParam().make(&skip);
    if (env_ == nullptr) GTEST_SKIP() << skip;
  }
  void TearDown() override { env_.reset(); }
  Env& env() { return *env_; }

 private:
  std::unique_ptr<Env> env_;
};

inline std::string EnvParamName(const ::testing::TestParamInfo<EnvParam>& info) {
  return info.param.name;
}

}  // namespace ferry::conformance

#endif  // FERRY_TESTS_CONFORMANCE_CONFORMANCE_ENV_H_
