// tests/property/cq_quota_prop_test.cc: a stateful RapidCheck model of the
// CQ quota ledger (engine/cq_quota.h, contract C4).
//
// Owns: QuotaModel, a model of the ledger *and* of the hardware around it
// (each posted WR by id, which of them have a CQE sitting in the CQ, open
// polls), and one rc::state command per event the owner reports: AddQp,
// Post (Reserve, then Unreserve of the WRs post_send rejected), a CQE
// appearing in the CQ, MarkRetiring, destroy OK / destroy failed, a poll
// started, a poll finished (empty or returning CQEs, each released), a stray
// CQE (forgotten QP or beyond what it holds) and CQ_ERR recovery
// (ResetForRecreatedCq). After every command the ledger must equal the
// model: reserved == number of WRs whose quota is held (never negative,
// never past the CQ size), zombie quota and ZombieOverCap, per-QP held and
// tracked, stray count, CheckInvariants() OK. Quota comes back exactly once
// per WR: by its CQE, by post_send rejecting it, or (QP destroyed OK) by the
// first empty poll that *started after* destroy returned; a failed destroy
// keeps it. At the end every QP is destroyed and the CQ polled empty: the
// ledger must be back to zero with every reserved WR released once.
// What must stay true: the hardware model never produces a CQE for a QP
// after its successful destroy, and an empty poll means the CQ held none.
// FERRY_MUTATION=engine_c4_double_release makes the property fail (meson
// test property_cq_quota_mut_c4_double_release expects that).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <vector>

#include "absl/status/status.h"
#include "engine/cq_quota.h"
#include "tests/property/prop_env.h"

namespace ferry::engine {
namespace {

using absl::StatusCode;

constexpr size_t kQpsMax = 6;
constexpr size_t kOpenPollsMax = 3;

struct QpM {
  uint64_t id = 0;
  bool tracked = true;
  QuotaQpState state = QuotaQpState::kLive;
  uint64_t destroy_seq = 0;
};
struct WrM {
  uint64_t id = 0;
  uint64_t qp = 0;
  bool cqe_in_cq = false;
};

struct QuotaModel {
  uint32_t capacity = 0;
  uint32_t zombie_max = 0;
  std::vector<QpM> qps;           // every QP ever added; id == index + 1
  std::vector<WrM> held;          // WRs whose quota is held
  std::vector<uint64_t> cq;       // WR ids whose CQE is in the CQ (FIFO)
  std::vector<uint64_t> tickets;  // open polls: seq when each started
  uint64_t seq = 0;               // orders destroys and poll starts
  uint64_t next_wr = 1;
  uint64_t stray = 0;
  uint64_t reserved_total = 0;  // WRs ever posted (quota kept past post_send)
  uint64_t released_total = 0;  // WRs whose quota came back

