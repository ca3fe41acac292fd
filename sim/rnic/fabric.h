// sim/rnic/fabric.h: the simulated RDMA world: hosts with named devices
// ("sim0", "sim1", ...), a modelled network between them, and a hal::Verbs
// per host (NewVerbs). The Fabric is a sim::Actor: it is runnable when a
// packet, timer or CQE event is due, and NextWakeNs() is the earliest event.
//
// Thread safety: none. The simulator is single-threaded; every Verbs
// instance made by NewVerbs() must be used from the thread that steps the
// Fabric.
//
// What must stay true (docs/simulator.md has the table rule -> tests):
// - Every rule of docs/design.md section 3: the QP state table, post_send chain
//   semantics, device limits, DMA as packet events over virtual time with
//   retransmission and partial placement, responder rules, retry budget,
//   per-QP completion order with seeded interleaving across QPs,
//   error-then-flush, destroy profiles mlx5/rxe, overrun, async events,
//   device close, QPN reuse, misuse of handles fails the run; an MR's
//   remote access flags; type 2 memory windows (fabric_mw.cc: bound to one
//   QP, bound access and range checked, refused at once after LOCAL_INV or
//   dealloc, bind checks, BIND_MW / LOCAL_INV completions).
// - Determinism: every decision depends only on the seed (the Prng given at
//   construction), the config and the calls made; events fire in (time,
//   sequence number) order; no iteration over unordered containers.
// - Hot path (post, packet, completion, poll) does no heap allocation per WR
//   or per packet beyond amortised growth of preallocated rings and the event
//   heap, and no std::function.
// - DMA copies real bytes between registered memory of this process, only
//   while both MRs are registered and both contexts open. Every DMA packet
//   event is checked against the shadow memory (ground truth).
// - A violation (misuse by the caller, or a ground-truth breach) is recorded
//   with a kind and message and never aborts: tests and the oracle query it.
#ifndef FERRY_SIM_RNIC_FABRIC_H_
#define FERRY_SIM_RNIC_FABRIC_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutation.h"
#include "hal/types.h"
#include "hal/verbs.h"
#include "sim/prng.h"
#include "sim/rnic/event_queue.h"
#include "sim/rnic/fault_plan.h"
#include "sim/rnic/shadow_memory.h"
#include "sim/scheduler.h"
#include "sim/trace.h"
#include "sim/virtual_clock.h"

namespace ferry::sim {

enum class RnicProfile : uint8_t { kMlx5, kRxe };
std::string_view RnicProfileName(RnicProfile p);

// Device limits of a profile (docs/design.md section 3: enforced by the sim).
hal::DeviceAttr ProfileLimits(RnicProfile p);
// The largest max_inline_data ibv_create_qp accepts (ibv_device_attr has no
// such field): rxe, the rdma_rxe module's max_inline_data (400 on kernel
// 6.1); mlx5, a model value (the provider derives it from the WQE size).
uint32_t ProfileMaxInlineData(RnicProfile p);

struct FabricConfig {
  RnicProfile profile = RnicProfile::kMlx5;
  uint32_t hosts = 2;
  uint32_t devices_per_host = 1;
  std::optional<hal::DeviceAttr> limits;  // default: ProfileLimits(profile)
  hal::Mtu active_mtu = hal::Mtu::k1024;

  // Network model (per packet).
  uint64_t link_latency_ns = 1000;
  uint64_t link_jitter_ns = 200;            // uniform extra delay; per-path FIFO kept
  uint64_t link_gbps = 100;                 // serialization, per port and direction
  Ratio straggler = kNever;                 // chance a packet is delayed up to...
  uint64_t fabric_lifetime_ns = 1'000'000;  // ...this long (in-flight lifetime)

  // Completions.
  // Seeded extra delay per CQE (0 = none). Completions of different QPs
  // interleave in seeded order anyway through the per-packet link jitter.
  uint64_t cqe_jitter_ns = 0;
  uint64_t late_cqe_ns_max = 200'000;

  // Faults.
  FaultPlan plan;
  StallPlan stall;  // the stall kinds (fabric_stall.cc); off by default
  RecvPlan recv;    // the receive-side kinds (fabric_recv.cc); off by default
  std::vector<ScriptedFault> script;
  uint64_t fault_tick_ns = 1'000'000;
  uint64_t link_down_ns = 5'000'000;
  uint64_t port_flap_ns = 100'000;
  uint64_t rtr_fail_after_active_ns = 2'000'000;

  // Test-only switches (effective only in *_mut builds).
  base::Mutations mutations;

  uint32_t events_per_step_max = 256;
};

enum class ViolationKind : uint8_t {
  kWrongActor,
  kForeignHandle,
  kDestroyedHandle,
  kUnackedEventsAtDestroy,
  kBadAck,
  kLocalAfterRelease,  // DMA touched a released (or fenced) local range
  kRemoteAfterFence,   // DMA touched a fenced (or released) remote range
  kMispairedQps,       // two QPs name each other but one's send PSN is not the other's RTR PSN
  kBoundMwAtDestroy,   // destroy_qp of a QP a memory window is still bound to (rxe blocks 50 s)
};
std::string_view ViolationKindName(ViolationKind k);

struct Violation {
  ViolationKind kind;
  uint64_t time_ns = 0;
  uint32_t actor = 0;
  std::string message;
};

enum class ObjectKind : uint8_t { kContext, kPd, kMr, kCompChannel, kCq, kQp, kMw, kCount };
std::string_view ObjectKindName(ObjectKind k);

// Per-CQ ground truth for the engine's quota check (docs/design.md section 6).
struct CqTruth {
  uint64_t present = 0;     // CQEs in the CQ now
  uint64_t producible = 0;  // CQEs its live QPs can still produce
  uint32_t capacity = 0;
  bool errored = false;
};

struct FabricStats {
  uint64_t wrs_posted = 0;
  uint64_t cqes_written = 0;
  uint64_t cqes_polled = 0;
  uint64_t packets_sent = 0;
  uint64_t packets_dropped = 0;
  uint64_t responses_ignored = 0;     // response PSN outside the receiving QP's window
  uint64_t late_packets_dropped = 0;  // request of a WR completed before it arrived, no payload
  uint64_t late_packets_landed = 0;   // ... with the payload saved at completion
  uint64_t packets_executed = 0;
  uint64_t duplicates = 0;
  uint64_t retransmits = 0;
  // NAK-sequence errors and implied NAKs that started no retry because one
  // was under way (StartRetry).
  uint64_t retries_suppressed = 0;
  // Retry-timer expiries (retransmit or RETRY_EXC_ERR) on a QP none of whose
  // packets (requests, or responses to it) was ever dropped or held back by
  // a straggler delay: with faults off this must stay 0 (every packet is
  // delivered and acknowledged); tests assert it.
  uint64_t timeouts_without_loss = 0;
  uint64_t events = 0;
  uint64_t qpns_reused = 0;       // QPs created with the number of a destroyed one
  uint64_t rnr_naks = 0;          // RNR NAKs sent by responders
  uint64_t read_depth_waits = 0;  // a READ held back: max_rd_atomic READs outstanding (Kick)
  uint64_t recv_cqes = 0;         // receive completions emitted (flushes included)
  std::array<uint64_t, kFaultKinds> faults{};  // injected, per kind
};

class SimVerbs;

class Fabric final : public Actor {
 public:
  // `clock` and `trace` (nullable) must outlive the Fabric.
  Fabric(FabricConfig config, Prng prng, VirtualClock* clock, Trace* trace = nullptr);
  ~Fabric() override;
  Fabric(const Fabric&) = delete;
  // Restarts the fabric's draws (seeded faults, PSNs, QPNs) and the stall
  // kinds' draws from two seeds.
  void Reseed(uint64_t seed, uint64_t stall_seed) {
    prng_.Reseed(seed);
    stall_prng_.Reseed(stall_seed);
  }
  Fabric& operator=(const Fabric&) = delete;

