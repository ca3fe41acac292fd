// tests/hal/ibverbs_smoke_test.cc (suite hal_real): the libibverbs backend
// against a real device. Skips (GTEST_SKIP) where ibv_get_device_list is
// empty; otherwise opens the first device, queries it, allocates a PD,
// registers an MR, creates a channel, a CQ and an RC QP, walks the QP
// RESET -> INIT, checks stale handles are refused, and tears all down.
// Where two QPs can be connected (FERRY_RXE_GID_INDEX set, as in the
// Soft-RoCE VM), also runs RDMA WRITE and READ through the backend.
#include <poll.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
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

// One side of a connected RC pair.
struct Side {
  ContextHandle ctx;
  PdHandle pd;
  MrInfo mr;
  CompChannelHandle channel;
  CqInfo cq;
  QpInfo qp;
  Gid gid;
  std::vector<uint8_t> buf = std::vector<uint8_t>(8192);
};

void SetUpSide(Verbs& v, const std::string& dev, int gid_index, Side& s) {
  auto ctx = v.OpenDevice(dev);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  s.ctx = *ctx;
  auto gid = v.QueryGid(s.ctx, 1, gid_index);
  ASSERT_TRUE(gid.ok()) << gid.status();
  s.gid = *gid;
  auto pd = v.AllocPd(s.ctx);
  ASSERT_TRUE(pd.ok()) << pd.status();
  s.pd = *pd;
  auto mr = v.RegMr(s.pd, s.buf.data(), s.buf.size(),
                    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
  ASSERT_TRUE(mr.ok()) << mr.status();
  s.mr = *mr;
  auto ch = v.CreateCompChannel(s.ctx);
  ASSERT_TRUE(ch.ok()) << ch.status();
  s.channel = *ch;
  auto cq = v.CreateCq(s.ctx, 32, s.channel);
  ASSERT_TRUE(cq.ok()) << cq.status();
  s.cq = *cq;
  QpInitAttr init;
  init.send_cq = s.cq.cq;
  init.recv_cq = s.cq.cq;
  init.cap.max_send_wr = 8;
  init.cap.max_recv_wr = 1;
  auto qp = v.CreateQp(s.pd, init);
  ASSERT_TRUE(qp.ok()) << qp.status();
  s.qp = *qp;
}

void Connect(Verbs& v, int gid_index, Side& s, const Side& peer) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.port_num = 1;
  a.qp_access_flags = kAccessRemoteWrite | kAccessRemoteRead;
  ASSERT_TRUE(v.ModifyQp(s.qp.qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags).ok());
  a.qp_state = QpState::kRtr;
  a.path_mtu = Mtu::k1024;
  a.dest_qp_num = peer.qp.qp_num;
  a.rq_psn = 100;
  a.ah_attr.dgid = peer.gid;
  a.ah_attr.sgid_index = static_cast<uint8_t>(gid_index);
  a.ah_attr.is_global = true;
  a.ah_attr.port_num = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  absl::Status rtr = v.ModifyQp(
      s.qp.qp, a,
      kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer);
  ASSERT_TRUE(rtr.ok()) << rtr;
  a.qp_state = QpState::kRts;
  a.sq_psn = 100;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  absl::Status rts = v.ModifyQp(
      s.qp.qp, a, kQpState | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpSqPsn | kQpMaxQpRdAtomic);
  ASSERT_TRUE(rts.ok()) << rts;
  auto q = v.QueryQp(s.qp.qp);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->qp_state, QpState::kRts);
  EXPECT_EQ(q->dest_qp_num, peer.qp.qp_num);
}

void TearDownSide(Verbs& v, Side& s) {
  EXPECT_TRUE(v.DestroyQp(s.qp.qp).ok());
  EXPECT_TRUE(v.DestroyCq(s.cq.cq).ok());
  EXPECT_TRUE(v.DestroyCompChannel(s.channel).ok());
  EXPECT_TRUE(v.DeregMr(s.mr.mr).ok());
  EXPECT_TRUE(v.DeallocPd(s.pd).ok());
  EXPECT_TRUE(v.CloseDevice(s.ctx).ok());
}