  const QpM& qp(uint64_t id) const { return qps.at(id - 1); }
  QpM& qp(uint64_t id) { return qps.at(id - 1); }
  int64_t HeldBy(uint64_t id) const {
    int64_t n = 0;
    for (const WrM& w : held) n += w.qp == id ? 1 : 0;
    return n;
  }
  int64_t Zombie() const {
    int64_t n = 0;
    for (const WrM& w : held) n += qp(w.qp).state != QuotaQpState::kLive ? 1 : 0;
    return n;
  }
  // Returns the quota of WR `wr` (exactly once: it leaves `held`).
  void Release(uint64_t wr) {
    auto it = std::find_if(held.begin(), held.end(), [&](const WrM& w) { return w.id == wr; });
    FERRY_CHECK(it != held.end());
    held.erase(it);
    ++released_total;
  }
  void Forget(uint64_t id) {
    for (size_t i = held.size(); i > 0; --i) {
      if (held[i - 1].qp == id) Release(held[i - 1].id);
    }
    qp(id).tracked = false;
  }
};

struct QuotaSut {
  QuotaSut(uint32_t capacity, uint32_t zombie_max)
      : q(capacity, zombie_max, &mutations, /*check_every_op=*/false) {}
  base::Mutations mutations;  // before q, which keeps a pointer to it
  CqQuota q;
  std::vector<uint64_t> tickets;  // the ledger's tickets, parallel to the model's
  // Coverage counters (what a case exercised), reported with RC_CLASSIFY.
  int forgot_with_quota = 0;  // an empty poll returned a destroyed QP's quota
  int kept_by_old_poll = 0;   // an empty poll that started before a destroy kept it
  int exhausted = 0;          // Reserve refused at the CQ size
  int failed_destroys = 0;    // destroy failed: quota kept
  int resets = 0;             // CQ_ERR recovery succeeded
};

using Cmd = rc::state::Command<QuotaModel, QuotaSut>;

// The ledger equals the model.
void ExpectSame(const QuotaSut& sut, const QuotaModel& m) {
  const CqQuota& q = sut.q;
  RC_ASSERT(q.CheckInvariants().ok());
  RC_ASSERT(q.capacity() == m.capacity);
  RC_ASSERT(q.reserved() >= 0);
  RC_ASSERT(q.reserved() <= int64_t{q.capacity()});
  RC_ASSERT(q.reserved() == static_cast<int64_t>(m.held.size()));
  RC_ASSERT(q.reserved() == static_cast<int64_t>(m.reserved_total - m.released_total));
  RC_ASSERT(q.free() == int64_t{m.capacity} - static_cast<int64_t>(m.held.size()));
  RC_ASSERT(q.zombie_held() == m.Zombie());
  RC_ASSERT(q.ZombieOverCap() == (m.Zombie() > int64_t{m.zombie_max}));
  RC_ASSERT(q.stray_cqes() == m.stray);
  size_t tracked = 0;
  for (const QpM& p : m.qps) {
    RC_ASSERT(q.tracked(hal::QpHandle{p.id}) == p.tracked);
    RC_ASSERT(q.held(hal::QpHandle{p.id}) == m.HeldBy(p.id));
    tracked += p.tracked ? 1 : 0;
  }
  RC_ASSERT(q.tracked_qps() == tracked);
}

// Runs `cmd` against the model copy and compares.
template <typename C>
void Check(const C& cmd, const QuotaModel& s0, const QuotaSut& sut) {
  QuotaModel s1 = s0;
  cmd.apply(s1);
  ExpectSame(sut, s1);
}

uint64_t PickQp(const QuotaModel& s) {
  RC_PRE(!s.qps.empty());
  return *rc::gen::inRange<uint64_t>(1, s.qps.size() + 1);
}
void PreQp(const QuotaModel& s, uint64_t qp) { RC_PRE(qp >= 1 && qp <= s.qps.size()); }

struct AddQp : Cmd {
  void checkPreconditions(const QuotaModel& s) const override { RC_PRE(s.qps.size() < kQpsMax); }
  void apply(QuotaModel& s) const override { s.qps.push_back(QpM{s.qps.size() + 1}); }
  void run(const QuotaModel& s0, QuotaSut& sut) const override {
    RC_ASSERT(sut.q.AddQp(hal::QpHandle{s0.qps.size() + 1}).ok());
    RC_ASSERT(sut.q.AddQp(hal::QpHandle{s0.qps.size() + 1}).code() == StatusCode::kAlreadyExists);
    Check(*this, s0, sut);
  }
  void show(std::ostream& os) const override { os << "AddQp"; }
};

struct Post : Cmd {
  uint64_t qp;
  uint32_t n = *rc::gen::inRange<uint32_t>(1, 5);
  uint32_t rejected;
  explicit Post(const QuotaModel& s)
      : qp(PickQp(s)), rejected(*rc::gen::inRange<uint32_t>(0, n + 1)) {}
  StatusCode Expected(const QuotaModel& s) const {
    const QpM& p = s.qp(qp);
    if (!p.tracked) return StatusCode::kNotFound;
    if (p.state != QuotaQpState::kLive) return StatusCode::kFailedPrecondition;
    if (s.held.size() + n > s.capacity) return StatusCode::kResourceExhausted;
    return StatusCode::kOk;
  }
  void checkPreconditions(const QuotaModel& s) const override { PreQp(s, qp); }
  void apply(QuotaModel& s) const override {
    if (Expected(s) != StatusCode::kOk) return;
    for (uint32_t i = rejected; i < n; ++i) {
      s.held.push_back(WrM{s.next_wr++, qp, false});
      ++s.reserved_total;
    }
  }
  void run(const QuotaModel& s0, QuotaSut& sut) const override {
    const StatusCode want = Expected(s0);
    RC_ASSERT(sut.q.Reserve(hal::QpHandle{qp}, n).code() == want);
    if (want == StatusCode::kResourceExhausted) ++sut.exhausted;
    if (want == StatusCode::kOk) {
      // More than was reserved is refused and changes nothing.
      RC_ASSERT(
          sut.q.Unreserve(hal::QpHandle{qp}, static_cast<uint32_t>(s0.HeldBy(qp)) + n + 1).code() ==
          StatusCode::kFailedPrecondition);
      RC_ASSERT(sut.q.Unreserve(hal::QpHandle{qp}, rejected).ok());
    }
    Check(*this, s0, sut);
  }
  void show(std::ostream& os) const override {
    os << "Post(qp=" << qp << ", n=" << n << ", rejected=" << rejected << ")";
  }
};

// The hardware completes one posted WR (success, error or flush): its CQE
// is now in the CQ. Never for a QP destroyed OK.
struct CqeArrives : Cmd {
  uint64_t wr;
  static std::vector<uint64_t> Candidates(const QuotaModel& s) {
    std::vector<uint64_t> c;
    for (const WrM& w : s.held)
      if (!w.cqe_in_cq && s.qp(w.qp).state != QuotaQpState::kDestroyed) c.push_back(w.id);
    return c;
  }
  explicit CqeArrives(const QuotaModel& s) {
    const auto c = Candidates(s);
    RC_PRE(!c.empty());
    wr = *rc::gen::elementOf(c);
  }
  void checkPreconditions(const QuotaModel& s) const override {
    const auto c = Candidates(s);
    RC_PRE(std::find(c.begin(), c.end(), wr) != c.end());
  }
  void apply(QuotaModel& s) const override {
    for (WrM& w : s.held)
      if (w.id == wr) w.cqe_in_cq = true;
    s.cq.push_back(wr);
  }
  void run(const QuotaModel& s0, QuotaSut& sut) const override { Check(*this, s0, sut); }
  void show(std::ostream& os) const override { os << "CqeArrives(wr=" << wr << ")"; }
};

struct MarkRetiring : Cmd {
  uint64_t qp;
  explicit MarkRetiring(const QuotaModel& s) : qp(PickQp(s)) {}
  void checkPreconditions(const QuotaModel& s) const override { PreQp(s, qp); }
  void apply(QuotaModel& s) const override {
    QpM& p = s.qp(qp);
    if (p.tracked && p.state == QuotaQpState::kLive) p.state = QuotaQpState::kRetiring;
  }
  void run(const QuotaModel& s0, QuotaSut& sut) const override {
    const StatusCode want = s0.qp(qp).tracked ? StatusCode::kOk : StatusCode::kNotFound;
    RC_ASSERT(sut.q.MarkRetiring(hal::QpHandle{qp}).code() == want);
    Check(*this, s0, sut);
  }
  void show(std::ostream& os) const override { os << "MarkRetiring(qp=" << qp << ")"; }
};

struct Destroy : Cmd {
  uint64_t qp;
  bool ok = *rc::gen::arbitrary<bool>();
  explicit Destroy(const QuotaModel& s) : qp(PickQp(s)) {}
  StatusCode Expected(const QuotaModel& s) const {
    const QpM& p = s.qp(qp);
    if (!p.tracked) return StatusCode::kNotFound;
    if (p.state == QuotaQpState::kDestroyed) return StatusCode::kFailedPrecondition;
    return StatusCode::kOk;
  }
  void checkPreconditions(const QuotaModel& s) const override { PreQp(s, qp); }
  void apply(QuotaModel& s) const override {
    if (Expected(s) != StatusCode::kOk) return;
    QpM& p = s.qp(qp);
    if (ok) {
      p.state = QuotaQpState::kDestroyed;
      p.destroy_seq = ++s.seq;
    } else {
      p.state = QuotaQpState::kRetiring;  // keeps its quota
    }
  }
  void run(const QuotaModel& s0, QuotaSut& sut) const override {
    RC_ASSERT(sut.q.OnDestroyResult(hal::QpHandle{qp}, ok).code() == Expected(s0));
    if (!ok && Expected(s0) == StatusCode::kOk) ++sut.failed_destroys;
    Check(*this, s0, sut);
  }
  void show(std::ostream& os) const override {
    os << "Destroy(qp=" << qp << ", " << (ok ? "OK" : "failed") << ")";
  }
};

struct PollBegin : Cmd {
  void checkPreconditions(const QuotaModel& s) const override {
    RC_PRE(s.tickets.size() < kOpenPollsMax);
  }
  void apply(QuotaModel& s) const override { s.tickets.push_back(++s.seq); }
  void run(const QuotaModel& s0, QuotaSut& sut) const override {
    sut.tickets.push_back(sut.q.PollStarted());
    Check(*this, s0, sut);
  }
  void show(std::ostream& os) const override { os << "PollBegin"; }
};

// Finishes open poll `which`, which returns min(max_n, CQEs in the CQ)
// CQEs (0 only when the CQ is empty); the owner releases each.
struct PollEnd : Cmd {
  size_t which;
  size_t max_n = *rc::gen::inRange<size_t>(1, 5);
  explicit PollEnd(const QuotaModel& s) {
    RC_PRE(!s.tickets.empty());
    which = *rc::gen::inRange<size_t>(0, s.tickets.size());
  }
  size_t Delivered(const QuotaModel& s) const { return std::min(max_n, s.cq.size()); }
  // QPs an empty poll forgets: destroyed before the poll started.
  std::vector<uint64_t> Forgotten(const QuotaModel& s) const {
    std::vector<uint64_t> out;
    if (Delivered(s) != 0) return out;
    for (const QpM& p : s.qps)
      if (p.tracked && p.state == QuotaQpState::kDestroyed && p.destroy_seq < s.tickets[which])
        out.push_back(p.id);
    return out;
  }
  void checkPreconditions(const QuotaModel& s) const override { RC_PRE(which < s.tickets.size()); }
  void apply(QuotaModel& s) const override {
    const size_t k = Delivered(s);
    for (uint64_t id : Forgotten(s)) s.Forget(id);
    for (size_t i = 0; i < k; ++i) s.Release(s.cq[i]);
    s.cq.erase(s.cq.begin(), s.cq.begin() + static_cast<ptrdiff_t>(k));
    s.tickets.erase(s.tickets.begin() + static_cast<ptrdiff_t>(which));
  }
  void run(const QuotaModel& s0, QuotaSut& sut) const override {
    const size_t k = Delivered(s0);
    const auto r = sut.q.PollFinished(sut.tickets[which], static_cast<uint32_t>(k));
    RC_ASSERT(r.ok());
    std::vector<uint64_t> got;
    for (hal::QpHandle h : *r) got.push_back(h.id);
    RC_ASSERT(got == Forgotten(s0));
    for (uint64_t id : got) sut.forgot_with_quota += s0.HeldBy(id) > 0 ? 1 : 0;
    if (k == 0) {
      for (const QpM& p : s0.qps)
        if (p.tracked && p.state == QuotaQpState::kDestroyed && p.destroy_seq > s0.tickets[which] &&
            s0.HeldBy(p.id) > 0)
          ++sut.kept_by_old_poll;
    }
    for (size_t i = 0; i < k; ++i) {
      uint64_t qp = 0;
      for (const WrM& w : s0.held)
        if (w.id == s0.cq[i]) qp = w.qp;
      RC_ASSERT(sut.q.ReleaseOnCqe(hal::QpHandle{qp}).ok());
    }
    sut.tickets.erase(sut.tickets.begin() + static_cast<ptrdiff_t>(which));
    Check(*this, s0, sut);
  }
  void show(std::ostream& os) const override {
    os << "PollEnd(open poll #" << which << ", max " << max_n << ")";
  }
};

// A CQE for a QP that holds nothing here (forgotten, or beyond its WRs):
// counted, changes nothing.
struct StrayCqe : Cmd {
  uint64_t qp;
  explicit StrayCqe(const QuotaModel& s) : qp(PickQp(s)) {}
  void checkPreconditions(const QuotaModel& s) const override {
    PreQp(s, qp);
    RC_PRE(!s.qp(qp).tracked || s.HeldBy(qp) == 0);
  }
  void apply(QuotaModel& s) const override { ++s.stray; }
  void run(const QuotaModel& s0, QuotaSut& sut) const override {
    const StatusCode want =
        s0.qp(qp).tracked ? StatusCode::kFailedPrecondition : StatusCode::kNotFound;
    RC_ASSERT(sut.q.ReleaseOnCqe(hal::QpHandle{qp}).code() == want);
    // A forgotten QP's late destroy report or retire changes nothing either.
    if (!s0.qp(qp).tracked) {
      RC_ASSERT(sut.q.OnDestroyResult(hal::QpHandle{qp}, true).code() == StatusCode::kNotFound);
      RC_ASSERT(sut.q.MarkRetiring(hal::QpHandle{qp}).code() == StatusCode::kNotFound);
    }
    Check(*this, s0, sut);
  }
  void show(std::ostream& os) const override { os << "StrayCqe(qp=" << qp << ")"; }
};

// CQ_ERR recovery: the CQ's CQEs are lost; allowed only when every tracked
// QP is destroyed.
struct ResetCq : Cmd {
  uint32_t capacity = *rc::gen::inRange<uint32_t>(0, 17);
  // Only once a QP exists (a reset of an unused CQ exercises nothing).
  void checkPreconditions(const QuotaModel& s) const override { RC_PRE(!s.qps.empty()); }
  StatusCode Expected(const QuotaModel& s) const {
    if (capacity == 0 || capacity < s.zombie_max) return StatusCode::kInvalidArgument;
    for (const QpM& p : s.qps)
      if (p.tracked && p.state != QuotaQpState::kDestroyed) return StatusCode::kFailedPrecondition;
    return StatusCode::kOk;
  }
  void apply(QuotaModel& s) const override {
    if (Expected(s) != StatusCode::kOk) return;
    for (const QpM& p : s.qps)
      if (p.tracked) s.Forget(p.id);
    s.cq.clear();
    s.capacity = capacity;
  }
  void run(const QuotaModel& s0, QuotaSut& sut) const override {
    const StatusCode want = Expected(s0);
    const auto r = sut.q.ResetForRecreatedCq(capacity);
    RC_ASSERT(r.status().code() == want);
    if (want == StatusCode::kOk) {
      std::vector<uint64_t> expect;
      for (const QpM& p : s0.qps)
        if (p.tracked) expect.push_back(p.id);
      std::vector<uint64_t> got;
      for (hal::QpHandle h : *r) got.push_back(h.id);
      RC_ASSERT(got == expect);
      ++sut.resets;
    }
    Check(*this, s0, sut);
  }
  void show(std::ostream& os) const override { os << "ResetCq(capacity=" << capacity << ")"; }
};

// Destroys every QP, drains the CQ and polls it empty: the ledger must be
// back to zero, every reserved WR released once.
void DrainToZero(QuotaModel& m, QuotaSut& sut) {
  for (QpM& p : m.qps) {
    if (!p.tracked || p.state == QuotaQpState::kDestroyed) continue;
    RC_ASSERT(sut.q.OnDestroyResult(hal::QpHandle{p.id}, true).ok());
    p.state = QuotaQpState::kDestroyed;
    p.destroy_seq = ++m.seq;
  }
  const uint64_t t1 = sut.q.PollStarted();
  const auto r1 = sut.q.PollFinished(t1, static_cast<uint32_t>(m.cq.size()));
  RC_ASSERT(r1.ok());
  if (!m.cq.empty()) {
    RC_ASSERT(r1->empty());  // not an empty poll: nothing forgotten
  } else {
    std::vector<uint64_t> want;
    for (const QpM& p : m.qps)
      if (p.tracked) want.push_back(p.id);
    std::vector<uint64_t> got;
    for (const hal::QpHandle h : *r1) got.push_back(h.id);
    RC_ASSERT(got == want);
    for (uint64_t id : got) m.Forget(id);
  }
  for (uint64_t wr : m.cq) {
    uint64_t qp = 0;
    for (const WrM& w : m.held)
      if (w.id == wr) qp = w.qp;
    RC_ASSERT(sut.q.ReleaseOnCqe(hal::QpHandle{qp}).ok());
    m.Release(wr);
  }
  m.cq.clear();
  const uint64_t t2 = sut.q.PollStarted();
  RC_ASSERT(sut.q.PollFinished(t2, 0).ok());
  for (QpM& p : m.qps)
    if (p.tracked) m.Forget(p.id);
  RC_ASSERT(sut.q.reserved() == 0);
  RC_ASSERT(sut.q.zombie_held() == 0);
  RC_ASSERT(sut.q.tracked_qps() == 0u);
  RC_ASSERT(m.released_total == m.reserved_total);
  RC_ASSERT(sut.q.CheckInvariants().ok());
}

RC_GTEST_PROP(CqQuotaProp, LedgerMatchesTheModel, ()) {
  QuotaModel m0;
  m0.capacity = *rc::gen::inRange<uint32_t>(1, 13);
  m0.zombie_max = *rc::gen::inRange<uint32_t>(0, m0.capacity + 1);
  QuotaSut sut(m0.capacity, m0.zombie_max);
  property::ApplyEnvMutation(sut.mutations);
  const auto cmds = *rc::state::gen::commands(
      m0, rc::state::gen::execOneOfWithArgs<AddQp, AddQp, Post, Post, Post, Post, CqeArrives,
                                            CqeArrives, CqeArrives, MarkRetiring, Destroy, Destroy,
                                            Destroy, PollBegin, PollBegin, PollEnd, PollEnd,
                                            PollEnd, StrayCqe, ResetCq>());
  rc::state::runAll(cmds, m0, sut);
  QuotaModel m = m0;
  rc::state::applyAll(cmds, m);
  ExpectSame(sut, m);
  RC_CLASSIFY(m.reserved_total > 0, "posted");
  RC_CLASSIFY(sut.exhausted > 0, "reserve refused at CQ size");
  RC_CLASSIFY(sut.failed_destroys > 0, "failed destroy kept quota");
  RC_CLASSIFY(sut.forgot_with_quota > 0, "empty poll returned a destroyed QP's quota");
  RC_CLASSIFY(sut.kept_by_old_poll > 0, "empty poll started before destroy kept quota");
  RC_CLASSIFY(sut.resets > 0, "CQ_ERR reset");
  DrainToZero(m, sut);
}

}  // namespace
}  // namespace ferry::engine