  const FabricConfig& config() const { return config_; }
  // "seed-independent" description: profile, hosts, devices, plan, script.
  std::string Describe() const;

  // A Verbs for host `host` (< config.hosts). Several may exist per host;
  // each sees only that host's devices. Must not outlive the Fabric.
  std::unique_ptr<hal::Verbs> NewVerbs(uint32_t host);

  // ---------------------------------------------------------- Actor
  std::string_view name() const override { return "rnic"; }
  bool Runnable() override;
  uint64_t Step() override;  // up to events_per_step_max due events; costs 0
  std::optional<uint64_t> NextWakeNs() override;
  bool HasWork() override { return !events_.empty(); }

  // Without a scheduler (tests, bench): process every event due up to t_ns,
  // advancing the clock to each event's time and finally to t_ns.
  void RunUntil(uint64_t t_ns);
  void RunFor(uint64_t delta_ns) { RunUntil(clock_->NowNs() + delta_ns); }
  // Processes events until none are left or `budget_ns` of virtual time
  // passed; returns true when the queue emptied.
  bool Settle(uint64_t budget_ns);

  // ---------------------------------------------------------- callers
  // The harness calls this before stepping an actor; calls are attributed
  // to it. 0 = "no actor" (test main).
  void set_current_actor(uint32_t actor) { current_actor_ = actor; }
  uint32_t current_actor() const { return current_actor_; }
  // Binds an object to an owner actor: a later call on it from another
  // actor is a kWrongActor violation and fails.
  absl::Status BindOwner(hal::QpHandle qp, uint32_t actor);
  absl::Status BindOwner(hal::CqHandle cq, uint32_t actor);
  // A live CQ bound to `actor` holds a CQE or has overrun: what would wake
  // an owner sleeping on its completion channels. Prunes destroyed CQs from
  // the actor's list (bounded by the CQs bound to it).
  bool OwnerCqReady(uint32_t actor);
  // Verbs calls made by `actor` so far.
  uint64_t CallsBy(uint32_t actor) const;
  uint32_t LastCallerOf(hal::QpHandle qp) const;

  const std::vector<Violation>& violations() const { return violations_; }
  bool HasViolation(ViolationKind k) const;
  void ClearViolations() { violations_.clear(); }

  // ---------------------------------------------------------- ground truth
  ShadowMemory& shadow() { return shadow_; }
  absl::StatusOr<CqTruth> TruthOf(hal::CqHandle cq) const;
  // Bit h set: an event dispatched since the last call may have changed a
  // CQ truth of host h (a QP event sets its QP's host and its peer's; a
  // fault tick, a script or a port event every bit). Clears the mask.
  uint64_t TakeTouchedHosts() { return std::exchange(touched_hosts_, 0); }
  // A WR with a local SGE overlapping [addr, addr + len) whose completion
  // the consumer has not polled yet, on a QP not destroyed and not in
  // RESET: "h0/sim0 qpn=17 state=RTS wr seq=4", or "" when none. Such a
  // WR may still touch the buffer (its QP executes), or the evidence that
  // it cannot (its flush) was not consumed. The oracle asks this when a
  // task publishes: a terminal status with such a WR breaks C1 ("published
  // only with evidence") even when no late packet ever lands.
  // `filter` narrows the search: WRs posted at or after the fabric-wide
  // post count `posted_from` (stats().wrs_posted when the caller looked),
  // and on one QP (host, qpn) when `qpn` is set.
  struct WrFilter {
    uint64_t posted_from = 0;
    std::optional<uint32_t> host;
    std::optional<uint32_t> qpn;
  };
  std::string UnconsumedWrOn(const void* addr, uint64_t len, const WrFilter& filter) const;
  // True while a WRITE toward `host` overlapping [addr, addr + len) can
  // still place bytes there: its WR is on a live QP and not completed (it
  // may still be sent or resent), or it completed in error with its payload
  // saved for packets still on the wire. The contract's remote caveat
  // (docs/contract.md) as ground truth: the workload reuses a remote range
  // after a WRITE that was not COMPLETED only once this is false.
  bool WriteMayLand(uint32_t host, uint64_t addr, uint64_t len) const;
  std::string UnconsumedWrOn(const void* addr, uint64_t len) const {
    return UnconsumedWrOn(addr, len, WrFilter{});
  }
  // Memory windows bound to the live QP `qpn` of host `host`'s device
  // `device` (the oracle's mw_revoked rule: none once its endpoint retired).
  uint32_t BoundMwsOnQpn(uint32_t host, std::string_view device, uint32_t qpn) const;
  uint64_t LiveCount(ObjectKind k) const { return live_[static_cast<size_t>(k)]; }
  uint64_t CreatedCount(ObjectKind k) const { return created_[static_cast<size_t>(k)]; }
  // One line per live object, e.g. "qp 3 h0/sim0 qpn=17 state=RTS
  // outstanding=3 cq=2 rd_atomic=16/16" (cq: the send CQ, numbered as the
  // "cq N" lines; max_rd_atomic/max_dest_rd_atomic).
  std::vector<std::string> LiveObjects() const;
  // QP state and outstanding WRs as the RNIC sees them (for tests/oracle).
  absl::StatusOr<hal::QpState> TrueStateOf(hal::QpHandle qp) const;
  absl::StatusOr<uint64_t> OutstandingOf(hal::QpHandle qp) const;  // not yet completed
  // Async events of the QP gotten and not yet acked (ibv_destroy_qp waits
  // for these; sim/threaded/locked_world.h models the wait).
  absl::StatusOr<uint32_t> UnackedEventsOf(hal::QpHandle qp) const;
  absl::StatusOr<uint64_t> RetransmitsOf(hal::QpHandle qp) const;

