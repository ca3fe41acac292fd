// tests/conformance/sim_env.cc: the conformance environment over the
// simulated RNIC (two hosts, "sim0" on each), instantiated for both
// profiles, mlx5 and rxe. Suite 'unit'.
#include <memory>

#include "sim/prng.h"
#include "sim/rnic/fabric.h"
#include "sim/virtual_clock.h"
#include "tests/conformance/conformance_env.h"
#include "tests/sim/rnic/rnic_world.h"

namespace ferry::conformance {
namespace {

class SimEnv final : public Env {
 public:
  explicit SimEnv(sim::RnicProfile profile) {
    sim::FabricConfig cfg;
    cfg.profile = profile;
    sim::testing::ApplyEnvMutation(cfg.mutations);  // FERRY_MUTATION, test builds only
    fabric_ = std::make_unique<sim::Fabric>(cfg, sim::Prng(17), &clock_);
    v_[0] = fabric_->NewVerbs(0);
    v_[1] = fabric_->NewVerbs(1);
    traits_.sim = true;
    traits_.scrubs_on_destroy = profile == sim::RnicProfile::kMlx5;
    traits_.error_opcode_zero = profile == sim::RnicProfile::kRxe;
    traits_.retry_cnt7_infinite = profile == sim::RnicProfile::kRxe;
    traits_.mw_checks_range = profile == sim::RnicProfile::kMlx5;  // rxe: the MR's range only
    traits_.send_too_long_qp_op_err = profile == sim::RnicProfile::kRxe;
    traits_.recv_posted_in_err_flushes = profile == sim::RnicProfile::kMlx5;
    traits_.recv_ring_2k_minus_1 = profile == sim::RnicProfile::kRxe;
    traits_.rnr_wait_floor_ns = profile == sim::RnicProfile::kRxe ? 4'000'000 : 10'000;
    traits_.qpn_reuse_prompt = true;
    traits_.can_lose_acks = true;
    traits_.poll_step_ns = 2'000;
    traits_.timing_slack_ns = 0;
  }
  ~SimEnv() override {
    // Objects the test did not free are reported, not leaked silently.
    EXPECT_TRUE(fabric_->violations().empty()) << fabric_->violations().front().message;
  }

  hal::Verbs& verbs(int side) override { return *v_[side]; }
  std::string device(int) override { return "sim0"; }
  int gid_index(int) override { return 0; }
  const Traits& traits() const override { return traits_; }
  void Wait(uint64_t ns) override { fabric_->RunFor(ns); }
  uint64_t NowNs() override { return clock_.NowNs(); }
  bool SetLinkUp(int side, bool up) override {
    return fabric_->SetLinkUp(static_cast<uint32_t>(side), "sim0", up).ok();
  }
  std::vector<std::string> TakeViolations() override {
    std::vector<std::string> out;
    for (const sim::Violation& v : fabric_->violations())
      out.emplace_back(sim::ViolationKindName(v.kind));
    fabric_->ClearViolations();
    return out;
  }

 private:
  sim::VirtualClock clock_;
  std::unique_ptr<sim::Fabric> fabric_;
  std::unique_ptr<hal::Verbs> v_[2];
  Traits traits_;
};

INSTANTIATE_TEST_SUITE_P(Sim, Conformance,
                         ::testing::Values(EnvParam{"mlx5",
                                                    [](std::string*) -> std::unique_ptr<Env> {
                                                      return std::make_unique<SimEnv>(
                                                          sim::RnicProfile::kMlx5);
                                                    }},
                                           EnvParam{"rxe",
                                                    [](std::string*) -> std::unique_ptr<Env> {
                                                      return std::make_unique<SimEnv>(
                                                          sim::RnicProfile::kRxe);
                                                    }}),
                         EnvParamName);

}  // namespace
}  // namespace ferry::conformance
