// tests/hal/ibverbs_smoke_test.cc (suite hal_real): the libibverbs backend
// against a real device. Skips (GTEST_SKIP) where ibv_get_device_list is
// empty; otherwise opens the first device, queries it, allocates a PD,
// registers an MR, creates a channel, a CQ and an RC QP, walks the QP
// RESET -> INIT, checks stale handles are refused, and tears all down.
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/ibverbs/ibverbs.h"

namespace ferry::hal {
namespace {

TEST(IbverbsSmokeTest, OpenQueryCreateWalkAndTearDown) {
  std::unique_ptr<Verbs> verbs = NewIbverbsVerbs();
  auto devices = verbs->ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  if (devices->empty()) GTEST_SKIP() << "no RDMA device (ibv_get_device_list is empty)";
  const DeviceInfo& dev = devices->front();
  ASSERT_FALSE(dev.name.empty());

  auto ctx = verbs->OpenDevice(dev.name);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto dattr = verbs->QueryDevice(*ctx);
  ASSERT_TRUE(dattr.ok()) << dattr.status();
  EXPECT_GE(dattr->phys_port_cnt, 1);
  EXPECT_GT(dattr->max_qp, 0u);
  EXPECT_GT(dattr->max_cqe, 0u);
  auto pattr = verbs->QueryPort(*ctx, 1);
  ASSERT_TRUE(pattr.ok()) << pattr.status();
  EXPECT_GT(pattr->gid_tbl_len, 0u);
  auto gid = verbs->QueryGid(*ctx, 1, 0);
  EXPECT_TRUE(gid.ok()) << gid.status();

  // Non-blocking event sources: nothing pending yet.
  auto fd = verbs->AsyncEventFd(*ctx);
  ASSERT_TRUE(fd.ok());
  EXPECT_GE(*fd, 0);

  auto pd = verbs->AllocPd(*ctx);
  ASSERT_TRUE(pd.ok()) << pd.status();
  std::vector<uint8_t> buf(64 * 1024);
  auto mr = verbs->RegMr(*pd, buf.data(), buf.size(),
                         kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
  ASSERT_TRUE(mr.ok()) << mr.status();
  EXPECT_NE(mr->lkey, 0u);
  EXPECT_EQ(verbs->RegMr(*pd, buf.data(), buf.size(), 1u << 20).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto channel = verbs->CreateCompChannel(*ctx);
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto cq = verbs->CreateCq(*ctx, 64, *channel);
  ASSERT_TRUE(cq.ok()) << cq.status();
  EXPECT_GE(cq->cqe, 64u);
  EXPECT_TRUE(verbs->ReqNotifyCq(cq->cq, false).ok());
  EXPECT_EQ(verbs->GetCqEvent(*channel).status().code(), absl::StatusCode::kUnavailable);
  std::vector<WorkCompletion> wcs(8);
  auto polled = verbs->PollCq(cq->cq, absl::MakeSpan(wcs));
  ASSERT_TRUE(polled.ok()) << polled.status();
  EXPECT_EQ(*polled, 0u);

  QpInitAttr init;
  init.send_cq = cq->cq;
  init.recv_cq = cq->cq;
  init.cap.max_send_wr = 16;
  init.cap.max_recv_wr = 1;
  auto qp = verbs->CreateQp(*pd, init);
  ASSERT_TRUE(qp.ok()) << qp.status();
  EXPECT_NE(qp->qp_num, 0u);
  EXPECT_GE(qp->cap.max_send_wr, 16u);
  auto q0 = verbs->QueryQp(qp->qp);
  ASSERT_TRUE(q0.ok()) << q0.status();
  EXPECT_EQ(q0->qp_state, QpState::kReset);

  // A CQ in use by a QP cannot be destroyed; the handle stays valid.
  EXPECT_FALSE(verbs->DestroyCq(cq->cq).ok());

  QpAttr attr;
  attr.qp_state = QpState::kInit;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qp_access_flags = kAccessRemoteWrite | kAccessRemoteRead;
  ASSERT_TRUE(
      verbs->ModifyQp(qp->qp, attr, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags).ok());
  auto q1 = verbs->QueryQp(qp->qp);
  ASSERT_TRUE(q1.ok()) << q1.status();
  EXPECT_EQ(q1->qp_state, QpState::kInit);
  // INIT -> RTS is illegal and changes nothing.
  QpAttr rts;
  rts.qp_state = QpState::kRts;
  EXPECT_FALSE(verbs->ModifyQp(qp->qp, rts, kQpState).ok());
  EXPECT_EQ(verbs->QueryQp(qp->qp)->qp_state, QpState::kInit);

  // Posting below RTS fails at WR 0: nothing posted.
  SendWr wr;
  wr.opcode = Opcode::kRdmaWrite;
  wr.num_sge = 1;
  wr.sg_list[0] = Sge{reinterpret_cast<uint64_t>(buf.data()), 64, mr->lkey};
  wr.remote_addr = reinterpret_cast<uint64_t>(buf.data());
  wr.rkey = mr->rkey;
  SendWr too_many = wr;
  too_many.num_sge = kMaxSgeInline + 1;
  PostResult bad = verbs->PostSend(qp->qp, {too_many});
  EXPECT_EQ(bad.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.posted(), 0u);

  // Teardown in dependency order; then stale handles are refused.
  ASSERT_TRUE(verbs->DestroyQp(qp->qp).ok());
  EXPECT_EQ(verbs->DestroyQp(qp->qp).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(verbs->QueryQp(qp->qp).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(verbs->DestroyCq(cq->cq).ok());
  ASSERT_TRUE(verbs->DestroyCompChannel(*channel).ok());
  ASSERT_TRUE(verbs->DeregMr(mr->mr).ok());
  ASSERT_TRUE(verbs->DeallocPd(*pd).ok());
  ASSERT_TRUE(verbs->CloseDevice(*ctx).ok());
  EXPECT_EQ(verbs->QueryDevice(*ctx).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IbverbsSmokeTest, CloseDeviceDestroysWhatItHolds) {
  std::unique_ptr<Verbs> verbs = NewIbverbsVerbs();
  auto devices = verbs->ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  if (devices->empty()) GTEST_SKIP() << "no RDMA device (ibv_get_device_list is empty)";
  auto ctx = verbs->OpenDevice(devices->front().name);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto pd = verbs->AllocPd(*ctx);
  ASSERT_TRUE(pd.ok());
  std::vector<uint8_t> buf(4096);
  auto mr = verbs->RegMr(*pd, buf.data(), buf.size(), kAccessLocalWrite);
  ASSERT_TRUE(mr.ok());
  auto cq = verbs->CreateCq(*ctx, 16, CompChannelHandle{});
  ASSERT_TRUE(cq.ok());
  QpInitAttr init;
  init.send_cq = cq->cq;
  init.recv_cq = cq->cq;
  init.cap.max_send_wr = 4;
  init.cap.max_recv_wr = 1;
  auto qp = verbs->CreateQp(*pd, init);
  ASSERT_TRUE(qp.ok()) << qp.status();
  ASSERT_TRUE(verbs->CloseDevice(*ctx).ok());
  EXPECT_EQ(verbs->QueryQp(qp->qp).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(verbs->DeregMr(mr->mr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(verbs->DeallocPd(*pd).code(), absl::StatusCode::kInvalidArgument);
}

TEST(IbverbsSmokeTest, UnknownDeviceAndHandlesAreClearErrors) {
  std::unique_ptr<Verbs> verbs = NewIbverbsVerbs();
  auto ctx = verbs->OpenDevice("no-such-device");
  EXPECT_EQ(ctx.status().code(), absl::StatusCode::kNotFound) << ctx.status();
  EXPECT_EQ(verbs->QueryDevice(ContextHandle{42}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(verbs->DestroyQp(QpHandle{42}).code(), absl::StatusCode::kInvalidArgument);
  PostResult r = verbs->PostSend(QpHandle{42}, {SendWr{}});
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.posted(), 0u);
}

}  // namespace
}  // namespace ferry::hal