  // ---------------------------------------------------------- world faults
  // Peer restart (as process exit): closes every open context of the host.
  void RestartHost(uint32_t host);
  uint32_t IncarnationOf(uint32_t host) const;
  absl::Status SetLinkUp(uint32_t host, std::string_view device, bool up);
  // Cancels the scripted faults still armed on one QP (destroy, modify and
  // post failures, late CQEs, packet drops; a hung QP stays hung): a
  // scenario ends a fault window it opened with a count it cannot know.
  absl::Status ClearQpScript(uint32_t host, std::string_view device, uint32_t qpn);
  // Applies a scripted fault now (ParseFaultScript form).
  absl::Status Inject(const ScriptedFault& f);
  // Ends every seeded fault kind and the packet stragglers for the rest of
  // the run (a campaign's liveness phase). What was injected before runs its
  // course: a hung QP stays hung, a link that is down comes back on its
  // timer, delayed packets arrive.
  void StopSeededFaults();
  // Scripted faults whose target did not exist, and those the RNIC does not
  // own (ctrl_*, paused_peer), handed to the runner.
  const std::vector<ScriptedFault>& missed_faults() const { return missed_; }
  const std::vector<ScriptedFault>& external_faults() const { return external_; }

  const FabricStats& stats() const { return stats_; }
  uint64_t NowNs() const { return clock_->NowNs(); }

 private:
  friend class SimVerbs;
  static constexpr uint32_t kNone = 0xffffffffu;
  static constexpr uint32_t kTraceStream = 0x524e4943;       // "RNIC"
  static constexpr uint32_t kStallTraceStream = 0x53544c4c;  // "STLL"
  static constexpr uint32_t kRecvTraceStream = 0x52435653;   // "RCVS"
  // Size of every port's GID table (entries 0-3 hold data, like rxe's
  // first four for one link-local and one IPv4 address; the rest empty).
  static constexpr uint32_t kGidTableLen = 8;

  enum class EvType : uint8_t {
    kReq,
    kResp,
    kTimer,
    kCqeDeliver,
    kFaultTick,
    kScript,
    kPortUp,
    kStall,     // a = QP index, b = StallEv, c = the stall's token
    kRnrTimer,  // a = QP index, c = its rnr_token when the RNR NAK came
  };
  enum StallEv : uint32_t { kUnhang = 0, kHoldEnd, kDupDeliver };
  // kNakRnr carries the responder's min_rnr_timer in bits 8-12 of the
  // event's b (RnrNakKind); kNakInvReq and kNakRemOp are the NAKs of a
  // receive that failed at the responder (buffer too small; a bad receive
  // SGE).
  enum RespKind : uint32_t {
    kAck = 0,
    kReadResp,
    kNakSeq,
    kNakAccess,
    kNakRnr,
    kNakInvReq,
    kNakRemOp
  };
  struct Event {
    uint64_t t_ns;
    uint64_t seq;
    uint64_t c;
    uint32_t a;
    uint32_t b;
    uint32_t d;
    uint32_t chan;  // FIFO channel (kNone: a standalone heap event)
    EvType type;
  };
  struct Cqe {
    hal::WorkCompletion wc;
    uint32_t qp = kNone;  // fabric QP index
    uint64_t wr_seq = 0;  // of the send queue, or of the receive queue when `recv`
    bool dup = false;     // a dup_cqe copy (not counted in CqTruth::present)
    bool recv = false;    // a receive completion: goes to the QP's recv_cq
  };
  struct PendingCqe {
    uint64_t ready_ns;
    Cqe cqe;
    bool flush;
  };
  struct AsyncRec {
    hal::AsyncEvent ev;
    uint32_t qp = kNone;
    uint32_t cq = kNone;
  };