// Polls `cq` until `n` completions arrived or ~10 s passed.
std::vector<WorkCompletion> PollN(Verbs& v, CqHandle cq, size_t n) {
  std::vector<WorkCompletion> got;
  for (int i = 0; i < 10000 && got.size() < n; ++i) {
    std::vector<WorkCompletion> wcs(n - got.size());
    auto k = v.PollCq(cq, absl::MakeSpan(wcs));
    EXPECT_TRUE(k.ok()) << k.status();
    if (!k.ok()) break;
    got.insert(got.end(), wcs.begin(), wcs.begin() + *k);
    if (*k == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return got;
}

TEST(IbverbsSmokeTest, WriteAndReadBetweenTwoQps) {
  std::unique_ptr<Verbs> verbs = NewIbverbsVerbs();
  auto devices = verbs->ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  if (devices->empty()) GTEST_SKIP() << "no RDMA device (ibv_get_device_list is empty)";
  const char* gid_env = std::getenv("FERRY_RXE_GID_INDEX");
  if (gid_env == nullptr) GTEST_SKIP() << "FERRY_RXE_GID_INDEX not set: no known GID to connect";
  const int gid_index = std::atoi(gid_env);
  const std::string dev_a = (*devices)[0].name;
  const std::string dev_b = devices->size() > 1 ? (*devices)[1].name : dev_a;

  Side a, b;
  ASSERT_NO_FATAL_FAILURE(SetUpSide(*verbs, dev_a, gid_index, a));
  ASSERT_NO_FATAL_FAILURE(SetUpSide(*verbs, dev_b, gid_index, b));
  ASSERT_NO_FATAL_FAILURE(Connect(*verbs, gid_index, a, b));
  ASSERT_NO_FATAL_FAILURE(Connect(*verbs, gid_index, b, a));
  for (size_t i = 0; i < a.buf.size(); ++i) a.buf[i] = static_cast<uint8_t>(i * 3 + 1);
  for (size_t i = 0; i < b.buf.size(); ++i) b.buf[i] = static_cast<uint8_t>(i * 5 + 7);
  const std::vector<uint8_t> b_before = b.buf;
  ASSERT_TRUE(verbs->ReqNotifyCq(a.cq.cq, false).ok());

  // WRITE a[0, 1024) -> b[0, 1024); READ b[4096, 6144) -> a[4096, 6144).
  SendWr write;
  write.wr_id = 1;
  write.opcode = Opcode::kRdmaWrite;
  write.num_sge = 1;
  write.sg_list[0] = Sge{reinterpret_cast<uint64_t>(a.buf.data()), 1024, a.mr.lkey};
  write.remote_addr = reinterpret_cast<uint64_t>(b.buf.data());
  write.rkey = b.mr.rkey;
  SendWr read;
  read.wr_id = 2;
  read.opcode = Opcode::kRdmaRead;
  read.num_sge = 1;
  read.sg_list[0] = Sge{reinterpret_cast<uint64_t>(a.buf.data() + 4096), 2048, a.mr.lkey};
  read.remote_addr = reinterpret_cast<uint64_t>(b.buf.data() + 4096);
  read.rkey = b.mr.rkey;
  SendWr invalid = write;
  invalid.wr_id = 3;
  invalid.num_sge = kMaxSgeInline + 1;
  PostResult r = verbs->PostSend(a.qp.qp, {write, read, invalid});
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument) << r.status;
  EXPECT_EQ(r.posted(), 2u);  // the WRs before the bad one were posted

  std::vector<WorkCompletion> wcs = PollN(*verbs, a.cq.cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess) << WcStatusName(wcs[0].status);
  EXPECT_EQ(wcs[0].opcode, Opcode::kRdmaWrite);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, WcStatus::kSuccess) << WcStatusName(wcs[1].status);
  EXPECT_EQ(wcs[1].opcode, Opcode::kRdmaRead);
  EXPECT_EQ(wcs[1].byte_len, 2048u);
  EXPECT_EQ(wcs[0].qp_num, a.qp.qp_num);
  EXPECT_EQ(std::memcmp(b.buf.data(), a.buf.data(), 1024), 0);
  EXPECT_EQ(std::memcmp(a.buf.data() + 4096, b_before.data() + 4096, 2048), 0);

  // The armed CQ fired one event on the (non-blocking) channel.
  auto fd = verbs->CompChannelFd(a.channel);
  ASSERT_TRUE(fd.ok());
  pollfd p{*fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1);
  auto ev = verbs->GetCqEvent(a.channel);
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_EQ(*ev, a.cq.cq);
  verbs->AckCqEvents(*ev, 1);
  EXPECT_EQ(verbs->GetCqEvent(a.channel).status().code(), absl::StatusCode::kUnavailable);

  TearDownSide(*verbs, a);
  TearDownSide(*verbs, b);
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
