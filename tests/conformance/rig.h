// tests/conformance/rig.h: Rig, the two sides of a conformance case (side
// A = requester, side B = responder): per side a context, PD, completion
// channel, CQ and one registered buffer, plus the QPs, extra MRs and memory
// windows a case makes; helpers to connect RC pairs, build READ/WRITE WRs
// and poll.
//
// Thread safety: none (tests are single-threaded).
// What must stay true: a Rig uses only hal::Verbs calls and the Env
// interface, so every case runs unchanged on every backend; the destructor
// frees everything in verbs order (memory windows, QPs, MRs, CQ, channel,
// PD, context) and checks each free succeeded.
#ifndef FERRY_TESTS_CONFORMANCE_RIG_H_
#define FERRY_TESTS_CONFORMANCE_RIG_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "hal/types.h"
#include "hal/verbs.h"
#include "tests/conformance/conformance_env.h"

namespace ferry::conformance {

using hal::QpState;
using hal::WcStatus;

inline constexpr uint32_t kAccess =
    hal::kAccessLocalWrite | hal::kAccessRemoteWrite | hal::kAccessRemoteRead;

// A buffer registered besides the side's own (Side::buf), with its own
// access flags.
struct ExtraMr {
  std::vector<uint8_t> buf;
  hal::MrInfo mr;
  uint64_t addr(uint64_t off = 0) const { return reinterpret_cast<uint64_t>(buf.data()) + off; }
  // True when every byte of [off, off + len) is `value`.
  bool Holds(uint64_t off, uint64_t len, uint8_t value) const {
    return std::all_of(buf.begin() + static_cast<std::ptrdiff_t>(off),
                       buf.begin() + static_cast<std::ptrdiff_t>(off + len),
                       [value](uint8_t b) { return b == value; });
  }
};

struct Side {
  hal::Verbs* v = nullptr;
  hal::ContextHandle ctx;
  hal::PdHandle pd;
  hal::CompChannelHandle ch;
  hal::CqHandle cq;
  uint32_t cqe = 0;
  std::vector<uint8_t> buf;
  hal::MrInfo mr;
  hal::Gid gid;
  hal::Mtu mtu = hal::Mtu::k1024;
  std::vector<hal::QpHandle> qps;
  uint32_t cq_events_unacked = 0;
  std::vector<std::unique_ptr<ExtraMr>> extra_mrs;  // still registered
  std::vector<hal::MwHandle> mws;                   // still allocated
};

// Both sides' objects; the destructor frees them in verbs order.
class Rig {
 public:
  explicit Rig(Env& env, uint32_t cqe = 256, size_t buf_bytes = 1 << 16) : env_(env) {
    for (int i = 0; i < 2; ++i) {
      Side& s = side_[i];
      s.v = &env.verbs(i);
      auto ctx = s.v->OpenDevice(env.device(i));
      if (!ctx.ok()) {
        ADD_FAILURE() << ctx.status();
        return;
      }
      s.ctx = *ctx;
      s.pd = *s.v->AllocPd(s.ctx);
      s.ch = *s.v->CreateCompChannel(s.ctx);
      auto cq = s.v->CreateCq(s.ctx, cqe, s.ch);
      EXPECT_TRUE(cq.ok()) << cq.status();
      s.cq = cq->cq;
      s.cqe = cq->cqe;
      s.buf.assign(buf_bytes, static_cast<uint8_t>(0x10 + i));
      s.mr = *s.v->RegMr(s.pd, s.buf.data(), s.buf.size(), kAccess);
      s.gid = *s.v->QueryGid(s.ctx, 1, env.gid_index(i));
      auto port = s.v->QueryPort(s.ctx, 1);
      if (port.ok() && static_cast<uint8_t>(port->active_mtu) < static_cast<uint8_t>(s.mtu)) {
        s.mtu = port->active_mtu;
      }
    }
    ok_ = true;
  }

  ~Rig() {
    if (!ok_) return;
    for (int i = 0; i < 2; ++i) {
      Side& s = side_[i];
      DrainAsync(i);
      // Windows first: a bound one holds its MR (and, type 2, its QP).
      for (hal::MwHandle mw : s.mws) EXPECT_TRUE(s.v->DeallocMw(mw).ok());
      s.mws.clear();
      for (hal::QpHandle qp : s.qps) EXPECT_TRUE(s.v->DestroyQp(qp).ok());
      s.qps.clear();
      for (const auto& m : s.extra_mrs) EXPECT_TRUE(s.v->DeregMr(m->mr.mr).ok());
      s.extra_mrs.clear();
      EXPECT_TRUE(s.v->DeregMr(s.mr.mr).ok());
      if (s.cq_events_unacked > 0) s.v->AckCqEvents(s.cq, s.cq_events_unacked);
      EXPECT_TRUE(s.v->DestroyCq(s.cq).ok());
      EXPECT_TRUE(s.v->DestroyCompChannel(s.ch).ok());
      EXPECT_TRUE(s.v->DeallocPd(s.pd).ok());
      EXPECT_TRUE(s.v->CloseDevice(s.ctx).ok());
    }
  }