  struct Host {
    uint32_t incarnation = 1;
    uint32_t script_resource_fail = 0;
  };
  struct Device {
    uint32_t host = 0;
    std::string name;
    hal::Gid gid;             // IPv4-mapped (table entries 2 and 3)
    hal::Gid link_local_gid;  // fe80::... (table entries 0 and 1)
    uint64_t guid = 0;
    bool port_up = true;
    uint64_t rtr_fail_until_ns = 0;
    // Egress serialization of the port (per direction, shared by every QP
    // of the device: requests, ACK/NAKs and READ responses it sends).
    uint64_t tx_free_ns = 0;
    uint32_t live_qp = 0, live_cq = 0, live_mr = 0, live_pd = 0, live_mw = 0;
    uint32_t cq_ordinal = 0;
    uint32_t script_cq_create_fail = 0;                 // scripted resource_fail on a cq target
    absl::flat_hash_map<uint32_t, uint32_t> qpn_to_qp;  // lookup only
    std::vector<uint32_t> free_qpns;                    // LIFO reuse
    uint32_t next_qpn = 0x11;
  };
  struct Context {
    bool alive = true;
    bool fatal = false;
    uint32_t host = 0, dev = 0;
    std::deque<AsyncRec> async_queue;
    uint32_t async_unacked = 0;  // non-QP/CQ events handed out, not acked
  };
  struct Pd {
    bool alive = true;
    uint32_t ctx = 0;
    uint32_t live_children = 0;
  };
  struct Mr {
    bool alive = true;
    uint32_t ctx = 0, pd = 0, dev = 0;
    uint8_t* addr = nullptr;
    size_t len = 0;
    uint32_t access = 0;
    uint32_t key = 0;
    uint32_t bound_mws = 0;  // memory windows bound to it: dereg fails (EINVAL)
  };
  // A type 2 memory window (fabric_mw.cc). Its key has bit 31 set (MR keys
  // never do): index (position in mws_ + 1) in bits 8-30, tag in bits 0-7.
  // Bound: requests arriving on QP `qp` may use `key` on [addr, addr + len)
  // of MR `mr` with `access`. Freed windows keep their slot (no reuse).
  struct Mw {
    bool alive = true;
    bool bound = false;
    uint32_t ctx = 0, pd = 0, dev = 0;
    uint32_t key = 0;
    uint32_t mr = kNone, qp = kNone;
    uint64_t addr = 0, len = 0;
    uint32_t access = 0;
  };
  struct Channel {
    bool alive = true;
    uint32_t ctx = 0;
    std::deque<uint32_t> events;  // CQ indices whose notification fired
    uint32_t live_cqs = 0;
  };
  struct Cq {
    bool alive = true;
    uint32_t ctx = 0, dev = 0;
    uint32_t channel = kNone;
    uint32_t ordinal = 0;
    uint32_t capacity = 0;
    std::vector<Cqe> ring;
    uint32_t head = 0, count = 0;
    uint32_t dups = 0;  // entries of the ring that are dup_cqe copies
    bool armed = false, solicited_only = false;
    bool errored = false;
    uint32_t events_unacked = 0;
    uint32_t owner = 0;
    std::vector<uint32_t> qps;  // attached live QPs
  };
  // A send-queue slot, split in two: `Wr` holds what every post, packet
  // and CQE reads (96 bytes: two cache lines per slot where the old single
  // struct of 264 bytes touched five; at 1024 QPs the rings no longer fit
  // in L2 and the post's write to a cold slot was the simulated RNIC's
  // largest cost, docs/operations.md 3.2), `WrCold` the rest: the SGEs past
  // the first, the local operations' fields and the payload copies. Both
  // rings have cap.max_send_wr slots; slot i of one is slot i of the other.
  struct Wr {
    uint64_t seq = ~uint64_t{0};
    uint64_t post_index = 0;  // stats_.wrs_posted before this WR was posted
    uint64_t wr_id = 0;
    uint64_t remote_addr = 0;
    uint64_t len = 0;
    uint64_t vpsn_first = 0;
    // READ WRs posted on the QP before this one (Qp::reads_posted then):
    // the READs in [a, b) of the send queue are reads_before(b) -
    // reads_before(a), whatever path moved a or b (ReadsInFlight).
    uint64_t reads_before = 0;
    uint32_t rkey = 0;
    uint32_t imm_data = 0;
    uint32_t npkts = 0;
    hal::Opcode opcode = hal::Opcode::kRdmaWrite;
    uint8_t num_sge = 0;
    bool signaled = false;
    bool started = false;
    // An inline WR (kSendInline): all its bytes were copied at post time
    // into WrCold::inline_payload (the driver copies them into the WQE;
    // the buffer is the caller's again when post_send returns). Its
    // packets take their bytes from there.
    bool inline_data = false;
    // !WrCold::sent_payload.empty(), kept here so that a post and a late
    // packet's check read no cold line (set only by SaveSentPayloads;
    // the bytes are freed when the slot is reused).
    bool has_sent_payload = false;
    // A local operation (kBindMw, kLocalInv): its result, set when the
    // requester reached it (started); it completes when it is the head.
    hal::WcStatus local_status = hal::WcStatus::kSuccess;
    hal::Sge sge0;  // sg_list[0]; the others are WrCold::sges
  };
  struct WrCold {
    std::array<hal::Sge, hal::kMaxSgeInline - 1> sges{};  // sg_list[1..]
    hal::MwBind bind;                                     // kBindMw
    uint32_t invalidate_rkey = 0;                         // kLocalInv
    // A WRITE completed in error while packets were on the wire: the bytes
    // those packets carry, taken from the local buffer at completion time
    // (an RNIC fetched them at transmit; the buffer was still the task's).
    std::vector<uint8_t> sent_payload;
    std::vector<uint8_t> inline_payload;  // Wr::inline_data
  };
  static_assert(sizeof(Wr) == 96, "Wr is the hot part of a send-queue slot: keep it two lines");
  struct Qp {
    bool alive = true;
    uint32_t ctx = 0, pd = 0, dev = 0, host = 0;
    uint32_t qpn = 0;
    uint32_t send_cq = 0, recv_cq = 0;
    hal::QpCap cap;
    bool sq_sig_all = false;
    hal::QpAttr attr;
    std::vector<Wr> sq;           // ring of cap.max_send_wr (at least 1)
    std::vector<WrCold> sq_cold;  // the same slots' cold halves
    uint64_t post_seq = 0, done_seq = 0, free_seq = 0, send_seq = 0;
    uint64_t reads_posted = 0;  // READ WRs ever posted (Wr::reads_before)
    uint64_t next_vpsn = 0, sent_vpsn = 0, ack_vpsn = 0;
    uint32_t psn_base = 0;      // wire psn = (psn_base + vpsn) & 0xffffff
    uint64_t sent_vpsn_hi = 0;  // 1 + the highest vpsn ever sent: responses past it are invalid
    uint64_t last_req_arrival_ns = 0, last_resp_arrival_ns = 0;
    // Its request packets in the event queue (sent, not yet arrived): ACK
    // coalescing asks whether more are on the wire behind one.
    uint32_t reqs_queued = 0;
    // PeerQpOf's last answer: the QP numbered attr.dest_qp_num on dst_dev,
    // valid while qpn_epoch_ and that pair are unchanged.
    struct PeerQpCache {
      uint64_t epoch = ~uint64_t{0};
      uint32_t dev = 0, qpn = 0, qi = 0;
    };
    mutable PeerQpCache peer_qp_cache;
    uint32_t retries = 0;
    // A retry sequence is under way (rxe's comp.started_retry): a NAK or an
    // implied NAK starts no other until progress or the retry timer.
    bool retry_started = false;
    uint64_t last_progress_ns = 0;
    bool timer_pending = false;
    uint64_t retransmits = 0;
    uint64_t path_faults = 0;  // packets of this QP (either direction) dropped or straggling
    // responder
    uint32_t epsn = 0;
    bool nak_sent = false;
    bool comm_est_sent = false;
    uint32_t unacked_wrs = 0;  // executed WRITEs not yet acknowledged (coalescing)
    // Responder resources: the wire PSN ranges of the last kReadResources
    // READs executed. A duplicate READ is re-executed only if it falls in
    // one (rxe's find_resource; else it is dropped, IBA class D). Real
    // RNICs keep max_dest_rd_atomic of them and the requester never has
    // more READs outstanding (max_rd_atomic, which the sim's requester
    // honours too: Kick); the sim keeps more than any max_rd_atomic
    // (<= 255) needs. Allocated at the first READ.
    static constexpr uint32_t kReadResources = 1024;
    struct ReadResource {
      uint32_t first_psn = 0, npkts = 0;
    };
    std::vector<ReadResource> read_res;
    uint32_t read_res_next = 0;
    uint32_t dst_dev = kNone;
    // faults
    bool hung = false;
    bool flush_dropped = false;  // rxe: flush hit a full CQ
    uint32_t script_destroy_fail = 0, script_modify_fail = 0, script_post_enomem = 0;
    uint32_t script_late = 0, script_drop = 0;
    // stall kinds (fabric_stall.cc): a pending stall event applies only
    // while its token is the QP's (0: none pending)
    uint64_t hang_token = 0;                         // hung_qp_recover: the unhang to come
    uint64_t hold_token = 0;                         // qp_err_hold: a move to ERR is held...
    uint32_t held_mask = 0;                          // ...with this attribute mask
    uint64_t script_hold_ns = 0, script_dup_ns = 0;  // scripted, for the next one
    // receive queue (fabric_recv.cc): a ring of cap.max_recv_wr; WRs
    // [rq_done_seq, rq_post_seq) are posted and not completed, and the
    // one at rq_done_seq is being filled while recv_active (a SEND's
    // first packet consumed it; its last completes it). Slots free when
    // their CQE is polled (rq_free_seq), as send slots do.
    struct RecvSlot {
      uint64_t seq = ~uint64_t{0};
      hal::RecvWr wr;
    };
    std::vector<RecvSlot> rq;
    uint32_t rq_depth = 0;  // usable receive WRs (the profile's rounding of max_recv_wr)
    uint64_t rq_post_seq = 0, rq_done_seq = 0, rq_free_seq = 0;
    bool recv_active = false;
    uint64_t recv_off = 0;            // bytes of the active SEND placed so far
    bool recv_early = false;          // sim_recv_cqe_before_data: completed at the
    hal::RecvWr recv_early_wr;        // first packet, still filling this WR's buffer
    uint64_t rnr_storm_until_ns = 0;  // responder: answers RNR until then (rnr_storm)
    uint32_t script_recv_drop = 0;    // responder: SEND/WRITE_IMM packets to drop
    bool rq_flush_dropped = false;    // rxe: a receive flush hit a full CQ
    // requester: RNR NAKs since the last progress, and the wait after one
    uint32_t rnr_retries = 0;
    bool rnr_wait = false;
    uint64_t rnr_token = 0;
    uint32_t pending_recv = 0;  // entries of `pending` that are receive CQEs
    // completions
    std::deque<PendingCqe> pending;
    uint64_t last_cqe_ready_ns = 0;
    uint32_t events_unacked = 0;
    uint32_t owner = 0;
    uint32_t last_caller = 0;
  };

