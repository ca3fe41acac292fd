// tests/lib/real_env_test.cc: Engine::Create(config, RealEnvOptions), the
// production environment, as a user links it (the shared libferry, only
// <ferry/engine.h>). Each error names what it checked. Suite hal_real:
// on a machine without RDMA devices the device tests skip (the first one
// asserts the "no RDMA device" error instead); the softroce suite runs
// this binary in a VM with rxe0 and rxe1, where none may skip.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "ferry/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

bool HaveDevices() {
  std::error_code ec;
  return std::filesystem::exists("/sys/class/infiniband", ec) &&
         !std::filesystem::is_empty("/sys/class/infiniband", ec);
}

std::string FirstDevice() {
  for (const auto& d : std::filesystem::directory_iterator("/sys/class/infiniband"))
    return d.path().filename().string();
  return "";
}

std::string ReadLine(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

// Port state as sysfs prints it ("4: ACTIVE", "1: DOWN").
std::string PortState(const std::string& dev) {
  return ReadLine("/sys/class/infiniband/" + dev + "/ports/1/state");
}

bool WaitPortState(const std::string& dev, const std::string& want) {
  for (int i = 0; i < 200; ++i) {
    if (PortState(dev).find(want) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(RealEnv, AMissingDeviceIsNamed) {
  ferry::EngineConfig c;
  c.devices = {"nosuchdev9"};
  auto e = ferry::Engine::Create(c, ferry::RealEnvOptions{});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kNotFound);
  if (!HaveDevices()) {
    EXPECT_EQ(e.status().message(), "no RDMA device (the device list is empty)");
  } else {
    EXPECT_THAT(std::string(e.status().message()),
                StartsWith("device nosuchdev9 not found; devices: "));
    EXPECT_THAT(std::string(e.status().message()), HasSubstr(FirstDevice()));
  }
}

TEST(RealEnv, AListenAddressInUseIsNamed) {
  if (!HaveDevices()) GTEST_SKIP() << "no RDMA device";
  ferry::EngineConfig c;
  c.devices = {FirstDevice()};
  auto first = ferry::Engine::Create(c, ferry::RealEnvOptions{.listen = "127.0.0.1:0"});
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string addr = (*first)->ControlAddress();
  ASSERT_THAT(addr, StartsWith("127.0.0.1:"));
  ASSERT_NE(addr, "127.0.0.1:0");
  auto second = ferry::Engine::Create(c, ferry::RealEnvOptions{.listen = addr});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), StartsWith("listen " + addr + ": "));
  auto bad = ferry::Engine::Create(c, ferry::RealEnvOptions{.listen = "no-port-here"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), StartsWith("listen no-port-here: "));
}

// The netdev under an RDMA device's port 1 (Soft-RoCE: its veth).
std::string NetdevOf(const std::string& dev) {
  return ReadLine("/sys/class/infiniband/" + dev + "/ports/1/gid_attrs/ndevs/0");
}

TEST(RealEnv, APortThatIsDownIsNamed) {
  if (!HaveDevices()) GTEST_SKIP() << "no RDMA device";
  const std::string dev = FirstDevice(), netdev = NetdevOf(dev);
  if (geteuid() != 0 || netdev.empty()) GTEST_SKIP() << "needs root and the device's netdev";
  ASSERT_EQ(std::system(("ip link set dev " + netdev + " down").c_str()), 0);
  ASSERT_TRUE(WaitPortState(dev, "DOWN")) << PortState(dev);
  ferry::EngineConfig c;
  c.devices = {dev};
  auto e = ferry::Engine::Create(c, ferry::RealEnvOptions{.listen = "127.0.0.1:0"});
  ASSERT_EQ(std::system(("ip link set dev " + netdev + " up").c_str()), 0);
  ASSERT_TRUE(WaitPortState(dev, "ACTIVE")) << PortState(dev);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(e.status().message(), "port 1 of " + dev + " is DOWN (not ACTIVE)");
}

}  // namespace