  bool ok() const { return ok_; }
  Side& side(int i) { return side_[i]; }

  // Registers `bytes` more of side i's memory, filled with `fill`, with
  // `access`; nullptr (and a test failure) if the registration failed.
  ExtraMr* RegExtraMr(int i, uint32_t access, size_t bytes, uint8_t fill) {
    Side& s = side_[i];
    auto m = std::make_unique<ExtraMr>();
    m->buf.assign(bytes, fill);
    auto mr = s.v->RegMr(s.pd, m->buf.data(), m->buf.size(), access);
    EXPECT_TRUE(mr.ok()) << mr.status();
    if (!mr.ok()) return nullptr;
    m->mr = *mr;
    s.extra_mrs.push_back(std::move(m));
    return s.extra_mrs.back().get();
  }
  // Deregisters `m` now; on success the Rig forgets it (m dangles).
  absl::Status DeregExtraMr(int i, ExtraMr* m) {
    Side& s = side_[i];
    absl::Status st = s.v->DeregMr(m->mr.mr);
    if (st.ok()) std::erase_if(s.extra_mrs, [m](const auto& p) { return p.get() == m; });
    return st;
  }
  // A type 2 memory window of side i's PD, freed by the destructor.
  absl::StatusOr<hal::MwInfo> AllocMw(int i) {
    Side& s = side_[i];
    auto mw = s.v->AllocMw(s.pd, hal::MwType::kType2);
    if (mw.ok()) s.mws.push_back(mw->mw);
    return mw;
  }
  absl::Status DeallocMw(int i, hal::MwHandle mw) {
    absl::Status st = side_[i].v->DeallocMw(mw);
    if (st.ok()) std::erase(side_[i].mws, mw);
    return st;
  }
  Side& a() { return side_[0]; }
  Side& b() { return side_[1]; }
  Env& env() { return env_; }

  // QP settings the next MakeQp / Connect use (receive-side cases).
  uint32_t recv_depth = 1;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 12;
  uint32_t max_inline_data = 0;  // inline cases

  // Gets and acknowledges every pending async event of a side; returns them.
  std::vector<hal::AsyncEventType> DrainAsync(int i) {
    std::vector<hal::AsyncEventType> out;
    for (int n = 0; n < 64; ++n) {
      auto ev = side_[i].v->GetAsyncEvent(side_[i].ctx);
      if (!ev.ok()) break;
      out.push_back(ev->type);
      side_[i].v->AckAsyncEvent(*ev);
    }
    return out;
  }

  hal::QpInfo MakeQp(int i, uint32_t depth = 64) {
    Side& s = side_[i];
    hal::QpInitAttr init;
    init.send_cq = init.recv_cq = s.cq;
    init.cap.max_send_wr = depth;
    init.cap.max_recv_wr = recv_depth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = max_inline_data;
    auto qp = s.v->CreateQp(s.pd, init);
    EXPECT_TRUE(qp.ok()) << qp.status();
    if (!qp.ok()) return {};
    s.qps.push_back(qp->qp);
    return *qp;
  }
  absl::Status DestroyQp(int i, hal::QpHandle qp) {
    DrainAsync(i);
    absl::Status st = side_[i].v->DestroyQp(qp);
    if (st.ok()) std::erase(side_[i].qps, qp);
    return st;
  }

  absl::Status ToInit(int i, hal::QpHandle qp) {
    hal::QpAttr a;
    a.qp_state = QpState::kInit;
    a.port_num = 1;
    a.pkey_index = 0;
    a.qp_access_flags = kAccess;
    return side_[i].v->ModifyQp(
        qp, a, hal::kQpState | hal::kQpPkeyIndex | hal::kQpPort | hal::kQpAccessFlags);
  }
  absl::Status ToRtr(int i, hal::QpHandle qp, uint32_t peer_qpn, uint32_t rq_psn) {
    const Side& peer = side_[1 - i];
    hal::QpAttr a;
    a.qp_state = QpState::kRtr;
    a.path_mtu = std::min(side_[i].mtu, peer.mtu);
    a.dest_qp_num = peer_qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = min_rnr_timer;
    a.ah_attr.is_global = true;
    a.ah_attr.dgid = peer.gid;
    a.ah_attr.sgid_index = static_cast<uint8_t>(env_.gid_index(i));
    a.ah_attr.hop_limit = 64;
    a.ah_attr.port_num = 1;
    return side_[i].v->ModifyQp(qp, a,
                                hal::kQpState | hal::kQpAv | hal::kQpPathMtu | hal::kQpDestQpn |
                                    hal::kQpRqPsn | hal::kQpMaxDestRdAtomic | hal::kQpMinRnrTimer);
  }
  absl::Status ToRts(int i, hal::QpHandle qp, uint32_t sq_psn, uint8_t timeout, uint8_t retry) {
    hal::QpAttr a;
    a.qp_state = QpState::kRts;
    a.sq_psn = sq_psn;
    a.timeout = timeout;
    a.retry_cnt = retry;
    a.rnr_retry = rnr_retry;
    a.max_rd_atomic = 1;
    return side_[i].v->ModifyQp(qp, a,
                                hal::kQpState | hal::kQpSqPsn | hal::kQpMaxQpRdAtomic |
                                    hal::kQpRetryCnt | hal::kQpRnrRetry | hal::kQpTimeout);
  }
  absl::Status ToErr(int i, hal::QpHandle qp) {
    hal::QpAttr a;
    a.qp_state = QpState::kErr;
    return side_[i].v->ModifyQp(qp, a, hal::kQpState);
  }