  // ---- verbs: Verb<Call> is the simulated RNIC's side of ibv_<call>, entered
  // only through SimVerbs (sim_verbs.cc), which passes the caller's host.
  absl::StatusOr<std::vector<hal::DeviceInfo>> VerbListDevices(uint32_t host);
  absl::StatusOr<hal::ContextHandle> VerbOpenDevice(uint32_t host, std::string_view name);
  absl::Status VerbCloseDevice(uint32_t host, hal::ContextHandle ctx);
  absl::StatusOr<hal::DeviceAttr> VerbQueryDevice(uint32_t host, hal::ContextHandle ctx);
  absl::StatusOr<hal::PortAttr> VerbQueryPort(uint32_t host, hal::ContextHandle ctx, uint8_t port);
  // Entry `index` of device d's GID table; nullopt for an empty slot.
  static std::optional<hal::GidEntry> GidTableEntry(const Device& d, int index);
  absl::StatusOr<hal::GidEntry> VerbQueryGidEntry(uint32_t host, hal::ContextHandle ctx,
                                                  uint8_t port, int index);
  absl::StatusOr<hal::Gid> VerbQueryGid(uint32_t host, hal::ContextHandle ctx, uint8_t port,
                                        int index);
  absl::StatusOr<hal::PdHandle> VerbAllocPd(uint32_t host, hal::ContextHandle ctx);
  absl::Status VerbDeallocPd(uint32_t host, hal::PdHandle pd);
  absl::StatusOr<hal::MrInfo> VerbRegMr(uint32_t host, hal::PdHandle pd, void* addr, size_t len,
                                        uint32_t access);
  absl::Status VerbDeregMr(uint32_t host, hal::MrHandle mr);
  // Memory windows (fabric_mw.cc).
  absl::StatusOr<hal::MwInfo> VerbAllocMw(uint32_t host, hal::PdHandle pd, hal::MwType type);
  absl::Status VerbDeallocMw(uint32_t host, hal::MwHandle mw);
  void FreeMwNow(uint32_t wi);
  // Live windows bound to QP qi (destroy_qp refuses while there are any).
  uint32_t BoundMwsOf(uint32_t qi) const;
  void UnbindMw(Mw& w);
  // A bind or local-invalidate WR of QP qi, executed when the requester
  // reaches it; its completion status.
  hal::WcStatus ExecuteLocalOp(uint32_t qi, const Qp& q, const Wr& w);
  hal::WcStatus ExecuteBind(uint32_t qi, const Qp& q, const hal::MwBind& b);
  hal::WcStatus ExecuteLocalInv(const Qp& q, uint32_t rkey);
  // Completes the executed local operations at the head of q's send queue
  // (a failed one fails the QP and flushes the rest).
  void CompleteLocalOpsAtHead(uint32_t qi, Qp& q);
  // The MR a window rkey reaches for a request of `len` bytes at `addr`
  // arriving on responder QP `responder_qi`, or nullptr when refused.
  const Mr* ResolveMw(uint32_t dev, uint32_t pd, uint32_t responder_qi, uint32_t rkey,
                      uint64_t addr, uint64_t len, uint32_t need_access) const;
  absl::StatusOr<hal::CompChannelHandle> VerbCreateCompChannel(uint32_t host,
                                                               hal::ContextHandle ctx);
  absl::Status VerbDestroyCompChannel(uint32_t host, hal::CompChannelHandle ch);
  absl::StatusOr<hal::CqHandle> VerbGetCqEvent(uint32_t host, hal::CompChannelHandle ch);
  void VerbAckCqEvents(uint32_t host, hal::CqHandle cq, uint32_t n);
  absl::StatusOr<hal::CqInfo> VerbCreateCq(uint32_t host, hal::ContextHandle ctx, uint32_t cqe,
                                           hal::CompChannelHandle ch);
  absl::Status VerbDestroyCq(uint32_t host, hal::CqHandle cq);
  absl::StatusOr<uint32_t> VerbPollCq(uint32_t host, hal::CqHandle cq,
                                      absl::Span<hal::WorkCompletion> out);
  absl::Status VerbReqNotifyCq(uint32_t host, hal::CqHandle cq, bool solicited_only);
  absl::StatusOr<hal::QpInfo> VerbCreateQp(uint32_t host, hal::PdHandle pd,
                                           const hal::QpInitAttr& init);
  absl::Status VerbModifyQp(uint32_t host, hal::QpHandle qp, const hal::QpAttr& attr,
                            uint32_t mask);
  // VerbModifyQp's phases (fabric_qp.cc): the transition and attribute checks
  // (EINVAL), the attributes a mask names, and what entering q's (new)
  // state does, coming from `cur`.
  absl::Status CheckModifyAttrs(hal::QpState cur, hal::QpState next, const hal::QpAttr& attr,
                                uint32_t mask) const;
  static void ApplyQpAttrs(Qp& q, const hal::QpAttr& attr, uint32_t mask);
  void EnterQpState(uint32_t qi, Qp& q, hal::QpState cur, uint32_t mask);
  absl::StatusOr<hal::QpAttr> VerbQueryQp(uint32_t host, hal::QpHandle qp);
  absl::Status VerbDestroyQp(uint32_t host, hal::QpHandle qp);
  hal::PostResult VerbPostSend(uint32_t host, hal::QpHandle qp,
                               absl::Span<const hal::SendWr> chain);
  // Puts one checked WR of `len` bytes on q's send queue (flushed at once
  // when q is in ERR).
  void EnqueueWr(uint32_t qi, Qp& q, const hal::SendWr& wr, uint64_t len, uint64_t mtu);
  absl::StatusOr<hal::AsyncEvent> VerbGetAsyncEvent(uint32_t host, hal::ContextHandle ctx);
  void VerbAckAsyncEvent(uint32_t host, const hal::AsyncEvent& ev);

