// tests/engine/sim/inline_scenarios_test.cc: inline sends in the engine
// (EngineConfig::inline_bytes_max; docs/design.md section 3, "Inline
// sends"), on the simulated RNIC with the oracle on:
// - a WRITE slice of at most inline_bytes_max bytes is posted inline and
//   its bytes land; a longer one, and every READ, is not;
// - inline_bytes_max = 0 posts nothing inline;
// - a device that refuses the max_inline_data asked (the rxe profile takes
//   at most 400 bytes) gets QPs without inline, and the same WRITEs land.
// The rule that an inline WR's bytes are taken at post_send is the
// simulator's (tests/conformance/inline_cases.cc, switch
// sim_inline_reads_late).
#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "tests/engine/sim/two_engines.h"

namespace ferry::engine::testing {
namespace {

uint64_t PostedInline(const TwoEngines& w) {
  uint64_t n = 0;
  for (const WorkerStats& s : w.worker_stats()) n += s.posted_inline;
  return n;
}

struct InlineRun {
  uint64_t after_small_write = 0;  // posted_inline after each step of the script
  uint64_t after_long_write = 0;
  uint64_t after_small_read = 0;
  bool bytes_landed = false;
  std::string finish;
};

// Host 0 WRITEs 64 bytes, then 65, then READs 32, each to completion.
InlineRun RunScript(uint32_t inline_bytes_max, sim::RnicProfile profile) {
  EngineConfig c = ScenarioConfig();
  c.inline_bytes_max = inline_bytes_max;
  sim::FabricConfig fc = TwoEngines::MakeFabricConfig();
  fc.profile = profile;
  TwoEngines w(41, sim::NetPlan{}, {}, c, fc);
  InlineRun out;
  auto seg = w.Open(0, 1);
  if (!seg.ok()) {
    out.finish = "open: " + seg.status().ToString();
    return out;
  }
  const uint64_t base = PostedInline(w);
  Fill(w, 0, 0, 64, 7);
  const bool small_ok =
      Run1(w, 0, MakeReq(w, 0, *seg, OpKind::kWrite, 0, 4096, 64)).first == TaskStatus::kCompleted;
  out.after_small_write = PostedInline(w) - base;
  Fill(w, 0, 128, 65, 8);
  const bool long_ok = Run1(w, 0, MakeReq(w, 0, *seg, OpKind::kWrite, 128, 8192, 65)).first ==
                       TaskStatus::kCompleted;
  out.after_long_write = PostedInline(w) - base;
  const bool read_ok =
      Run1(w, 0, MakeReq(w, 0, *seg, OpKind::kRead, 512, 4096, 32)).first == TaskStatus::kCompleted;
  out.after_small_read = PostedInline(w) - base;
  out.bytes_landed =
      small_ok && long_ok && read_ok && Holds(w, 1, 4096, 64, 7) && Holds(w, 1, 8192, 65, 8);
  out.finish = Finish(w);
  return out;
}

TEST(InlineScenario, SmallWritesGoInlineAndLand) {
  for (sim::RnicProfile p : {sim::RnicProfile::kMlx5, sim::RnicProfile::kRxe}) {
    const InlineRun r = RunScript(64, p);
    EXPECT_EQ(r.finish, "");
    EXPECT_TRUE(r.bytes_landed);
    EXPECT_EQ(r.after_small_write, 1u) << "the 64-byte WRITE was not posted inline";
    EXPECT_EQ(r.after_long_write, 1u) << "a 65-byte WRITE went inline past inline_bytes_max";
    EXPECT_EQ(r.after_small_read, 1u) << "a READ went inline";
  }
}

TEST(InlineScenario, ZeroTurnsInlineOff) {
  const InlineRun r = RunScript(0, sim::RnicProfile::kMlx5);
  EXPECT_EQ(r.finish, "");
  EXPECT_TRUE(r.bytes_landed);
  EXPECT_EQ(r.after_small_read, 0u);
}

TEST(InlineScenario, DeviceThatRefusesTheSizeGetsQpsWithoutInline) {
  // rxe takes at most 400 bytes of inline data: 1024 is refused at create.
  ASSERT_LT(sim::ProfileMaxInlineData(sim::RnicProfile::kRxe), 1024u);
  const InlineRun r = RunScript(1024, sim::RnicProfile::kRxe);
  EXPECT_EQ(r.finish, "");
  EXPECT_TRUE(r.bytes_landed);
  EXPECT_EQ(r.after_small_read, 0u);
  // The mlx5 model's limit is 256: the same config there is refused too.
  const InlineRun m = RunScript(1024, sim::RnicProfile::kMlx5);
  EXPECT_EQ(m.finish, "");
  EXPECT_EQ(m.after_small_read, 0u);
}

}  // namespace
}  // namespace ferry::engine::testing