  struct Pair {
    hal::QpInfo a, b;
  };
  absl::StatusOr<Pair> Connect(uint32_t depth = 64, uint8_t timeout = 14, uint8_t retry = 7,
                               bool b_stays_in_init = false) {
    Pair p{MakeQp(0, depth), MakeQp(1, depth)};
    if (!p.a.qp.valid() || !p.b.qp.valid()) return absl::InternalError("create_qp failed");
    if (auto s = ToInit(0, p.a.qp); !s.ok()) return s;
    if (auto s = ToInit(1, p.b.qp); !s.ok()) return s;
    if (auto s = ToRtr(0, p.a.qp, p.b.qp_num, 0x2000); !s.ok()) return s;
    if (auto s = ToRts(0, p.a.qp, 0x1000, timeout, retry); !s.ok()) return s;
    if (!b_stays_in_init) {
      if (auto s = ToRtr(1, p.b.qp, p.a.qp_num, 0x1000); !s.ok()) return s;
      if (auto s = ToRts(1, p.b.qp, 0x2000, timeout, retry); !s.ok()) return s;
    }
    return p;
  }

  hal::SendWr Wr(hal::Opcode op, uint64_t wr_id, uint64_t off, uint32_t len, bool signaled = true) {
    hal::SendWr w;
    w.wr_id = wr_id;
    w.opcode = op;
    w.send_flags = signaled ? uint32_t{hal::kSendSignaled} : 0u;
    w.num_sge = 1;
    w.sg_list[0] = hal::Sge{reinterpret_cast<uint64_t>(a().buf.data()) + off, len, a().mr.lkey};
    w.remote_addr = reinterpret_cast<uint64_t>(b().buf.data()) + off;
    w.rkey = b().mr.rkey;
    return w;
  }
  // A READ or WRITE of side A's buf at `local_off` against any remote
  // address and rkey (an extra MR's, a window's).
  hal::SendWr WrTo(hal::Opcode op, uint64_t wr_id, uint64_t local_off, uint64_t remote_addr,
                   uint32_t rkey, uint32_t len) {
    hal::SendWr w = Wr(op, wr_id, local_off, len);
    w.remote_addr = remote_addr;
    w.rkey = rkey;
    return w;
  }
  hal::SendWr Write(uint64_t id, uint64_t off, uint32_t len, bool sig = true) {
    return Wr(hal::Opcode::kRdmaWrite, id, off, len, sig);
  }

  // A SEND of side A's buf [off, off + len) (receive-side cases).
  hal::SendWr Send(uint64_t wr_id, uint64_t off, uint32_t len) {
    hal::SendWr w = Wr(hal::Opcode::kSend, wr_id, off, len);
    w.remote_addr = 0;
    w.rkey = 0;
    return w;
  }
  // Posts one receive WR on side i's QP over its buf [off, off + len)
  // (len 0: a WR with no SGE).
  absl::Status PostRecv(int i, hal::QpHandle qp, uint64_t wr_id, uint64_t off, uint32_t len) {
    Side& s = side_[i];
    hal::RecvWr w;
    w.wr_id = wr_id;
    if (len > 0) {
      w.num_sge = 1;
      w.sg_list[0] = hal::Sge{reinterpret_cast<uint64_t>(s.buf.data()) + off, len, s.mr.lkey};
    }
    return s.v->PostRecv(qp, {&w, 1}).status;
  }

  std::vector<hal::WorkCompletion> PollN(int i, size_t n, uint64_t budget_ns) {
    std::vector<hal::WorkCompletion> out;
    const uint64_t end = env_.NowNs() + budget_ns;
    hal::WorkCompletion wc[16];
    while (out.size() < n) {
      auto got = side_[i].v->PollCq(side_[i].cq, absl::MakeSpan(wc, 16));
      if (!got.ok()) break;
      for (uint32_t k = 0; k < *got; ++k) out.push_back(wc[k]);
      if (out.size() >= n || env_.NowNs() >= end) break;
      if (*got == 0) env_.Wait(env_.traits().poll_step_ns);
    }
    return out;
  }

 private:
  Env& env_;
  Side side_[2];
  bool ok_ = false;
};

inline QpState StateOf(Side& s, hal::QpHandle qp) { return s.v->QueryQp(qp)->qp_state; }

inline constexpr uint64_t kSecond = 1'000'000'000;
}  // namespace ferry::conformance

#endif  // FERRY_TESTS_CONFORMANCE_RIG_H_
