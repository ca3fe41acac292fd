// fuzz/fault_schedule_body.cc: FaultScheduleFuzzOne (fuzz/fault_schedule_fuzz.h),
// the input decoder and the run it drives on the two-host simulated world.
//
// What must stay true: every operation's arguments come from the input
// bytes only (world randomness from the seed bytes), every loop is bounded
// (kOpsMax operations, bounded virtual time per step and for the drain),
// and the verdict names the operation after which a contract broke.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutation.h"
#include "engine/endpoint.h"
#include "fuzz/fault_schedule_fuzz.h"
#include "sim/net/sim_network.h"
#include "sim/rnic/fault_plan.h"
#include "sim/world/two_engines.h"
#include "tests/property/prop_env.h"

namespace ferry::fuzz {
namespace {

using simworld::TwoEngines;

constexpr uint64_t kSlotBytes = 64 * 1024;
constexpr uint32_t kSlots = 8;  // per host: local at [0, 512 KiB), remote at [512 KiB, 1 MiB)
constexpr uint64_t kRemoteBase = kSlots * kSlotBytes;
constexpr uint32_t kRestartsMax = 2;
// Scripted control-message drops per direction in one run, and open
// attempts after a restart: an open attempt sends 1 + handshake_retries
// (3) descriptor requests, so at most 2 attempts can lose every answer and
// the third gets through. Unbounded drops made a failed open (the engine's
// correct kDeadlineExceeded) look like a broken contract (the corpus input
// ctrl_drops_then_restart, found by CI's bounded run in session 15).
constexpr uint32_t kCtrlDropsMax = 8;
constexpr uint32_t kOpenAttemptsMax = 4;
constexpr uint64_t kDrainNsMax = 10'000'000'000;

enum class Op : uint8_t {
  kSubmit,
  kSubmitInvalid,
  kAdvance,
  kInjectQp,
  kInjectDevice,
  kCqOverrun,
  kCtrlDrop,
  kCancel,
  kReuse,
  kRestart,
  // Appended in session 13 (corpus files were re-encoded: an opcode byte
  // is its op's index, so `byte % kOpKinds` still decodes it).
  kStallQp,      // hung_qp_recover, qp_err_hold or dup_cqe on a live QP, for a time
  kNetFaults,    // the control network duplicates, reorders and delays, for a time
  kDeviceEvent,  // DEVICE_FATAL or GID_CHANGE on the host's sim0
  kCount,
};
constexpr uint32_t kOpKinds = static_cast<uint32_t>(Op::kCount);

constexpr sim::FaultKind kQpKinds[] = {
    sim::FaultKind::kWrFlush,       sim::FaultKind::kLateCqe,      sim::FaultKind::kHungQp,
    sim::FaultKind::kDestroyQpFail, sim::FaultKind::kModifyQpFail, sim::FaultKind::kPacketLoss,
};

constexpr sim::FaultKind kStallKinds[] = {
    sim::FaultKind::kHungQpRecover,
    sim::FaultKind::kQpErrHold,
    sim::FaultKind::kDupCqe,
};

struct Bytes {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  uint8_t Next() { return at < size ? data[at++] : (++at, 0); }
  bool Done() const { return at >= size; }
};

class Run {
 public:
  Run(uint64_t seed, const base::Mutations& mutations)
      : w_(std::make_unique<TwoEngines>(seed, sim::NetPlan{}, mutations,
                                        simworld::RandomRunConfig())) {}

  std::string Start() {
    if (!w_->start_failure().empty()) return "start: " + w_->start_failure();
    return Reopen();
  }

