// tests/sim/rnic/rnic_world.h: a small two-host world for simulated-RNIC
// tests: one Fabric, a Verbs per host, a context/PD/CQ/MR per host, and
// helpers to connect RC QP pairs, post WRITE/READ and poll.
//
// Thread safety: none (tests are single-threaded).
// What must stay true: the mutation named by the environment variable
// FERRY_MUTATION (e.g. "sim_per_qp_order_off") is applied here and only
// here, in test builds linking the *_mut libraries, so a test binary can be
// re-run with one rule broken to show which tests catch it.
#ifndef FERRY_TESTS_SIM_RNIC_RNIC_WORLD_H_
#define FERRY_TESTS_SIM_RNIC_RNIC_WORLD_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "base/mutation.h"
#include "hal/types.h"
#include "hal/verbs.h"
#include "sim/prng.h"
#include "sim/rnic/fabric.h"
#include "sim/trace.h"
#include "sim/virtual_clock.h"

namespace ferry::sim::testing {

// Applies FERRY_MUTATION=<name> (test builds only). Returns true if one was set.
inline bool ApplyEnvMutation(base::Mutations& m) {
  const char* name = std::getenv("FERRY_MUTATION");
  if (name == nullptr || *name == 0) return false;
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  for (uint32_t i = 0; i < static_cast<uint32_t>(base::Mutation::kCount); ++i) {
    const auto mu = static_cast<base::Mutation>(i);
    if (base::MutationName(mu) == std::string_view(name)) {
      m.Enable(mu);
      return true;
    }
  }
#endif
  return false;
}

inline FabricConfig TestConfig(RnicProfile p) {
  FabricConfig c;
  c.profile = p;
  ApplyEnvMutation(c.mutations);
  return c;
}

struct Side {
  hal::Verbs* v = nullptr;
  hal::ContextHandle ctx;
  hal::PdHandle pd;
  hal::CompChannelHandle ch;
  hal::CqHandle cq;
  uint32_t cqe = 0;
  std::vector<uint8_t> buf;
  hal::MrInfo mr;
};

constexpr uint32_t kAllAccess =
    hal::kAccessLocalWrite | hal::kAccessRemoteWrite | hal::kAccessRemoteRead;

class World {
 public:
  explicit World(FabricConfig cfg, uint64_t seed = 1, uint32_t cqe = 256,
                 size_t buf_bytes = 1 << 16, Trace* trace = nullptr)
      : fabric_(std::make_unique<Fabric>(std::move(cfg), Prng(seed), &clock_, trace)) {
    v_[0] = fabric_->NewVerbs(0);
    v_[1] = fabric_->NewVerbs(1);
    for (int i = 0; i < 2; ++i) {
      Side& s = side_[i];
      s.v = v_[i].get();
      s.ctx = *s.v->OpenDevice("sim0");
      s.pd = *s.v->AllocPd(s.ctx);
      s.ch = *s.v->CreateCompChannel(s.ctx);
      auto cq = *s.v->CreateCq(s.ctx, cqe, s.ch);
      s.cq = cq.cq;
      s.cqe = cq.cqe;
      s.buf.assign(buf_bytes, static_cast<uint8_t>(0x10 + i));
      s.mr = *s.v->RegMr(s.pd, s.buf.data(), s.buf.size(), kAllAccess);
    }
  }

  Fabric& fabric() { return *fabric_; }
  VirtualClock& clock() { return clock_; }
  Side& a() { return side_[0]; }
  Side& b() { return side_[1]; }
  hal::Verbs& va() { return *v_[0]; }
  hal::Verbs& vb() { return *v_[1]; }

  hal::QpInfo MakeQp(Side& s, uint32_t depth = 64, hal::CqHandle cq = {}) {
    hal::QpInitAttr init;
    init.send_cq = cq.valid() ? cq : s.cq;
    init.recv_cq = init.send_cq;
    init.cap.max_send_wr = depth;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 2;
    auto qp = s.v->CreateQp(s.pd, init);
    FERRY_CHECK(qp.ok());
    return *qp;
  }

  static absl::Status ToInit(Side& s, hal::QpHandle qp) {
    hal::QpAttr a;
    a.qp_state = hal::QpState::kInit;
    a.port_num = 1;
    a.qp_access_flags = kAllAccess;
    return s.v->ModifyQp(qp, a,
                         hal::kQpState | hal::kQpPkeyIndex | hal::kQpPort | hal::kQpAccessFlags);
  }
  absl::Status ToRtr(Side& s, hal::QpHandle qp, const Side& peer, uint32_t peer_qpn,
                     uint32_t rq_psn, uint8_t min_rnr_timer = 12) {
    hal::QpAttr a;
    a.qp_state = hal::QpState::kRtr;
    a.min_rnr_timer = min_rnr_timer;
    a.path_mtu = hal::Mtu::k1024;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = rq_psn;
    a.ah_attr.dgid = *peer.v->QueryGid(peer.ctx, 1, 0);
    return s.v->ModifyQp(qp, a,
                         hal::kQpState | hal::kQpAv | hal::kQpPathMtu | hal::kQpDestQpn |
                             hal::kQpRqPsn | hal::kQpMaxDestRdAtomic | hal::kQpMinRnrTimer);
  }
  static absl::Status ToRts(Side& s, hal::QpHandle qp, uint32_t sq_psn, uint8_t timeout = 14,
                            uint8_t retry = 7, uint8_t rnr_retry = 7, uint8_t rd_atomic = 1) {
    hal::QpAttr a;
    a.qp_state = hal::QpState::kRts;
    a.max_rd_atomic = rd_atomic;
    a.rnr_retry = rnr_retry;
    a.sq_psn = sq_psn;
    a.timeout = timeout;
    a.retry_cnt = retry;
    return s.v->ModifyQp(qp, a,
                         hal::kQpState | hal::kQpSqPsn | hal::kQpMaxQpRdAtomic | hal::kQpRetryCnt |
                             hal::kQpRnrRetry | hal::kQpTimeout);
  }