  // ---- handle checks: record a violation and return an error on misuse.
  absl::StatusOr<uint32_t> CheckCtx(uint32_t host, hal::ContextHandle h, std::string_view call);
  absl::StatusOr<uint32_t> CheckPd(uint32_t host, hal::PdHandle h, std::string_view call);
  absl::StatusOr<uint32_t> CheckMr(uint32_t host, hal::MrHandle h, std::string_view call);
  absl::StatusOr<uint32_t> CheckMw(uint32_t host, hal::MwHandle h, std::string_view call);
  // A kBindMw WR's window and MR are live handles of the caller's host
  // (post_send's check; anything else is OK).
  absl::Status CheckBindHandles(uint32_t host, const hal::SendWr& wr);
  absl::StatusOr<uint32_t> CheckChannel(uint32_t host, hal::CompChannelHandle h,
                                        std::string_view call);
  absl::StatusOr<uint32_t> CheckCq(uint32_t host, hal::CqHandle h, std::string_view call);
  absl::StatusOr<uint32_t> CheckQp(uint32_t host, hal::QpHandle h, std::string_view call);
  // CheckQp's checks without a status: the QP's index when `h` is a live
  // QP of `host` that the current actor may call (the call noted as
  // CheckQp notes it), else kNone and nothing noted (CheckQp then says
  // why). Inline: every post pays it (ibv_post_send).
  uint32_t UsableQp(uint32_t host, hal::QpHandle h) {
    if (h.id == 0 || h.id > qps_.size()) return kNone;
    const uint32_t idx = static_cast<uint32_t>(h.id - 1);
    Qp& q = *qps_[idx];
    if (q.host != host || !q.alive || (q.owner != 0 && q.owner != current_actor_)) return kNone;
    NoteCall();
    q.last_caller = current_actor_;
    return idx;
  }
  absl::Status Violate(ViolationKind k, std::string message);
  // Counts a verb call of the current actor (inline: every verb pays it).
  void NoteCall() {
    if (current_actor_ >= calls_by_actor_.size()) GrowCallTable();
    ++calls_by_actor_[current_actor_];
  }
  void GrowCallTable();

  // ---- engine internals
  // Queues an event; `chan` is its FIFO-in-time channel, `lane` a FIFO it
  // waits in when that keeps the lane sorted (event_queue.h): kTimerLane,
  // kCqeLane, PacketLane(the sending device).
  void Push(EvType type, uint64_t t_ns, uint32_t a, uint32_t b, uint64_t c, uint32_t d,
            uint32_t chan = kNone, uint32_t lane = kNone);
  static constexpr uint32_t kTimerLane = 0;
  static constexpr uint32_t kCqeLane = 1;
  static uint32_t PacketLane(uint32_t dev) { return 2 + dev; }
  // Channels: per QP, its request path, its response path and its CQE
  // delivery FIFO. Events of one channel are in (time, seq) order, so only
  // each channel's head sits in the heap: the heap stays small.
  static uint32_t ReqChan(uint32_t qi) { return qi * 3; }
  static uint32_t RespChan(uint32_t qi) { return qi * 3 + 1; }
  static uint32_t CqeChan(uint32_t qi) { return qi * 3 + 2; }
  void Dispatch(const Event& e);
  bool InjectFault(FaultKind k);  // draws the seeded chance; counts
  void CountFault(FaultKind k);
  void RaiseAsync(uint32_t ctx, hal::AsyncEventType type, uint32_t qp, uint32_t cq, uint8_t port);
  void RaiseDeviceAsync(uint32_t dev, hal::AsyncEventType type);
  void Kick(uint32_t qi);
  // READs sent and not completed: those in [done_seq, send_seq). Kick
  // sends no READ past max_rd_atomic of them (a READ's completion kicks
  // the QP again: OnReadResp).
  static uint64_t ReadsInFlight(const Qp& q);
  void SendReq(uint32_t qi, Qp& q, Wr& w, uint64_t vpsn);
  bool StartWr(uint32_t qi, Qp& q, Wr& w);
  void OnReq(const Event& e);
  // OnReq's phases (fabric_responder.cc). A request packet as the
  // responder executes it: the event, the requester and its WR, the
  // responder, the packet's byte range in the WR, and whether the WR had
  // already completed (its payload was saved) or the packet is a duplicate.
  struct ReqPacket {
    const Event& e;
    Qp& rq;
    const Wr& wr;
    uint32_t ri;
    Qp& r;
    uint64_t off;
    uint64_t len;
    bool completed;
    bool dup;
  };
  // The packet path's helpers are forced inline: the fabric is one unity
  // translation unit (sim/rnic/meson.build), and as calls they cost about 5 %
  // of the engine-overhead benchmark's instructions (docs/operations.md).
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline void ExecuteReq(const ReqPacket& p);
  void DropReq(Qp& requester);
  // The WR of requester `rq` that sent the packet (low 32 bits of its
  // sequence, its virtual PSN), or nullptr when none in the ring window.
  const Wr* FindPacketWr(const Qp& rq, uint32_t seq_lo, uint64_t vpsn) const;
  // False when nothing was placed (the requester's local MR vanished).
  bool ExecuteWrite(const ReqPacket& p, const Mr& m);
  void ExecuteRead(const ReqPacket& p);
  // ---- the receive side (fabric_recv.cc): post_recv, SEND and WRITE with
  // immediate at the responder, RNR NAK and the requester's RNR wait,
  // receive completions and their flush.
  hal::PostResult VerbPostRecv(uint32_t host, hal::QpHandle qp,
                               absl::Span<const hal::RecvWr> chain);
  // A packet of a SEND / of a WRITE with immediate at the responder (after
  // the PSN and state gate; `m` the MR the WRITE's rkey reaches).
  void ExecuteSend(const ReqPacket& p);
  void ExecuteWriteImm(const ReqPacket& p, const Mr& m);
  // Whether the responder has a receive WR for a new message (no RNR
  // storm). A seeded rnr_storm may start here (RecvPlan).
  bool RecvReady(Qp& r);
  // An incoming SEND / WRITE_WITH_IMM packet at responder r is lost on
  // arrival: a scripted recv_drop first, else a seeded one (RecvPlan).
  bool RecvDropped(Qp& r);
  void SendRnrNak(const ReqPacket& p);
  // The requester got an RNR NAK for virtual PSN vpsn carrying timer code
  // `timer` (IBA's 5-bit min_rnr_timer encoding).
  void OnRnrNak(uint32_t qi, Qp& q, uint64_t vpsn, uint32_t timer);
  void OnRnrTimer(const Event& e);
  // How long a requester waits after an RNR NAK with timer code `timer`.
  uint64_t RnrWaitNs(uint32_t timer) const;
  // A receive completion's src_qp for a message from `requester`.
  uint32_t RecvSrcQpn(const Qp& requester) const;
  // Writes `len` bytes at `off` of receive WR `w`'s scatter list of QP r:
  // kLocLenErr past its end, kLocProtErr on a bad lkey or range.
  hal::WcStatus ScatterRecv(const Qp& r, const hal::RecvWr& w, uint64_t off, const uint8_t* src,
                            uint64_t len);
  // Completes the receive WR at rq_done_seq of QP ri.
  void CompleteRecv(uint32_t ri, Qp& r, hal::WcStatus status, hal::Opcode op, uint32_t byte_len,
                    uint32_t src_qpn, std::optional<uint32_t> imm);
  // Every posted receive WR completes WR_FLUSH_ERR (the QP is in ERR).
  void FlushRecvQueue(uint32_t qi, Qp& q);

