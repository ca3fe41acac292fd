// tests/hal/types_test.cc: names of the HAL enums (every value has its own
// name, out-of-range values print "?") and the MTU helper.
#include "hal/types.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace ferry::hal {
namespace {

template <typename E, typename F>
void ExpectDistinctNames(int count, F name_of) {
  std::set<std::string> seen;
  for (int i = 0; i < count; ++i) {
    const std::string_view n = name_of(static_cast<E>(i));
    EXPECT_NE(n, "?") << i;
    EXPECT_FALSE(n.empty()) << i;
    EXPECT_TRUE(seen.insert(std::string(n)).second) << "duplicate name " << n;
  }
  EXPECT_EQ(name_of(static_cast<E>(count)), "?");
}

TEST(TypesTest, QpStateNames) {
  ExpectDistinctNames<QpState>(7, QpStateName);
  EXPECT_EQ(QpStateName(QpState::kReset), "RESET");
  EXPECT_EQ(QpStateName(QpState::kRts), "RTS");
  EXPECT_EQ(QpStateName(QpState::kErr), "ERR");
}

TEST(TypesTest, OpcodeNames) {
  ExpectDistinctNames<Opcode>(8, OpcodeName);
  EXPECT_EQ(OpcodeName(Opcode::kRecv), "RECV");
  EXPECT_EQ(OpcodeName(Opcode::kRecvRdmaWithImm), "RECV_RDMA_WITH_IMM");
  EXPECT_EQ(OpcodeName(Opcode::kBindMw), "BIND_MW");
  EXPECT_EQ(OpcodeName(Opcode::kLocalInv), "LOCAL_INV");
  EXPECT_EQ(OpcodeName(Opcode::kRdmaRead), "RDMA_READ");
  EXPECT_EQ(OpcodeName(Opcode::kRdmaWriteWithImm), "RDMA_WRITE_WITH_IMM");
}

TEST(TypesTest, IncRkeyChangesOnlyTheTag) {
  EXPECT_EQ(IncRkey(0x123456ffu), 0x12345600u);
  EXPECT_EQ(IncRkey(0x12345601u), 0x12345602u);
  EXPECT_EQ(IncRkey(0xffffffffu), 0xffffff00u);
}

TEST(TypesTest, WcStatusNames) {
  ExpectDistinctNames<WcStatus>(22, WcStatusName);
  EXPECT_EQ(WcStatusName(WcStatus::kSuccess), "SUCCESS");
  EXPECT_EQ(WcStatusName(WcStatus::kWrFlushErr), "WR_FLUSH_ERR");
  EXPECT_EQ(WcStatusName(WcStatus::kRetryExcErr), "RETRY_EXC_ERR");
  EXPECT_EQ(WcStatusName(WcStatus::kGeneralErr), "GENERAL_ERR");
}

TEST(TypesTest, AsyncEventTypeNames) {
  ExpectDistinctNames<AsyncEventType>(11, AsyncEventTypeName);
  EXPECT_EQ(AsyncEventTypeName(AsyncEventType::kQpFatal), "QP_FATAL");
  EXPECT_EQ(AsyncEventTypeName(AsyncEventType::kOther), "OTHER");
}

TEST(TypesTest, MtuBytesAndHandles) {
  EXPECT_EQ(MtuBytes(Mtu::k256), 256u);
  EXPECT_EQ(MtuBytes(Mtu::k1024), 1024u);
  EXPECT_EQ(MtuBytes(Mtu::k4096), 4096u);
  EXPECT_FALSE(QpHandle{}.valid());
  EXPECT_TRUE(QpHandle{7}.valid());
  EXPECT_EQ(QpHandle{7}, QpHandle{7});
  EXPECT_LT(QpHandle{7}, QpHandle{8});
}

}  // namespace
}  // namespace ferry::hal
