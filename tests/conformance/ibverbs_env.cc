// tests/conformance/ibverbs_env.cc: the conformance environment over real
// devices through libibverbs (suite 'hal_real'). Uses the first two devices
// (e.g. rxe0, rxe1) and, on each, the RoCEv2 GID found among the first 16
// entries (the rxe table has 1024; scanning it all is slow under TCG).
// Skips cleanly (GTEST_SKIP) when fewer than two devices exist.
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "hal/ibverbs/ibverbs.h"
#include "tests/conformance/conformance_env.h"

namespace ferry::conformance {
namespace {

bool Ipv4Mapped(const hal::Gid& g) {
  for (int i = 0; i < 10; ++i) {
    if (g.raw[i] != 0) return false;
  }
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

// The RoCEv2 IPv4-mapped GID index among the first 16 entries: sysfs says
// which entries are "RoCE v2"; without sysfs, the last IPv4-mapped entry
// (rxe lists v1 then v2 per address).
int FindGidIndex(hal::Verbs& v, hal::ContextHandle ctx, const std::string& dev) {
  int fallback = -1;
  for (int i = 0; i < 16; ++i) {
    auto g = v.QueryGid(ctx, 1, i);
    if (!g.ok() || !Ipv4Mapped(*g)) continue;
    std::ifstream type("/sys/class/infiniband/" + dev + "/ports/1/gid_attrs/types/" +
                       std::to_string(i));
    std::string text;
    if (type && std::getline(type, text)) {
      if (text.find("v2") != std::string::npos) return i;
      continue;
    }
    fallback = i;
  }
  return fallback;
}

class IbverbsEnv final : public Env {
 public:
  static std::unique_ptr<Env> Make(std::string* skip) {
    auto env = std::unique_ptr<IbverbsEnv>(new IbverbsEnv());
    env->v_ = hal::NewIbverbsVerbs();
    auto devs = env->v_->ListDevices();
    if (!devs.ok() || devs->size() < 2) {
      *skip = "hal_real: needs two RDMA devices (e.g. rxe0, rxe1)";
      return nullptr;
    }
    for (int s = 0; s < 2; ++s) {
      env->dev_[s] = (*devs)[s].name;
      auto ctx = env->v_->OpenDevice(env->dev_[s]);
      if (!ctx.ok()) {
        *skip = "cannot open " + env->dev_[s];
        return nullptr;
      }
      env->gid_[s] = FindGidIndex(*env->v_, *ctx, env->dev_[s]);
      (void)env->v_->CloseDevice(*ctx);
      if (env->gid_[s] < 0) {
        *skip = "no RoCEv2 IPv4 GID in the first 16 entries of " + env->dev_[s];
        return nullptr;
      }
    }
    const bool rxe = env->dev_[0].rfind("rxe", 0) == 0;
    env->traits_.scrubs_on_destroy = !rxe;
    env->traits_.error_opcode_zero = rxe;
    env->traits_.retry_cnt7_infinite = rxe;
    env->traits_.mw_checks_range = !rxe;             // measured on rxe, kernel 6.1 (docs/hal.md)
    env->traits_.send_too_long_qp_op_err = rxe;      // rxe_resp.c check_length (docs/hal.md)
    env->traits_.recv_posted_in_err_flushes = !rxe;  // rxe: user-space post, no flush
    env->traits_.recv_ring_2k_minus_1 = rxe;
    env->traits_.rnr_wait_floor_ns = rxe ? 4'000'000 : 10'000;  // rxe: jiffies (HZ=250)
    env->traits_.poll_step_ns = 1'000'000;
    env->traits_.timing_slack_ns = 5'000'000'000;  // TCG VMs are slow
    return env;
  }

  hal::Verbs& verbs(int) override { return *v_; }
  std::string device(int side) override { return dev_[side]; }
  int gid_index(int side) override { return gid_[side]; }
  const Traits& traits() const override { return traits_; }
  void Wait(uint64_t ns) override { std::this_thread::sleep_for(std::chrono::nanoseconds(ns)); }
  uint64_t NowNs() override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }
  bool SetLinkUp(int, bool) override { return false; }

 private:
  IbverbsEnv() = default;
  std::unique_ptr<hal::Verbs> v_;
  std::string dev_[2];
  int gid_[2] = {-1, -1};
  Traits traits_;
};

INSTANTIATE_TEST_SUITE_P(Ibverbs, Conformance,
                         ::testing::Values(EnvParam{"ibverbs", &IbverbsEnv::Make}), EnvParamName);

}  // namespace
}  // namespace ferry::conformance