  // The bytes of a request packet: from the requester's memory, or saved
  // at its WR's completion; false when nothing can be sent.
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool FetchPayload(const ReqPacket& p, uint8_t* dst);
  // ACKs an executed payload packet at the last packet of its WR (with
  // coalescing while more of the requester's packets are on the wire).
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline void AckExecuted(const ReqPacket& p);
  void OnResp(const Event& e);
  void OnReadResp(uint32_t qi, Qp& q, uint64_t vpsn);
  // The send-queue sequence of the WR holding virtual PSN vpsn (done_seq
  // when none does).
  uint64_t WrSeqOfVpsn(const Qp& q, uint64_t vpsn) const;
  void OnTimer(const Event& e);
  // Starts a retry sequence from the oldest unacknowledged packet (a
  // timeout, a NAK-sequence error or an implied NAK), unless a NAK or
  // implied NAK meets one under way; RETRY_EXC_ERR once the budget is spent.
  void StartRetry(uint32_t qi, Qp& q, bool timeout);
  // Sends again from the oldest unacknowledged packet (a retransmission).
  void Rewind(uint32_t qi, Qp& q);
  // An acknowledgement moved the window: the retry budget restarts.
  void NoteProgress(Qp& q);
  // A response of responder `ri` carrying wire PSN `wire_psn`. It goes to
  // the QP the responder is connected to (its dest_qp_num on its peer
  // device), as RC hardware sends it: a request's BTH names only the
  // destination QP, so a responder cannot tell a stale requester (an old QP
  // whose peer QPN was reused) from its own peer. `src_qi` is the request's
  // source and `src_vpsn` the PSN in the source's own numbering; both are
  // used only by the test mutation sim_resp_to_source (the old model).
  // `payload_bytes`: a READ response's data (ACK/NAK: 0); serialized on the
  // responder's port.
  // `rnr_timer`: a kNakRnr's timer code (b's bits 8-12 of the event).
  void SendResp(uint32_t ri, Qp& resp_qp, uint32_t src_qi, RespKind kind, uint32_t wire_psn,
                uint64_t src_vpsn, uint64_t payload_bytes = 0, uint32_t rnr_timer = 0);
  // Completes the WRITEs acknowledged up to vpsn_last. A READ at the head
  // means its response was lost (implied NAK): retransmit from it, unless
  // `implied_nak` is false (then stop there).
  void AckUpTo(uint32_t qi, Qp& q, uint64_t vpsn_last, bool implied_nak = true);
  // Completes the WR at the head, then the executed local operations
  // behind it (CompleteOne: the head only).
  void CompleteHead(uint32_t qi, Qp& q);
  void CompleteOne(uint32_t qi, Qp& q);
  void FailAndFlush(uint32_t qi, Qp& q, uint64_t fail_seq, hal::WcStatus status);
  void EnterErr(uint32_t qi, Qp& q);
  // Saves, for each outstanding WRITE with packets already sent, the bytes
  // they carry (called before its CQE is emitted).
  void SaveSentPayloads(uint32_t qi, Qp& q);
  void EmitCqe(uint32_t qi, Qp& q, const Wr& w, hal::WcStatus status);
  // Fills an error CQE's garbage fields as the profile's device does.
  void FillErrorCqe(Cqe& c);
  // Sends a built CQE (send or receive) through q's completion FIFO: a
  // seeded CQE jitter, a late CQE, per-QP order.
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline void QueueCqe(uint32_t qi, Qp& q, const Cqe& c, bool flush);
  void DeliverPending(uint32_t qi);
  void WriteCqe(uint32_t qi, const Cqe& cqe, bool flush);
  void Overrun(uint32_t ci);
  void ScrubCq(uint32_t ci, uint32_t qi);
  // CQEs the live QPs sending to CQ ci can still produce (CqTruth::producible).
  uint64_t ProducibleOf(uint32_t ci) const;
  void DropQpCqes(uint32_t qi);  // pending ones
  void ResetQpQueues(Qp& q);
  void ArmTimer(uint32_t qi, Qp& q);
  uint64_t TimeoutNs(const Qp& q) const;
  // The cold half of a send-queue slot, and the WR's SGE k (< num_sge).
  static WrCold& ColdOf(Qp& q, const Wr& w) { return q.sq_cold[w.seq % q.sq_cold.size()]; }
  static const WrCold& ColdOf(const Qp& q, const Wr& w) {
    return q.sq_cold[w.seq % q.sq_cold.size()];
  }
  static const hal::Sge& SgeOf(const Qp& q, const Wr& w, uint32_t k) {
    return k == 0 ? w.sge0 : ColdOf(q, w).sges[k - 1];
  }
  // An inline WR's bytes into its inline_payload, at post_send.
  void CopyInline(Qp& q, const Wr& w);
  bool DmaLocal(uint32_t qi, Qp& q, const Wr& w, uint64_t off, uint64_t len, uint8_t* remote,
                bool to_remote);
  // The MR an rkey (an MR's or a window's) reaches for a request arriving
  // on responder QP `responder_qi` of device `dev`, or nullptr when refused.
  const Mr* ResolveRkey(uint32_t dev, uint32_t pd, uint32_t responder_qi, uint32_t rkey,
                        uint64_t addr, uint64_t len, uint32_t need_access) const;
  // `path_faults` (nullable) counts a straggler delay.
  // Reserves `payload_bytes` + headers on device `dev`'s egress port from
  // now; returns when the packet has left.
  uint64_t Serialize(uint32_t dev, uint64_t payload_bytes);
  uint64_t Arrival(uint64_t depart_ns, uint64_t* last_arrival_ns, uint64_t* path_faults);
  bool PacketLost(uint32_t src_dev, uint32_t dst_dev);
  void DestroyQpNow(uint32_t qi, bool scrub);
  void DestroyCqNow(uint32_t ci);
  void CloseCtxNow(uint32_t ci);
  void FreeQpn(uint32_t dev, uint32_t qpn);
  void LinkDown(uint32_t dev, uint64_t up_after_ns);
  void LinkUp(uint32_t dev);
  uint32_t FindDevice(uint32_t host, std::string_view name) const;
  uint32_t FindQpByNumber(uint32_t dev, uint32_t qpn) const;
  // FindQpByNumber(q.dst_dev, q.attr.dest_qp_num) (q.dst_dev must be a
  // device), cached in q: one lookup per request packet and per response
  // was the simulated RNIC's largest table search (bench/scale).
  uint32_t PeerQpOf(const Qp& q) const;
  // Ground truth on a move to RTR or RTS: if the QP it names names it back
  // (a connected pair), each side's RTR PSN must be the other's send PSN.
  // A handshake that pairs QPs by number across peer generations (QPNs are
  // reused) breaks it (kMispairedQps).
  void CheckPairing(uint32_t qi, const Qp& q);
  // Responder READ resources (Qp::read_res).
  static void NoteReadResource(Qp& r, uint32_t first_psn, uint32_t npkts);
  bool HasReadResource(const Qp& r, uint32_t psn) const;
  absl::Status ApplyScripted(const ScriptedFault& f);
  // ApplyScripted by target kind (fabric_faults.cc).
  absl::Status ApplyHostFault(const ScriptedFault& f);
  absl::Status ApplyDeviceFault(const ScriptedFault& f, uint32_t dev);
  absl::Status ApplyQpFault(const ScriptedFault& f, uint32_t qi);
  void ShadowCheck(const void* addr, uint64_t len, bool local, std::string_view what);

