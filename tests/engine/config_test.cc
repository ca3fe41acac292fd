// Tests of EngineConfig::Validate and Engine::Create's construction checks
// (C8: a config that breaks an invariant is rejected, naming the knob).
#include "ferry/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "ferry/engine.h"
#include "ferry/types.h"

namespace ferry {
namespace {

using ::testing::HasSubstr;

TEST(EngineConfig, DefaultsAreValid) { EXPECT_TRUE(EngineConfig{}.Validate().ok()); }

TEST(EngineConfig, DefaultsFillOneCqExactly) {
  const EngineConfig c;
  EXPECT_EQ(c.EndpointsPerCq(), 32u);
  EXPECT_LE(uint64_t{c.wr_depth} * c.qps_per_endpoint * c.EndpointsPerCq(), c.cqe_limit);
}

struct BadCase {
  std::string name;
  std::function<void(EngineConfig&)> mutate;
  std::string knob;  // must appear in the message
};

TEST(EngineConfig, RejectsEveryBrokenInvariant) {
  const std::vector<BadCase> cases = {
      {"qp timeout 0", [](EngineConfig& c) { c.qp_timeout_exp = 0; }, "qp_timeout_exp"},
      {"qp timeout 32", [](EngineConfig& c) { c.qp_timeout_exp = 32; }, "qp_timeout_exp"},
      {"zero workers", [](EngineConfig& c) { c.workers = 0; }, "workers"},
      {"too many workers", [](EngineConfig& c) { c.workers = kWorkersMax + 1; }, "workers"},
      {"zero cqs per worker", [](EngineConfig& c) { c.cqs_per_worker = 0; }, "cqs_per_worker"},
      {"zero qps", [](EngineConfig& c) { c.qps_per_endpoint = 0; }, "qps_per_endpoint"},
      {"too many qps", [](EngineConfig& c) { c.qps_per_endpoint = 65; }, "qps_per_endpoint"},
      {"zero depth", [](EngineConfig& c) { c.wr_depth = 0; }, "wr_depth"},
      {"zero cqe", [](EngineConfig& c) { c.cqe_limit = 0; }, "cqe_limit"},
      {"depth x qps x endpoints > cqe",
       [](EngineConfig& c) {
         c.wr_depth = 64;
         c.qps_per_endpoint = 2;
         c.endpoint_store_capacity = 33;  // 64 * 2 * 33 > 4096
       },
       "exceeds cqe_limit"},
      {"zero capacity", [](EngineConfig& c) { c.endpoint_store_capacity = 0; },
       "endpoint_store_capacity"},
      {"zombie > cqe", [](EngineConfig& c) { c.zombie_quota_max = c.cqe_limit + 1; },
       "zombie_quota_max"},
      {"zero slice", [](EngineConfig& c) { c.slice_size_bytes = 0; }, "slice_size_bytes"},
      {"slice > 4 GiB", [](EngineConfig& c) { c.slice_size_bytes = 1ull << 32; },
       "slice_size_bytes"},
      {"slice > request max",
       [](EngineConfig& c) {
         c.request_bytes_max = 1024;
         c.slice_size_bytes = 2048;
       },
       "request_bytes_max"},
      {"too many slices per task",
       [](EngineConfig& c) {
         c.slice_size_bytes = 1;
         c.request_bytes_max = uint64_t{kSlicesPerTaskMax} + 1;
       },
       "slices per task"},
      {"zero batch", [](EngineConfig& c) { c.batch_capacity_max = 0; }, "batch_capacity_max"},
      {"zero repost", [](EngineConfig& c) { c.slice_attempts_max = 0; }, "slice_attempts_max"},
      {"retry > repost",
       [](EngineConfig& c) {
         c.slice_retries = 16;
         c.slice_attempts_max = 16;
       },
       "slice_retries"},
      {"zero slice timeout", [](EngineConfig& c) { c.slice_timeout_ns = 0; }, "slice_timeout_ns"},
      {"zero handshake timeout", [](EngineConfig& c) { c.handshake_timeout_ns = 0; },
       "handshake_timeout_ns"},
      {"zero handshake retries", [](EngineConfig& c) { c.handshake_retries = 0; },
       "handshake_retries"},
      {"zero drain", [](EngineConfig& c) { c.drain_timeout_ns = 0; }, "drain_timeout_ns"},
      {"backoff min > max",
       [](EngineConfig& c) { c.destroy_backoff_ns_min = c.destroy_backoff_ns_max + 1; },
       "destroy_backoff_ns_min"},
      {"retry_cnt 8", [](EngineConfig& c) { c.qp_retries = 8; }, "qp_retries"},
      {"rnr_retry 8", [](EngineConfig& c) { c.qp_rnr_retries = 8; }, "qp_rnr_retries"},
      {"rd_atomic 0", [](EngineConfig& c) { c.qp_rd_atomic_max = 0; }, "qp_rd_atomic_max"},
      {"port 0", [](EngineConfig& c) { c.port_num = 0; }, "port_num"},
      {"gid index -2", [](EngineConfig& c) { c.gid_index = -2; }, "gid_index"},
      {"empty device name",
       [](EngineConfig& c) {
         c.devices = {"mlx5_0", ""};
       },
       "devices"},
      {"rail threshold 0", [](EngineConfig& c) { c.rail_error_threshold = 0; },
       "rail_error_threshold"},
      {"poll mode out of range",
       [](EngineConfig& c) { c.owner_poll_mode = static_cast<OwnerPollMode>(3); },
       "owner_poll_mode"},
      {"adaptive without a spin", [](EngineConfig& c) { c.owner_spin_ns_max = 0; },
       "owner_spin_ns_max"},
      {"owner spin > 1 s", [](EngineConfig& c) { c.owner_spin_ns_max = 1'000'000'001; },
       "owner_spin_ns_max"},
      {"user spin > 1 s", [](EngineConfig& c) { c.user_spin_ns = 1'000'000'001; }, "user_spin_ns"},
      {"secret with auth off", [](EngineConfig& c) { c.auth.secret = std::string(32, 's'); },
       "auth.secret"},
      {"auth on without a key",
       [](EngineConfig& c) { c.auth.mode = AuthConfig::Mode::kSharedSecret; }, "auth.mode"},
      {"short secret",
       [](EngineConfig& c) {
         c.auth.mode = AuthConfig::Mode::kSharedSecret;
         c.auth.secret = std::string(31, 's');
       },
       "auth.secret has 31 bytes"},
      {"short peer secret",
       [](EngineConfig& c) {
         c.auth.mode = AuthConfig::Mode::kSharedSecret;
         c.auth.peer_secrets = {{"node-a", "short"}};
       },
       "auth.peer_secrets[node-a]"},
      {"identity with a space", [](EngineConfig& c) { c.auth.identity = "a b"; }, "auth.identity"},
      {"empty allowlist host", [](EngineConfig& c) { c.auth.allowlist = {""}; }, "auth.allowlist"},
      {"zero sessions", [](EngineConfig& c) { c.auth.sessions_max = 0; }, "auth.sessions_max"},
  };
  for (const BadCase& bc : cases) {
    EngineConfig c;
    bc.mutate(c);
    const absl::Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bc.name;
    EXPECT_THAT(std::string(s.message()), HasSubstr(bc.knob)) << bc.name;
  }
}

TEST(EngineConfig, BoundaryValuesAreAccepted) {
  EngineConfig c;
  c.qp_timeout_exp = 31;
  c.qp_retries = 0;
  c.workers = kWorkersMax;
  c.slice_retries = c.slice_attempts_max - 1;
  c.endpoint_store_capacity = 64;
  c.cqs_per_worker = 2;  // 64 * 2 * 32 == 4096
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  // Blocking needs no spin bound; busy polling ignores it; 1 s is allowed.
  c.owner_poll_mode = OwnerPollMode::kBlocking;
  c.owner_spin_ns_max = 0;
  c.user_spin_ns = 0;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.owner_poll_mode = OwnerPollMode::kBusyPoll;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.owner_poll_mode = OwnerPollMode::kAdaptive;
  c.owner_spin_ns_max = 1'000'000'000;
  c.user_spin_ns = 1'000'000'000;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

TEST(EngineCreate, RejectsBadConfigBeforeTouchingAnyPort) {
  EngineConfig c;
  c.qp_timeout_exp = 0;
  // Null ports: a config error must be reported first, without using them.
  auto engine = Engine::Create(c, EngineEnv{});
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(engine.status().message()), HasSubstr("qp_timeout_exp"));
}

TEST(EngineCreate, RejectsMissingPorts) {
  auto engine = Engine::Create(EngineConfig{}, EngineEnv{});
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(engine.status().message()), HasSubstr("verbs"));
}

TEST(PublicTypes, NamesAndTerminality) {
  EXPECT_EQ(TaskStatusName(TaskStatus::kTimeout), "TIMEOUT");
  EXPECT_EQ(OpKindName(OpKind::kWrite), "WRITE");
  EXPECT_FALSE(IsTerminal(TaskStatus::kPending));
  EXPECT_TRUE(IsTerminal(TaskStatus::kInvalid));
  EXPECT_FALSE(SegmentHandle{}.valid());
  EXPECT_FALSE(BatchId{}.valid());
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {
TEST(EngineConfig, AuthBoundariesAreAccepted) {
  EngineConfig c;
  c.auth.mode = AuthConfig::Mode::kSharedSecret;
  c.auth.secret = std::string(kAuthSecretBytesMin, 's');
  EXPECT_TRUE(c.Validate().ok());
  c.auth.secret.clear();
  c.auth.peer_secrets = {{"node-a", std::string(kAuthSecretBytesMin, 'a')}};
  c.auth.identity = std::string(128, 'n');
  c.auth.allowlist = {"10.0.0.1"};
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}
}  // namespace
}  // namespace ferry
