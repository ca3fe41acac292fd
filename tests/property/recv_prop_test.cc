// tests/property/recv_prop_test.cc: a RapidCheck property over the
// simulated RNIC's receive side (sim/rnic/fabric_recv.cc), both profiles.
//
// Owns: a random program on one RC pair A -> B: post receive WRs on B (0 to
// 4 KiB, each its own buffer), SENDs and WRITEs with immediate from A (0 to
// 3000 B, each its own pattern and immediate), time passing, link flaps of
// A's port (lost ACKs: duplicates), scripted recv_drop and rnr_storm, with
// rnr_retry 7 or 0..3. B's CQ is polled after every event of the fabric,
// so a receive CQE is judged the moment it can first be polled. At the end
// the world settles and both CQs are drained.
// What must stay true (each check fails with its own message, which the
// meson *_mut_* tests of the sim's receive rules expect):
// - "receive CQE before its data": a SEND's receive CQE is polled only when
//   its bytes are in its buffer;
// - "receive order": messages and receive WRs pair in order; message i, if
//   delivered, completes receive WR i with its opcode, length, immediate;
// - "delivered twice": B has at most as many successful receives as A has
//   successful messages once both CQs are drained;
// - "too long": a SEND longer than its receive WR fails both sides (the
//   profile's statuses) and every later receive WR of B flushes;
// - "rnr not exhausted": with rnr_retry < 7, a message that never gets a
//   receive WR has failed by the end of the settle;
// - "recv depth": post_recv beyond the queue's depth is refused.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/rnic/fabric.h"
#include "sim/rnic/fault_plan.h"
#include "tests/property/prop_env.h"
#include "tests/sim/rnic/rnic_world.h"

namespace ferry::sim::testing {
namespace {

constexpr uint32_t kRecvDepth = 16;  // asked; the profile rounds it
constexpr uint64_t kSlot = 4096;     // one buffer per receive WR / message
constexpr uint32_t kOpsMax = 40;

enum class OpKind : uint8_t { kPostRecv, kSend, kWriteImm, kWait, kFlap, kDrop, kStorm };

struct Op {
  OpKind kind = OpKind::kWait;
  uint32_t len = 0;  // bytes (receive WR, SEND, WRITE) or ns (wait, flap, storm)
};

struct Msg {
  bool send = true;
  uint32_t len = 0;
  uint32_t imm = 0;
  uint64_t src_off = 0;
};

struct Run {
  World w;
  World::Pair p;
  uint32_t depth = 0;
  std::vector<uint32_t> recv_len;   // receive WR i's buffer length
  std::vector<size_t> recv_before;  // messages posted before receive WR i was
  std::vector<Msg> msgs;
  std::vector<hal::WorkCompletion> a_cqes, b_cqes;