  // ---- stall kinds (fabric_stall.cc), drawn from stall_prng_ only when
  // their rate is not zero.
  bool StallChance(Ratio r);
  // Hangs q now; it recovers `ns` later (OnStall).
  void StartHang(uint32_t qi, Qp& q, uint64_t ns);
  // A modify of executing q to ERR: true when the move is held (q keeps
  // executing in its state; the hold's end applies ERR).
  bool MaybeHoldErr(uint32_t qi, Qp& q, uint32_t mask);
  void EndErrHold(uint32_t qi, Qp& q);
  // After a CQE reached the ring: maybe schedule its copy.
  // The delay of the next stall of one kind on a QP: the scripted one
  // (`*script_ns`, consumed), else a seeded 1..max_ns at rate r; 0: none.
  uint64_t NextStallNs(uint64_t* script_ns, Ratio r, uint64_t max_ns);
  void MaybeDupCqe(uint32_t qi, Qp& q, const Cqe& cqe);
  void PlaceDupCqe(const Cqe& cqe);
  void OnStall(const Event& e);

  FabricConfig config_;
  hal::DeviceAttr limits_;
  Prng prng_;
  Prng stall_prng_;  // the stall kinds' stream (config_.stall.seed)
  Prng recv_prng_;   // the receive-side kinds' stream (config_.recv.seed)
  uint64_t stall_tokens_ = 0;
  std::map<uint64_t, Cqe> dup_cqes_;   // by token: copies not yet delivered
  std::vector<uint8_t> recv_scratch_;  // one SEND packet's payload (amortised)
  VirtualClock* clock_;
  Trace* trace_;
  uint32_t current_actor_ = 0;
  uint64_t next_event_seq_ = 0;
  // Moves whenever a device's QP-number table changes (PeerQpOf's caches).
  uint64_t qpn_epoch_ = 0;
  uint64_t touched_hosts_ = 0;  // see TakeTouchedHosts
  // Future events in (t_ns, seq) order; the per-QP channels (ReqChan,
  // RespChan, CqeChan) are FIFOs in time.
  EventQueue<Event> events_;

  std::vector<Host> hosts_;
  std::vector<Device> devices_;
  std::vector<Context> ctxs_;
  std::vector<Pd> pds_;
  std::vector<Mr> mrs_;
  std::vector<Mw> mws_;
  std::vector<Channel> channels_;
  std::vector<Cq> cqs_;
  std::vector<std::vector<uint32_t>> owned_cqs_;  // by owner actor: CQ indices bound to it
  std::vector<std::unique_ptr<Qp>> qps_;

  std::vector<Violation> violations_;
  std::vector<uint64_t> calls_by_actor_;
  std::array<uint64_t, static_cast<size_t>(ObjectKind::kCount)> live_{};
  std::array<uint64_t, static_cast<size_t>(ObjectKind::kCount)> created_{};
  ShadowMemory shadow_;
  std::vector<ScriptedFault> missed_, external_;
  FabricStats stats_;
};

}  // namespace ferry::sim

#endif  // FERRY_SIM_RNIC_FABRIC_H_