  // Applies one operation; "" or what broke.
  std::string Apply(Op op, uint8_t a, uint8_t b, uint8_t c) {
    absl::StrAppend(&log_, "  ", Describe(op, a, b, c), "\n");
    const uint32_t h = a & 1;
    switch (op) {
      case Op::kSubmit:
      case Op::kSubmitInvalid:
        if (std::string e = Submit(h, op == Op::kSubmitInvalid, a, b, c); !e.empty()) return e;
        break;
      case Op::kAdvance:
        w_->RunUntil([] { return false; }, (uint64_t{b} + 1) * (a & 2 ? 200'000 : 5'000));
        break;
      case Op::kInjectQp:
        InjectQp(h, kQpKinds[b % std::size(kQpKinds)], c % 2, 1 + (a >> 1) % 4);
        break;
      case Op::kStallQp:
        // 100 us .. 51.2 ms: below and beyond the slice timeout.
        InjectQp(h, kStallKinds[b % std::size(kStallKinds)], c % 2, 1,
                 ((uint64_t{a} >> 1) + 1) * 400'000 / ((c & 2) != 0 ? 4 : 1));
        break;
      case Op::kNetFaults:
        if (std::string e = NetFaults(a, b, c); !e.empty()) return e;
        break;
      case Op::kDeviceEvent:
        (void)w_->fabric().Inject(
            Fault((b & 1) != 0 ? sim::FaultKind::kGidChange : sim::FaultKind::kDeviceFatal,
                  sim::TargetKind::kDevice, h, 0));
        break;
      case Op::kInjectDevice:
        (void)w_->fabric().Inject(Fault(sim::FaultKind::kPortFlap, sim::TargetKind::kDevice, h, 0));
        break;
      case Op::kCqOverrun:
        (void)w_->fabric().Inject(
            Fault(sim::FaultKind::kCqOverrun, sim::TargetKind::kCq, h, 1 + b % 2));
        break;
      case Op::kCtrlDrop:
        if (ctrl_drops_[h] < kCtrlDropsMax) {
          ++ctrl_drops_[h];
          (void)w_->net().ScriptNext(w_->host(h).addr, w_->host(1 - h).addr,
                                     sim::ScriptedNetAction{});
        }
        break;
      case Op::kCancel:
        if (const TwoEngines::Tracked* t = Pick(b)) {
          if (!w_->Cancel(t->host, t->id).ok()) return "cancel of a live task refused";
        }
        break;
      case Op::kReuse:
        if (const TwoEngines::Tracked* t = Pick(b); t != nullptr && IsTerminal(t->published)) {
          // The caller owns the buffer again: a DMA into it is a violation.
          simworld::Fill(*w_, t->host, t->addr - w_->host(t->host).buf.data(), t->len, 0xEE);
        }
        break;
      case Op::kRestart:
        if (restarts_ < kRestartsMax) {
          ++restarts_;
          if (!w_->Restart(h).ok()) return "restart failed";
          next_slot_[h] = 0;
          if (std::string e = Reopen(); !e.empty()) return e;
        }
        break;
      case Op::kCount:
        break;
    }
    return Check();
  }

  // Liveness, then a clean shutdown.
  std::string Drain() {
    absl::StrAppend(&log_, "  Drain\n");
    const bool live = w_->RunUntil(
        [&] {
          for (const TwoEngines::Tracked& t : w_->tracked())
            if (!t.dead && t.published == TaskStatus::kPending) return false;
          return true;
        },
        kDrainNsMax);
    if (std::string e = Check(); !e.empty()) return e;
    if (!live) return "liveness: a live task still PENDING after the drain";
    if (std::string leaks = w_->ShutdownAndCheckLeaks(); !leaks.empty()) return "leak: " + leaks;
    return Check();
  }

  const std::string& log() const { return log_; }

 private:
  // After a restart each side opens the other again; an attempt whose
  // answers were all dropped is retried, as an application would.
  std::string Reopen() {
    for (uint32_t h = 0; h < 2; ++h) {
      absl::StatusOr<SegmentHandle> s = absl::UnknownError("no attempt");
      for (uint32_t attempt = 0; attempt < kOpenAttemptsMax && !s.ok(); ++attempt)
        s = w_->Open(h, 1 - h);
      if (!s.ok()) return "open: " + s.status().ToString();
      seg_[h] = *s;
    }
    return "";
  }

  std::string Check() {
    if (std::string v = w_->OracleAndViolations(); !v.empty()) return "oracle: " + v;
    for (size_t i = 0; i < w_->tracked().size(); ++i) {
      const TaskStatus now = w_->tracked()[i].published;
      if (i < seen_.size() && IsTerminal(seen_[i]) && now != seen_[i])
        return "a published status changed";
      if (i >= seen_.size()) seen_.push_back(now);
      seen_[i] = now;
    }
    return "";
  }

  std::string Submit(uint32_t h, bool invalid, uint8_t a, uint8_t b, uint8_t c) {
    const uint32_t slot = next_slot_[h] % kSlots;
    const bool write = (a & 2) != 0;
    const uint64_t len = c % 4 == 0 ? kSlotBytes : 1 + (uint64_t{b} << 8 | c) % kSlotBytes;
    if (!invalid) {
      for (const TwoEngines::Tracked& t : w_->tracked())  // the slot's last task must be done
        if (!t.dead && t.host == h && t.published == TaskStatus::kPending &&
            t.addr == w_->host(h).buf.data() + slot * kSlotBytes)
          return "";
      ++next_slot_[h];
    }
    Request r = simworld::MakeReq(*w_, h, seg_[h], write ? OpKind::kWrite : OpKind::kRead,
                                  slot * kSlotBytes, kRemoteBase + slot * kSlotBytes, len);
    if (invalid) r.length_bytes = 0;
    if (write && !invalid) simworld::Fill(*w_, h, slot * kSlotBytes, len, 1 + w_->tracked().size());
    auto batch = w_->host(h).engine->AllocateBatch(1);
    if (!batch.ok()) return "AllocateBatch: " + batch.status().ToString();
    const size_t tracked = w_->tracked().size();
    const SubmitResult sr = w_->Submit(h, *batch, {r});
    if (invalid) {
      if (sr.status.ok() || !sr.tasks.empty() || w_->tracked().size() != tracked)
        return "C8: an invalid submit created a task";
      (void)w_->host(h).engine->FreeBatch(*batch);
    } else if (!sr.status.ok()) {
      return "a valid submit was refused: " + sr.status.ToString();
    }
    return "";
  }

  // Duplicates and reorders b % 61 percent of control messages with up to
  // 12 us x (c + 1) of jitter, from now for (a >> 1) + 1 ms (never loses one).
  std::string NetFaults(uint8_t a, uint8_t b, uint8_t c) {
    sim::NetPlan p;
    p.duplicate = sim::Ratio{b % 61u, 100};
    p.reorder = sim::Ratio{b % 61u, 100};
    p.reorder_jitter_ns_max = (uint64_t{c} + 1) * 12'000;
    if (!w_->net().SetPlan(p).ok()) return "net plan refused";
    TwoEngines* w = w_.get();
    w_->ScheduleCall(w_->clock().NowNs() + ((uint64_t{a} >> 1) + 1) * 1'000'000,
                     [w] { (void)w->net().SetPlan(sim::NetPlan{}); });
    return "";
  }

  void InjectQp(uint32_t h, sim::FaultKind kind, uint32_t qp_index, uint32_t times,
                uint64_t duration_ns = 0) {
    const std::string peer = w_->host(1 - h).addr + "@sim0";
    engine::SteppedEngine& e = *w_->host(h).engine;
    const engine::Endpoint* ep = e.FindEndpoint(e.OwnerOf(0, peer), 0, peer);
    if (ep == nullptr || qp_index >= ep->qpns().size()) return;  // nothing to hit now
    sim::ScriptedFault f = Fault(kind, sim::TargetKind::kQp, h, ep->qpns()[qp_index]);
    f.duration_ns = duration_ns;
    for (uint32_t i = 0; i < times; ++i) (void)w_->fabric().Inject(f);
  }

  sim::ScriptedFault Fault(sim::FaultKind kind, sim::TargetKind target, uint32_t h,
                           uint32_t number) {
    sim::ScriptedFault f;
    f.at_ns = w_->clock().NowNs();
    f.kind = kind;
    f.target.kind = target;
    f.target.host = h;
    f.target.device = "sim0";
    f.target.number = number;
    return f;
  }

  // A live tracked task named by `pick`, or null.
  const TwoEngines::Tracked* Pick(uint8_t pick) const {
    if (w_->tracked().empty()) return nullptr;
    const TwoEngines::Tracked& t = w_->tracked()[pick % w_->tracked().size()];
    return t.dead ? nullptr : &t;
  }

  static std::string Describe(Op op, uint8_t a, uint8_t b, uint8_t c) {
    static constexpr const char* kNames[] = {
        "Submit", "SubmitInvalid", "Advance", "InjectQp", "PortFlap",  "CqOverrun",  "CtrlDrop",
        "Cancel", "Reuse",         "Restart", "StallQp",  "NetFaults", "DeviceEvent"};
    static_assert(std::size(kNames) == kOpKinds);
    return absl::StrCat(kNames[static_cast<uint32_t>(op)], "(h", a & 1, " ", a, " ", b, " ", c,
                        ")");
  }

  std::unique_ptr<TwoEngines> w_;
  SegmentHandle seg_[2];
  uint32_t next_slot_[2] = {0, 0};
  uint32_t restarts_ = 0;
  uint32_t ctrl_drops_[2] = {0, 0};
  std::vector<TaskStatus> seen_;
  std::string log_;
};

}  // namespace

std::string FaultScheduleFuzzOne(const uint8_t* data, size_t size, size_t* ops_run) {
  base::Mutations mutations;
  property::ApplyEnvMutation(mutations);  // FERRY_MUTATION: prove it catches a broken contract
  Bytes in{data, size};
  const uint64_t seed = 1 + (uint64_t{in.Next()} << 8 | in.Next());
  Run run(seed, mutations);
  std::string verdict = run.Start();
  size_t ops = 0;
  while (verdict.empty() && !in.Done() && ops < kOpsMax) {
    const Op op = static_cast<Op>(in.Next() % kOpKinds);
    const uint8_t a = in.Next(), b = in.Next(), c = in.Next();
    ++ops;
    verdict = run.Apply(op, a, b, c);
  }
  if (verdict.empty()) verdict = run.Drain();
  if (ops_run != nullptr) *ops_run = ops;
  if (verdict.empty()) return "";
  return absl::StrCat("seed ", seed, ": ", verdict, "\noperations:\n", run.log());
}

}  // namespace ferry::fuzz