  explicit Run(FabricConfig cfg) : w(std::move(cfg), /*seed=*/3, /*cqe=*/512, 4 << 20) {}
};

FabricConfig ConfigFor(RnicProfile profile) {
  FabricConfig c;
  c.profile = profile;
  property::ApplyEnvMutation(c.mutations);
  return c;
}

// A -> B with B's receive queue and A's rnr_retry; B's min_rnr_timer 1.
void Connect(Run& r, uint8_t rnr_retry) {
  World& w = r.w;
  auto make = [](Side& s) {
    hal::QpInitAttr init;
    init.send_cq = init.recv_cq = s.cq;
    init.cap.max_send_wr = 64;
    init.cap.max_recv_wr = kRecvDepth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    return *s.v->CreateQp(s.pd, init);
  };
  r.p = World::Pair{make(w.a()), make(w.b())};
  FERRY_CHECK(World::ToInit(w.a(), r.p.a.qp).ok());
  FERRY_CHECK(World::ToInit(w.b(), r.p.b.qp).ok());
  FERRY_CHECK(w.ToRtr(w.a(), r.p.a.qp, w.b(), r.p.b.qp_num, 0x500).ok());
  // retry_cnt 6: rxe retries forever at 7, and a lost NAK would leave A
  // pending for good.
  FERRY_CHECK(World::ToRts(w.a(), r.p.a.qp, 0x100, 8, 6, rnr_retry).ok());
  FERRY_CHECK(w.ToRtr(w.b(), r.p.b.qp, w.a(), r.p.a.qp_num, 0x100, /*min_rnr_timer=*/1).ok());
  FERRY_CHECK(World::ToRts(w.b(), r.p.b.qp, 0x500, 8, 7).ok());
  r.depth = w.b().v->QueryQp(r.p.b.qp)->cap.max_recv_wr;
}

uint8_t Pattern(size_t msg, uint64_t i) { return static_cast<uint8_t>(0x21 + msg * 31 + i * 7); }

// Polls B's CQ; each new successful SEND receive must find its bytes.
uint32_t Matching(const uint8_t* got, size_t msg, uint32_t len) {
  uint32_t n = 0;
  for (uint32_t j = 0; j < len; ++j) n += got[j] == Pattern(msg, j) ? 1 : 0;
  return n;
}

// Polls B's CQ; a new successful SEND receive is judged at once: it fits
// its receive WR, is not an earlier message again, and its bytes are there.
void PollB(Run& r) {
  hal::WorkCompletion wc[16];
  auto n = r.w.b().v->PollCq(r.w.b().cq, absl::MakeSpan(wc, 16));
  if (!n.ok()) return;
  for (uint32_t k = 0; k < *n; ++k) {
    const size_t i = r.b_cqes.size();
    r.b_cqes.push_back(wc[k]);
    if (wc[k].status != hal::WcStatus::kSuccess || wc[k].opcode != hal::Opcode::kRecv) continue;
    if (i < r.recv_len.size() && wc[k].byte_len > r.recv_len[i]) {
      RC_FAIL("too long: message " + std::to_string(i) + " of " + std::to_string(wc[k].byte_len) +
              " B completed into a receive WR of " + std::to_string(r.recv_len[i]) + " B");
    }
    if (i >= r.msgs.size() || !r.msgs[i].send) continue;  // judged at the end
    const uint8_t* got = r.w.b().buf.data() + (512 + i) * kSlot;
    const uint32_t len = r.msgs[i].len;
    if (i > 0 && r.msgs[i - 1].send && wc[k].byte_len == r.msgs[i - 1].len && wc[k].byte_len > 0 &&
        Matching(got, i - 1, wc[k].byte_len) == wc[k].byte_len && Matching(got, i, len) != len) {
      RC_FAIL("delivered twice: receive " + std::to_string(i) + " holds message " +
              std::to_string(i - 1));
    }
    if (const uint32_t placed = Matching(got, i, len); placed != len) {
      RC_FAIL("receive CQE before its data: message " + std::to_string(i) + ", " +
              std::to_string(placed) + " of " + std::to_string(len) + " bytes");
    }
  }
}

void Advance(Run& r, uint64_t ns) {
  const uint64_t end = r.w.fabric().NowNs() + ns;
  for (int guard = 0; guard < 200000; ++guard) {
    PollB(r);
    auto next = r.w.fabric().NextWakeNs();
    if (!next.has_value() || *next > end) break;
    r.w.fabric().RunUntil(*next);
  }
  r.w.fabric().RunUntil(end);
  PollB(r);
}

void Apply(Run& r, const Op& op) {
  World& w = r.w;
  switch (op.kind) {
    case OpKind::kPostRecv: {
      const size_t i = r.recv_len.size();
      if (i >= 256) return;
      const uint64_t posted_not_done = i - std::min(i, r.b_cqes.size());
      hal::RecvWr wr;
      wr.wr_id = 1000 + i;
      wr.num_sge = op.len > 0 ? 1 : 0;
      wr.sg_list[0] = hal::Sge{reinterpret_cast<uint64_t>(w.b().buf.data()) + (512 + i) * kSlot,
                               op.len, w.b().mr.lkey};
      const absl::Status st = w.b().v->PostRecv(r.p.b.qp, {&wr, 1}).status;
      if (posted_not_done >= r.depth) {
        // b_cqes counts completions polled so far: a full queue refuses.
        if (st.ok()) RC_FAIL("recv depth: post_recv beyond the queue's depth was accepted");
        return;
      }
      if (st.ok()) {
        r.recv_len.push_back(op.len);
        r.recv_before.push_back(r.msgs.size());
      }
      return;
    }
    case OpKind::kSend:
    case OpKind::kWriteImm: {
      const size_t i = r.msgs.size();
      if (i >= 200) return;
      Msg m{op.kind == OpKind::kSend, op.len, static_cast<uint32_t>(0xabc000 + i), i * kSlot};
      for (uint32_t j = 0; j < m.len; ++j) w.a().buf[m.src_off + j] = Pattern(i, j);
      hal::SendWr s = w.Wr(m.send ? hal::Opcode::kSend : hal::Opcode::kRdmaWriteWithImm, i,
                           m.src_off, m.src_off, m.len, true);
      if (m.len == 0) s.num_sge = 0;
      s.imm_data = m.imm;
      if (w.a().v->PostSend(r.p.a.qp, {&s, 1}).status.ok()) r.msgs.push_back(m);
      return;
    }
    case OpKind::kWait:
      Advance(r, op.len);
      return;
    case OpKind::kFlap:
      FERRY_CHECK(w.fabric().SetLinkUp(0, "sim0", false).ok());
      Advance(r, op.len);
      FERRY_CHECK(w.fabric().SetLinkUp(0, "sim0", true).ok());
      return;
    case OpKind::kDrop:
    case OpKind::kStorm: {
      ScriptedFault f;
      f.kind = op.kind == OpKind::kDrop ? FaultKind::kRecvDrop : FaultKind::kRnrStorm;
      f.target = FaultTarget{TargetKind::kQp, 1, "sim0", r.p.b.qp_num};
      f.duration_ns = op.kind == OpKind::kStorm ? op.len : 0;
      FERRY_CHECK(w.fabric().Inject(f).ok());
      return;
    }
  }
}

void Judge(Run& r, uint8_t rnr_retry, RnicProfile profile) {
  Advance(r, 200'000'000);  // settle: retries, RNR waits, storms end
  hal::WorkCompletion wc[64];
  for (int guard = 0; guard < 100; ++guard) {
    auto n = r.w.a().v->PollCq(r.w.a().cq, absl::MakeSpan(wc, 64));
    if (!n.ok() || *n == 0) break;
    r.a_cqes.insert(r.a_cqes.end(), wc, wc + *n);
  }
  PollB(r);
  size_t a_ok = 0;
  while (a_ok < r.a_cqes.size() && r.a_cqes[a_ok].status == hal::WcStatus::kSuccess) ++a_ok;
  size_t b_ok = 0;
  while (b_ok < r.b_cqes.size() && r.b_cqes[b_ok].status == hal::WcStatus::kSuccess) ++b_ok;
  // A sender's error does not say its message was not delivered (an ACK
  // lost, then the retries spent), but B never receives more messages
  // than A sent, and never one A did not send.
  if (b_ok > r.msgs.size()) {
    RC_FAIL("delivered twice: " + std::to_string(b_ok) + " receives for " +
            std::to_string(r.msgs.size()) + " messages");
  }
  for (size_t i = 0; i < b_ok; ++i) {
    const hal::WorkCompletion& c = r.b_cqes[i];
    const Msg& m = r.msgs[i];
    const bool good = c.wr_id == 1000 + i && c.byte_len == m.len &&
                      c.opcode == (m.send ? hal::Opcode::kRecv : hal::Opcode::kRecvRdmaWithImm) &&
                      (m.send || ((c.wc_flags & hal::kWcWithImm) != 0 && c.imm_data == m.imm));
    if (!good) RC_FAIL("receive order: receive " + std::to_string(i) + " does not match");
  }
  if (a_ok > b_ok) {
    RC_FAIL("receive order: " + std::to_string(a_ok) + " messages completed, " +
            std::to_string(b_ok) + " received");
  }
  // Past here: the first message A did not complete, when B did not
  // receive it either (else its ACK was lost and A's error says nothing).
  const size_t k = a_ok;
  if (k >= r.msgs.size() || b_ok != a_ok) return;
  const Msg& m = r.msgs[k];
  const bool too_long = m.send && k < r.recv_len.size() && m.len > r.recv_len[k];
  const bool rnr_failed =
      k < r.a_cqes.size() && r.a_cqes[k].status == hal::WcStatus::kRnrRetryExcErr;
  // A message the link lost on every try never reached B: A's retries
  // ran out (RETRY_EXC_ERR) and B still holds its receive WR.
  const bool lost = k < r.a_cqes.size() && r.a_cqes[k].status == hal::WcStatus::kRetryExcErr &&
                    r.b_cqes.size() <= k;
  if (too_long && !rnr_failed && !lost) {
    const bool rxe = profile == RnicProfile::kRxe;
    // The sender sees the NAK's status, or RETRY_EXC_ERR when a link flap
    // lost the NAK (the responder, in ERR, drops the resends).
    const hal::WcStatus nak = rxe ? hal::WcStatus::kRemOpErr : hal::WcStatus::kRemInvReqErr;
    const bool a_bad = k < r.a_cqes.size() && (r.a_cqes[k].status == nak ||
                                               r.a_cqes[k].status == hal::WcStatus::kRetryExcErr);
    const bool b_bad =
        k < r.b_cqes.size() &&
        r.b_cqes[k].status == (rxe ? hal::WcStatus::kLocQpOpErr : hal::WcStatus::kLocLenErr);
    if (!a_bad || !b_bad) {
      auto name = [](const std::vector<hal::WorkCompletion>& v, size_t i) {
        return i < v.size() ? std::string(hal::WcStatusName(v[i].status)) : std::string("none");
      };
      RC_FAIL("too long: message " + std::to_string(k) + " not refused (sender " +
              name(r.a_cqes, k) + ", receiver " + name(r.b_cqes, k) + ")");
    }
    // Every receive WR posted before the error flushes (mlx5 flushes
    // later ones at once too; rxe keeps those until the next ERR).
    size_t owed = 0;
    for (size_t i = 0; i < r.recv_len.size(); ++i) {
      if (!rxe || r.recv_before[i] <= k) ++owed;
    }
    if (r.b_cqes.size() < owed) {
      RC_FAIL("too long: " + std::to_string(owed - r.b_cqes.size()) + " receive WRs not flushed");
    }
    return;
  }
  if (k >= r.recv_len.size() && rnr_retry < 7 && r.a_cqes.size() <= k) {
    RC_FAIL("rnr not exhausted: message " + std::to_string(k) + " without a receive WR pending");
  }
}

Op GenOpValue(uint32_t kind, uint32_t size) {
  static constexpr uint32_t kLens[] = {0, 64, 1000, 3000, 4096};
  static constexpr uint32_t kNs[] = {1'000, 50'000, 2'000'000};
  Op op;
  op.kind = static_cast<OpKind>(kind);
  const bool is_time =
      op.kind == OpKind::kWait || op.kind == OpKind::kFlap || op.kind == OpKind::kStorm;
  op.len = is_time ? kNs[size % 3] : kLens[size % 5];
  if (op.kind == OpKind::kSend || op.kind == OpKind::kWriteImm) op.len = std::min(op.len, 3000u);
  return op;
}

RC_GTEST_PROP(RecvProp, ReceiveSideRules, ()) {
  const auto profile = *rc::gen::element(RnicProfile::kMlx5, RnicProfile::kRxe);
  const auto rnr_retry = *rc::gen::element<uint8_t>(7, 7, 0, 1, 3);
  const auto n = *rc::gen::inRange<uint32_t>(1, kOpsMax);
  std::vector<Op> ops;
  for (uint32_t i = 0; i < n; ++i) {
    const auto kind = *rc::gen::weightedElement<uint32_t>(
        {{6, 0}, {4, 1}, {3, 2}, {3, 3}, {1, 4}, {1, 5}, {1, 6}});
    ops.push_back(GenOpValue(kind, *rc::gen::inRange<uint32_t>(0, 15)));
  }
  Run r(ConfigFor(profile));
  Connect(r, rnr_retry);
  for (const Op& op : ops) Apply(r, op);
  Judge(r, rnr_retry, profile);
}

}  // namespace
}  // namespace ferry::sim::testing
