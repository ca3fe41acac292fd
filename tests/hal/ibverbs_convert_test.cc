// tests/hal/ibverbs_convert_test.cc: the Ferry <-> libibverbs translations
// of hal/ibverbs/convert.h (runs without a device). This test belongs to the
// ibverbs backend, so it may see <infiniband/verbs.h> through convert.h.
#include <arpa/inet.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/ibverbs/convert.h"

namespace ferry::hal::ibverbs {
namespace {

TEST(IbverbsConvertTest, WcStatusAndOpcode) {
  for (int s = IBV_WC_SUCCESS; s <= IBV_WC_GENERAL_ERR; ++s) {
    EXPECT_EQ(static_cast<int>(ToWcStatus(s)), s);
  }
  EXPECT_EQ(ToWcStatus(IBV_WC_TM_ERR), WcStatus::kGeneralErr);
  EXPECT_EQ(ToWcStatus(-3), WcStatus::kGeneralErr);
  EXPECT_EQ(ToOpcode(IBV_WC_RDMA_WRITE), Opcode::kRdmaWrite);
  EXPECT_EQ(ToOpcode(IBV_WC_RDMA_READ), Opcode::kRdmaRead);
  EXPECT_EQ(ToOpcode(IBV_WC_SEND), Opcode::kSend);
  EXPECT_EQ(ToOpcode(IBV_WC_RECV_RDMA_WITH_IMM), Opcode::kRecvRdmaWithImm);
  EXPECT_EQ(ToOpcode(IBV_WC_RECV), Opcode::kRecv);
  EXPECT_EQ(ToOpcode(IBV_WC_BIND_MW), Opcode::kBindMw);
  EXPECT_EQ(ToOpcode(IBV_WC_LOCAL_INV), Opcode::kLocalInv);

  ibv_wc wc{};
  wc.wr_id = 0xabcdef;
  wc.status = IBV_WC_WR_FLUSH_ERR;
  wc.opcode = IBV_WC_RDMA_READ;
  wc.vendor_err = 0x81;
  wc.byte_len = 4096;
  wc.qp_num = 0x1234;
  WorkCompletion out = ToWorkCompletion(wc);
  EXPECT_EQ(out.wr_id, 0xabcdefu);
  EXPECT_EQ(out.status, WcStatus::kWrFlushErr);
  EXPECT_EQ(out.vendor_err, 0x81u);
  EXPECT_EQ(out.qp_num, 0x1234u);
  EXPECT_EQ(out.wc_flags, 0u);

  // A receive with immediate: the flag, and imm_data from network order.
  ibv_wc rx{};
  rx.status = IBV_WC_SUCCESS;
  rx.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
  rx.wc_flags = IBV_WC_WITH_IMM;
  rx.imm_data = htonl(0xdeadbeef);
  rx.byte_len = 2500;
  rx.src_qp = 0x77;
  const WorkCompletion r = ToWorkCompletion(rx);
  EXPECT_EQ(r.opcode, Opcode::kRecvRdmaWithImm);
  EXPECT_EQ(r.wc_flags, uint32_t{kWcWithImm});
  EXPECT_EQ(r.imm_data, 0xdeadbeefu);
  EXPECT_EQ(r.byte_len, 2500u);
  EXPECT_EQ(r.src_qp, 0x77u);
}

TEST(IbverbsConvertTest, RecvWr) {
  RecvWr in;
  in.wr_id = 9;
  in.num_sge = 2;
  in.sg_list[0] = Sge{0x1000, 64, 7};
  in.sg_list[1] = Sge{0x2000, 32, 8};
  ibv_recv_wr wr;
  ibv_sge sges[kMaxSgeInline];
  ASSERT_TRUE(ToIbvRecvWr(in, &wr, sges).ok());
  EXPECT_EQ(wr.wr_id, 9u);
  EXPECT_EQ(wr.num_sge, 2);
  EXPECT_EQ(wr.sg_list[1].addr, 0x2000u);
  EXPECT_EQ(wr.next, nullptr);
  in.num_sge = 0;
  ASSERT_TRUE(ToIbvRecvWr(in, &wr, sges).ok());
  EXPECT_EQ(wr.sg_list, nullptr);
  in.num_sge = kMaxSgeInline + 1;
  EXPECT_EQ(ToIbvRecvWr(in, &wr, sges).code(), absl::StatusCode::kInvalidArgument);
}

TEST(IbverbsConvertTest, StatesMtusPorts) {
  for (int s = IBV_QPS_RESET; s <= IBV_QPS_ERR; ++s) {
    auto st = ToQpState(s);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(ToIbvQpState(*st), s);
  }
  EXPECT_EQ(ToQpState(IBV_QPS_UNKNOWN).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(ToMtu(IBV_MTU_4096), Mtu::k4096);
  EXPECT_EQ(ToMtu(0), Mtu::k256);
  EXPECT_EQ(ToMtu(9), Mtu::k4096);
  EXPECT_EQ(ToPortState(IBV_PORT_ACTIVE), PortState::kActive);
  EXPECT_EQ(ToPortState(77), PortState::kNop);
}

TEST(IbverbsConvertTest, AsyncEvents) {
  EXPECT_EQ(ToAsyncEventType(IBV_EVENT_QP_FATAL), AsyncEventType::kQpFatal);
  EXPECT_EQ(ToAsyncEventType(IBV_EVENT_CQ_ERR), AsyncEventType::kCqErr);
  EXPECT_EQ(ToAsyncEventType(IBV_EVENT_DEVICE_FATAL), AsyncEventType::kDeviceFatal);
  EXPECT_EQ(ToAsyncEventType(IBV_EVENT_LID_CHANGE), AsyncEventType::kOther);
  EXPECT_EQ(ElementOf(IBV_EVENT_QP_LAST_WQE_REACHED), EventElement::kQp);
  EXPECT_EQ(ElementOf(IBV_EVENT_CQ_ERR), EventElement::kCq);
  EXPECT_EQ(ElementOf(IBV_EVENT_PORT_ERR), EventElement::kPort);
  EXPECT_EQ(ElementOf(IBV_EVENT_SRQ_LIMIT_REACHED), EventElement::kSrq);
  EXPECT_EQ(ElementOf(IBV_EVENT_DEVICE_FATAL), EventElement::kNone);
}

TEST(IbverbsConvertTest, FlagAndMaskChecks) {
  EXPECT_TRUE(CheckAccessFlags(kAllAccessFlags).ok());
  EXPECT_TRUE(CheckAccessFlags(IBV_ACCESS_MW_BIND).ok());
  EXPECT_EQ(CheckAccessFlags(IBV_ACCESS_ZERO_BASED).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckQpAttrMask(kQpState | kQpDestQpn).ok());
  EXPECT_EQ(CheckQpAttrMask(IBV_QP_RATE_LIMIT).code(), absl::StatusCode::kInvalidArgument);
}

TEST(IbverbsConvertTest, QpAttrRoundTrip) {
  QpAttr a;
  a.qp_state = QpState::kRtr;
  a.path_mtu = Mtu::k2048;
  a.rq_psn = 0x123456;
  a.sq_psn = 0x654321;
  a.dest_qp_num = 0x42;
  a.qp_access_flags = kAccessRemoteRead;
  a.ah_attr.dgid.raw[15] = 7;
  a.ah_attr.sgid_index = 3;
  a.ah_attr.hop_limit = 9;
  a.ah_attr.port_num = 2;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 5;
  a.timeout = 18;
  a.retry_cnt = 3;
  a.rnr_retry = 6;
  ibv_qp_attr raw = ToIbvQpAttr(a);
  EXPECT_EQ(raw.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(raw.path_mtu, IBV_MTU_2048);
  EXPECT_EQ(raw.ah_attr.grh.dgid.raw[15], 7);
  auto back = ToQpAttr(raw);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->qp_state, QpState::kRtr);
  EXPECT_EQ(back->path_mtu, Mtu::k2048);
  EXPECT_EQ(back->rq_psn, a.rq_psn);
  EXPECT_EQ(back->sq_psn, a.sq_psn);
  EXPECT_EQ(back->dest_qp_num, a.dest_qp_num);
  EXPECT_EQ(back->qp_access_flags, a.qp_access_flags);
  EXPECT_EQ(back->ah_attr.dgid, a.ah_attr.dgid);
  EXPECT_EQ(back->ah_attr.sgid_index, 3);
  EXPECT_EQ(back->ah_attr.hop_limit, 9);
  EXPECT_EQ(back->ah_attr.port_num, 2);
  EXPECT_TRUE(back->ah_attr.is_global);
  EXPECT_EQ(back->max_dest_rd_atomic, 16);
  EXPECT_EQ(back->timeout, 18);
  EXPECT_EQ(back->retry_cnt, 3);
  EXPECT_EQ(back->rnr_retry, 6);
}

TEST(IbverbsConvertTest, SendWr) {
  SendWr in;
  in.wr_id = 99;
  in.opcode = Opcode::kRdmaWriteWithImm;
  in.send_flags = kSendSignaled | kSendFence;
  in.num_sge = 2;
  in.sg_list[0] = Sge{0x1000, 64, 5};
  in.sg_list[1] = Sge{0x2000, 32, 6};
  in.remote_addr = 0xdead0000;
  in.rkey = 77;
  in.imm_data = 0x01020304;
  ibv_send_wr wr;
  ibv_sge sges[kMaxSgeInline];
  ASSERT_TRUE(ToIbvSendWr(in, &wr, sges).ok());
  EXPECT_EQ(wr.wr_id, 99u);
  EXPECT_EQ(wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(wr.send_flags, unsigned{IBV_SEND_SIGNALED | IBV_SEND_FENCE});
  EXPECT_EQ(wr.num_sge, 2);
  EXPECT_EQ(wr.sg_list, sges);
  EXPECT_EQ(sges[1].addr, 0x2000u);
  EXPECT_EQ(sges[1].lkey, 6u);
  EXPECT_EQ(wr.wr.rdma.remote_addr, 0xdead0000u);
  EXPECT_EQ(wr.wr.rdma.rkey, 77u);
  EXPECT_EQ(wr.imm_data, htonl(0x01020304));
  EXPECT_EQ(wr.next, nullptr);

  SendWr bad = in;
  bad.num_sge = kMaxSgeInline + 1;
  EXPECT_EQ(ToIbvSendWr(bad, &wr, sges).code(), absl::StatusCode::kInvalidArgument);
  bad = in;
  bad.send_flags = 1u << 4;  // IBV_SEND_IP_CSUM: not a Ferry flag
  EXPECT_EQ(ToIbvSendWr(bad, &wr, sges).code(), absl::StatusCode::kInvalidArgument);
}

TEST(IbverbsConvertTest, BindAndLocalInvalidateWrs) {
  SendWr in;
  in.wr_id = 7;
  in.opcode = Opcode::kBindMw;
  in.bind = MwBind{MwHandle{1}, MrHandle{2}, 0x4000, 8192, kAccessRemoteRead, 0x80001f1};
  ibv_mw mw{};
  ibv_mr mr{};
  ibv_send_wr wr;
  ibv_sge sges[kMaxSgeInline];
  // The window and region must be resolved by the caller.
  EXPECT_EQ(ToIbvSendWr(in, &wr, sges).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(ToIbvSendWr(in, &wr, sges, &mw, &mr).ok());
  EXPECT_EQ(wr.opcode, IBV_WR_BIND_MW);
  EXPECT_EQ(wr.num_sge, 0);
  EXPECT_EQ(wr.bind_mw.mw, &mw);
  EXPECT_EQ(wr.bind_mw.rkey, 0x80001f1u);
  EXPECT_EQ(wr.bind_mw.bind_info.mr, &mr);
  EXPECT_EQ(wr.bind_mw.bind_info.addr, 0x4000u);
  EXPECT_EQ(wr.bind_mw.bind_info.length, 8192u);
  EXPECT_EQ(wr.bind_mw.bind_info.mw_access_flags, unsigned{IBV_ACCESS_REMOTE_READ});
  SendWr bad = in;
  bad.num_sge = 1;  // a bind carries no SGE
  EXPECT_EQ(ToIbvSendWr(bad, &wr, sges, &mw, &mr).code(), absl::StatusCode::kInvalidArgument);
  bad = in;
  bad.bind.access = IBV_ACCESS_ZERO_BASED;
  EXPECT_EQ(ToIbvSendWr(bad, &wr, sges, &mw, &mr).code(), absl::StatusCode::kInvalidArgument);

  SendWr inv;
  inv.wr_id = 8;
  inv.opcode = Opcode::kLocalInv;
  inv.invalidate_rkey = 0x80001f1;
  ASSERT_TRUE(ToIbvSendWr(inv, &wr, sges).ok());
  EXPECT_EQ(wr.opcode, IBV_WR_LOCAL_INV);
  EXPECT_EQ(wr.invalidate_rkey, 0x80001f1u);
  EXPECT_EQ(wr.num_sge, 0);
}

TEST(IbverbsConvertTest, DeviceAttrReportsType2Windows) {
  ibv_device_attr a{};
  a.max_mw = 524287;
  EXPECT_FALSE(ToDeviceAttr(a).mw_type2);
  EXPECT_EQ(ToDeviceAttr(a).max_mw, 524287u);
  a.device_cap_flags = IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;  // rxe, 6.1
  EXPECT_TRUE(ToDeviceAttr(a).mw_type2);
  a.device_cap_flags = IBV_DEVICE_MEM_WINDOW_TYPE_2A;
  EXPECT_TRUE(ToDeviceAttr(a).mw_type2);
  a.device_cap_flags = IBV_DEVICE_MEM_WINDOW;  // type 1 only
  EXPECT_FALSE(ToDeviceAttr(a).mw_type2);
}

}  // namespace
}  // namespace ferry::hal::ibverbs
