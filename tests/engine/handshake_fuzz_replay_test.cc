// Replays the handshake fuzz target's body (fuzz/handshake_fuzz.cc) over the
// seed corpus fuzz/corpus/handshake (dir given by FERRY_HANDSHAKE_CORPUS)
// and over seeds built here, in every build (no libFuzzer needed).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/auth/auth_wire.h"
#include "engine/handshake.h"
#include "fuzz/handshake_fuzz.h"

namespace ferry::fuzz {
namespace {

std::vector<uint8_t> ValidReq() {
  engine::HandshakeMessage m;
  m.type = engine::HandshakeType::kReq;
  m.incarnation = 42;
  m.generation = 1;
  m.src_nic_path = "127.0.0.1:9000@sim0";
  m.dst_nic = "sim1";
  m.qps = {{5, 100}, {6, 200}};
  m.mtu = hal::Mtu::k1024;
  return *engine::EncodeHandshake(m);
}

TEST(HandshakeFuzzReplay, BuiltInSeedsAndTheirBitFlips) {
  const std::vector<uint8_t> seed = ValidReq();
  EXPECT_TRUE(HandshakeFuzzOne(seed.data(), seed.size()));
  // Every single-bit flip and every truncation must be handled (decoded or
  // rejected) without tripping the target's checks.
  int accepted = 0;
  for (size_t i = 0; i < seed.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> b = seed;
      b[i] ^= static_cast<uint8_t>(1u << bit);
      accepted += HandshakeFuzzOne(b.data(), b.size()) ? 1 : 0;
    }
    EXPECT_FALSE(HandshakeFuzzOne(seed.data(), i));
  }
  EXPECT_GT(accepted, 0);  // e.g. flips inside the incarnation still decode
  EXPECT_FALSE(HandshakeFuzzOne(nullptr, 0));
}

TEST(HandshakeFuzzReplay, SeedCorpus) {
  const char* dir = std::getenv("FERRY_HANDSHAKE_CORPUS");
  if (dir == nullptr) GTEST_SKIP() << "FERRY_HANDSHAKE_CORPUS not set";
  int files = 0;
  int accepted = 0;
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    const bool ok = HandshakeFuzzOne(bytes.data(), bytes.size());
    accepted += ok ? 1 : 0;
    ++files;
    // The auth seeds (one message each) are valid auth messages.
    const std::string name = p.filename().string();
    if (name.rfind("auth_", 0) == 0 && name != "auth_sequence") {
      EXPECT_TRUE(ok) << p;
    }
    // The handshake seeds are valid messages of the current version, except
    // the two named for what is wrong with them: a version bump rewrites
    // the seeds' version byte (and their new fields).
    if (name.rfind("auth_", 0) != 0) {
      EXPECT_EQ(ok, name != "bad_version" && name != "hostile_len") << p;
    }
  }
  EXPECT_GE(files, 4);
  EXPECT_GE(accepted, 1);  // the corpus holds valid messages of several types
}

// An auth DATA and its bit flips and truncations: each decoded or rejected,
// and never delivered by the authenticating listener (the body checks it).
TEST(HandshakeFuzzReplay, AuthSeedAndItsBitFlips) {
  engine::auth::AuthMessage m;
  m.type = engine::auth::AuthType::kData;
  m.session = 7;
  m.seq = 1;
  m.payload = ValidReq();
  const std::vector<uint8_t> seed = *engine::auth::EncodeAuth(m);
  EXPECT_TRUE(HandshakeFuzzOne(seed.data(), seed.size()));
  for (size_t i = 0; i < seed.size(); i += 3) {
    std::vector<uint8_t> b = seed;
    b[i] ^= 0x10;
    HandshakeFuzzOne(b.data(), b.size());
    EXPECT_FALSE(HandshakeFuzzOne(seed.data(), i));
  }
}

}  // namespace
}  // namespace ferry::fuzz
