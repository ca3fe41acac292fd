// tests/engine/sim/gid_select_test.cc: automatic GID selection
// (engine/gid_select.h): the preference order on synthetic tables, the scan
// over the simulated RNIC's rxe-like table, and a context brought up with
// gid_index -1 on the simulator.
//
// What must stay true: every test asserts the index chosen and why, so a
// change of the preference order or of the sim's table fails here.
#include "engine/gid_select.h"

#include <optional>
#include <vector>

#include "engine/context.h"
#include "engine/handles.h"
#include "ferry/config.h"
#include "gtest/gtest.h"
#include "sim/prng.h"
#include "sim/rnic/fabric.h"
#include "sim/virtual_clock.h"

namespace ferry::engine {
namespace {

using Table = std::vector<std::optional<hal::GidEntry>>;

hal::Gid LinkLocal(uint8_t last) {
  hal::Gid g;
  g.raw[0] = 0xfe;
  g.raw[1] = 0x80;
  g.raw[15] = last;
  return g;
}
hal::Gid Ipv4(uint8_t last) {
  hal::Gid g;
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  g.raw[12] = 192;
  g.raw[13] = 0;
  g.raw[14] = 2;
  g.raw[15] = last;
  return g;
}
hal::GidEntry E(hal::Gid g, hal::GidType t) { return hal::GidEntry{g, t}; }

TEST(GidSelect, Ipv4MappedDetection) {
  EXPECT_TRUE(IsIpv4MappedGid(Ipv4(1)));
  EXPECT_FALSE(IsIpv4MappedGid(LinkLocal(1)));
  EXPECT_FALSE(IsIpv4MappedGid(hal::Gid{}));
  hal::Gid g = Ipv4(1);
  g.raw[3] = 1;  // not ::ffff:0:0/96
  EXPECT_FALSE(IsIpv4MappedGid(g));
}

TEST(GidSelect, RxeTablePicksRoceV2Ipv4) {
  // rxe with one link-local and one IPv4 address: v1, v2, v1, v2.
  const Table t = {E(LinkLocal(1), hal::GidType::kRoceV1), E(LinkLocal(1), hal::GidType::kRoceV2),
                   E(Ipv4(1), hal::GidType::kRoceV1), E(Ipv4(1), hal::GidType::kRoceV2),
                   std::nullopt};
  const GidSelection s = SelectGidIndex(t);
  EXPECT_EQ(s.index, 3);
  EXPECT_EQ(s.why, GidChoice::kRoceV2Ipv4);
}

TEST(GidSelect, NoIpv4FallsBackToFirstRoceV2) {
  const Table t = {E(LinkLocal(1), hal::GidType::kRoceV1), E(LinkLocal(1), hal::GidType::kRoceV2),
                   E(LinkLocal(2), hal::GidType::kRoceV2)};
  const GidSelection s = SelectGidIndex(t);
  EXPECT_EQ(s.index, 1);
  EXPECT_EQ(s.why, GidChoice::kRoceV2);
}

TEST(GidSelect, Ipv4OnlyAsRoceV1IsNotPreferredOverRoceV2) {
  const Table t = {E(Ipv4(1), hal::GidType::kRoceV1), E(LinkLocal(1), hal::GidType::kRoceV2)};
  const GidSelection s = SelectGidIndex(t);
  EXPECT_EQ(s.index, 1);
  EXPECT_EQ(s.why, GidChoice::kRoceV2);
}

TEST(GidSelect, NoRoceV2OrNoTypesGivesIndexZero) {
  const Table ib = {E(LinkLocal(1), hal::GidType::kIb), E(LinkLocal(2), hal::GidType::kIb)};
  EXPECT_EQ(SelectGidIndex(ib).index, 0);
  EXPECT_EQ(SelectGidIndex(ib).why, GidChoice::kFirstEntry);
  const Table v1 = {E(LinkLocal(1), hal::GidType::kRoceV1), E(Ipv4(1), hal::GidType::kRoceV1)};
  EXPECT_EQ(SelectGidIndex(v1).index, 0);
  EXPECT_EQ(SelectGidIndex(Table{}).why, GidChoice::kFirstEntry);
}

TEST(GidSelect, EmptyAndZeroEntriesAreSkippedAndTiesGoToTheLowestIndex) {
  const Table t = {std::nullopt, E(hal::Gid{}, hal::GidType::kRoceV2), std::nullopt,
                   E(Ipv4(7), hal::GidType::kRoceV2), E(Ipv4(8), hal::GidType::kRoceV2)};
  const GidSelection s = SelectGidIndex(t);
  EXPECT_EQ(s.index, 3);
  EXPECT_EQ(s.why, GidChoice::kRoceV2Ipv4);
}

// The simulated RNIC's table (sim/rnic: rxe's layout) through the HAL.
struct SimWorld {
  sim::VirtualClock clock;
  sim::Prng prng{7};
  sim::Fabric fabric;
  std::unique_ptr<hal::Verbs> verbs;
  SimWorld() : fabric(Config(), prng.Fork(), &clock, nullptr), verbs(fabric.NewVerbs(0)) {}
  static sim::FabricConfig Config() {
    sim::FabricConfig fc;
    fc.hosts = 2;
    return fc;
  }
};

TEST(GidSelect, ScanOfTheSimTableThroughTheHal) {
  SimWorld w;
  auto ctx = w.verbs->OpenDevice("sim0");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto port = w.verbs->QueryPort(*ctx, 1);
  ASSERT_TRUE(port.ok());
  // Type query: entries 0-3 typed, the rest empty (kNotFound), past the
  // table kInvalidArgument; QueryGid agrees with QueryGidEntry.
  for (int i = 0; i < static_cast<int>(port->gid_tbl_len); ++i) {
    auto e = w.verbs->QueryGidEntry(*ctx, 1, i);
    if (i < 4) {
      ASSERT_TRUE(e.ok()) << i << ": " << e.status();
      EXPECT_EQ(e->type, i % 2 == 0 ? hal::GidType::kRoceV1 : hal::GidType::kRoceV2) << i;
      EXPECT_EQ(IsIpv4MappedGid(e->gid), i >= 2) << i;
      EXPECT_EQ(*w.verbs->QueryGid(*ctx, 1, i), e->gid) << i;
    } else {
      EXPECT_EQ(e.status().code(), absl::StatusCode::kNotFound) << i;
    }
  }
  EXPECT_EQ(w.verbs->QueryGidEntry(*ctx, 1, static_cast<int>(port->gid_tbl_len)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto sel = ChooseGid(w.verbs.get(), *ctx, 1, port->gid_tbl_len);
  ASSERT_TRUE(sel.ok()) << sel.status();
  EXPECT_EQ(sel->index, 3);
  EXPECT_EQ(sel->why, GidChoice::kRoceV2Ipv4);
  // An empty port table is an error, not index 0.
  EXPECT_FALSE(ChooseGid(w.verbs.get(), *ctx, 1, 0).ok());
  ASSERT_TRUE(w.verbs->CloseDevice(*ctx).ok());
}

TEST(GidSelect, ContextBringUpUsesTheAutomaticChoiceOrTheConfiguredIndex) {
  for (int configured : {-1, 1}) {
    SCOPED_TRACE(configured);
    SimWorld w;
    HandleLedger ledger;
    EngineConfig cfg;
    cfg.gid_index = configured;
    Context c(w.verbs.get(), "sim0", cfg, 0, &ledger, nullptr);
    ASSERT_TRUE(c.Enable().ok());
    if (configured < 0) {
      EXPECT_EQ(c.gid_index(), 3);
      EXPECT_EQ(c.gid_choice(), GidChoice::kRoceV2Ipv4);
      EXPECT_TRUE(IsIpv4MappedGid(c.gid()));
    } else {
      EXPECT_EQ(c.gid_index(), 1);
      EXPECT_EQ(c.gid_choice(), GidChoice::kConfigured);
      EXPECT_FALSE(IsIpv4MappedGid(c.gid()));  // entry 1: link-local v2
    }
    ASSERT_TRUE(c.Disable().ok());
  }
}

}  // namespace
}  // namespace ferry::engine
