// tests/engine/descriptor_wire_test.cc: the segment-descriptor codec
// (engine/descriptor_wire.h), version 3: the window fields of a revocable
// range round-trip, and each of their rules is enforced on decode; older
// versions are refused.
#include "engine/descriptor_wire.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::engine {
namespace {

using ::testing::HasSubstr;

DescMessage Rep() {
  DescMessage m;
  m.type = DescType::kRep;
  m.token = 7;
  m.descriptor.address = "10.0.0.2:7000";
  m.descriptor.incarnation = 0x1234;
  m.descriptor.version = 3;
  m.descriptor.devices = {DeviceDescriptor{"mlx5_0", {}, 1}, DeviceDescriptor{"mlx5_1", {}, 2}};
  BufferDescriptor plain{0x1000, 4096, {0x11, 0x22}, RemoteAccess::kRead, 0, 0};
  BufferDescriptor windowed{0x10000, 65536, {0, 0x33}, RemoteAccess::kReadWrite, 9, 0b01};
  m.descriptor.buffers = {plain, windowed};
  return m;
}

// The byte offset of the second buffer's window field.
size_t WindowOffset(const std::vector<uint8_t>& bytes) { return bytes.size() - 16; }

TEST(DescriptorWire, WindowFieldsRoundTrip) {
  const std::vector<uint8_t> b = EncodeDesc(Rep());
  auto back = DecodeDesc(b);
  ASSERT_TRUE(back.ok()) << back.status();
  const BufferDescriptor& w = back->descriptor.buffers.at(1);
  EXPECT_EQ(w.window, 9u);
  EXPECT_EQ(w.window_devices, 1u);
  EXPECT_EQ(w.rkeys, (std::vector<uint32_t>{0, 0x33}));
  EXPECT_EQ(back->descriptor.buffers.at(0).window, 0u);
  EXPECT_EQ(back->descriptor.buffers.at(0).window_devices, 0u);
}

TEST(DescriptorWire, RejectsBadWindowFields) {
  const std::vector<uint8_t> good = EncodeDesc(Rep());
  const size_t off = WindowOffset(good);
  std::vector<uint8_t> b = good;
  for (size_t i = 0; i < 8; ++i) b[off + i] = 0;  // devices without a window id
  EXPECT_THAT(std::string(DecodeDesc(b).status().message()), HasSubstr("window fields"));
  b = good;
  for (size_t i = 0; i < 8; ++i) b[off + 8 + i] = 0;  // a window id on no device
  EXPECT_THAT(std::string(DecodeDesc(b).status().message()), HasSubstr("window fields"));
  b = good;
  b[off + 8] = 0b100;  // device 2 of a two-device descriptor
  EXPECT_THAT(std::string(DecodeDesc(b).status().message()), HasSubstr("window device"));
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_FALSE(DecodeDesc(absl::MakeConstSpan(good.data(), n)).ok()) << n;
}

TEST(DescriptorWire, RefusesVersion2) {
  std::vector<uint8_t> b = EncodeDesc(Rep());
  b[4] = 2;
  EXPECT_THAT(std::string(DecodeDesc(b).status().message()), HasSubstr("version 2"));
}

}  // namespace
}  // namespace ferry::engine