  struct Pair {
    hal::QpInfo a, b;
  };
  // QP a on host 0 -> QP b on host 1; both RTS unless told otherwise.
  Pair Connect(uint32_t depth = 64, uint8_t timeout = 14, uint8_t retry = 7,
               bool b_stays_in_init = false, hal::CqHandle cq_a = {}) {
    Pair p{MakeQp(a(), depth, cq_a), MakeQp(b(), depth)};
    FERRY_CHECK(ToInit(a(), p.a.qp).ok());
    FERRY_CHECK(ToInit(b(), p.b.qp).ok());
    FERRY_CHECK(ToRtr(a(), p.a.qp, b(), p.b.qp_num, 0x500).ok());
    FERRY_CHECK(ToRts(a(), p.a.qp, 0x100, timeout, retry, 7, rd_atomic_).ok());
    if (!b_stays_in_init) {
      FERRY_CHECK(ToRtr(b(), p.b.qp, a(), p.a.qp_num, 0x100).ok());
      FERRY_CHECK(ToRts(b(), p.b.qp, 0x500, timeout, retry).ok());
    }
    return p;
  }

  // QP a -> QP b with chosen PSNs (timeout 10, retry_cnt 2): a sends from
  // a_sq_psn, b expects b_rq_psn; b sends from 0x2000, a expects it. When
  // the two differ the pair is mispaired (a ground-truth violation).
  Pair ConnectWithPsns(uint32_t a_sq_psn, uint32_t b_rq_psn) {
    Pair p{MakeQp(a()), MakeQp(b())};
    FERRY_CHECK(ToInit(a(), p.a.qp).ok());
    FERRY_CHECK(ToInit(b(), p.b.qp).ok());
    FERRY_CHECK(ToRtr(a(), p.a.qp, b(), p.b.qp_num, 0x2000).ok());
    FERRY_CHECK(ToRts(a(), p.a.qp, a_sq_psn, 10, 2).ok());
    FERRY_CHECK(ToRtr(b(), p.b.qp, a(), p.a.qp_num, b_rq_psn).ok());
    FERRY_CHECK(ToRts(b(), p.b.qp, 0x2000, 10, 2).ok());
    return p;
  }

  hal::SendWr Write(uint64_t wr_id, uint64_t local_off, uint64_t remote_off, uint32_t len,
                    bool signaled = true) {
    return Wr(hal::Opcode::kRdmaWrite, wr_id, local_off, remote_off, len, signaled);
  }
  hal::SendWr Read(uint64_t wr_id, uint64_t local_off, uint64_t remote_off, uint32_t len,
                   bool signaled = true) {
    return Wr(hal::Opcode::kRdmaRead, wr_id, local_off, remote_off, len, signaled);
  }
  hal::SendWr Wr(hal::Opcode op, uint64_t wr_id, uint64_t local_off, uint64_t remote_off,
                 uint32_t len, bool signaled) {
    hal::SendWr w;
    w.wr_id = wr_id;
    w.opcode = op;
    w.send_flags = signaled ? uint32_t{hal::kSendSignaled} : 0u;
    w.num_sge = 1;
    w.sg_list[0] =
        hal::Sge{reinterpret_cast<uint64_t>(a().buf.data()) + local_off, len, a().mr.lkey};
    w.remote_addr = reinterpret_cast<uint64_t>(b().buf.data()) + remote_off;
    w.rkey = b().mr.rkey;
    return w;
  }

  // max_rd_atomic of the QPs Connect makes on host 0 (1 unless set).
  void set_rd_atomic(uint8_t n) { rd_atomic_ = n; }

  // Polls `s`'s CQ until `n` CQEs arrived or `budget_ns` of virtual time passed.
  std::vector<hal::WorkCompletion> PollN(Side& s, size_t n, uint64_t budget_ns = 2'000'000'000,
                                         hal::CqHandle cq = {}) {
    std::vector<hal::WorkCompletion> out;
    const uint64_t end = clock_.NowNs() + budget_ns;
    hal::WorkCompletion wc[32];
    for (int guard = 0; guard < 1'000'000 && out.size() < n; ++guard) {
      auto got = s.v->PollCq(cq.valid() ? cq : s.cq, absl::MakeSpan(wc, 32));
      if (!got.ok()) break;
      for (uint32_t i = 0; i < *got; ++i) out.push_back(wc[i]);
      if (out.size() >= n) break;
      auto next = fabric_->NextWakeNs();
      if (!next.has_value() || *next > end) break;
      fabric_->RunUntil(*next);
    }
    return out;
  }

 private:
  VirtualClock clock_;
  std::unique_ptr<Fabric> fabric_;
  uint8_t rd_atomic_ = 1;
  std::unique_ptr<hal::Verbs> v_[2];
  Side side_[2];
};

}  // namespace ferry::sim::testing

#endif  // FERRY_TESTS_SIM_RNIC_RNIC_WORLD_H_
