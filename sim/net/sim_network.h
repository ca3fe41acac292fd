// sim/net/sim_network.h: the simulated control network (issue 3 item 2).
//
// Owns: SimNetwork (one per simulated world, shared by every host: it knows
// every endpoint address, holds the in-flight messages on a virtual-time
// queue and delivers due ones as a sim::Actor), SimControlNet (one endpoint,
// implements hal::ControlNet), NetPlan (the per-seed fault rates) and
// NetCounters (what was injected).
//
// Model: unreliable, unordered datagrams (hal/control_net.h). A Send draws
// the message's fate from the network's seeded Prng at send time: loss,
// duplication, a delay from the plan's range, and reordering (extra
// delivery-time jitter). Each surviving copy is queued in flight keyed by
// (deliver_at_ns, seq); the network, stepped by the scheduler, moves due
// copies into the destination's bounded inbound queue, from which Poll takes
// them. Poll never waits: timeouts are the scheduler's job (virtual time).
// Scripted faults (ScriptNext, Partition, Pause, Restart) act on top of the
// rates, so scenarios can say "drop the next message from A to B".
//
// Thread safety: none. The simulated world is single-threaded; this is a
// deliberate narrowing of hal::ControlNet's "Send and Poll from different
// threads" (a simulated engine never has threads).
//
// What must stay true:
// - Determinism: every decision depends only on the seed, the plan, the
//   scripted calls and the order of calls; every draw goes through the
//   network's Prng (attached to the trace) and every decision is a
//   trace Event. Only ordered containers are iterated.
// - Conservation: every copy created (accepted sends + duplicates) is either
//   in flight, delivered into an inbound queue, or counted as dropped once;
//   every delivered copy is either still queued, polled, or counted as
//   dropped by restart/unbind. CheckInvariants() asserts both.
// - Bounds: at most plan.in_flight_max copies in flight and
//   plan.inbound_max per endpoint's inbound queue; overflows are counted
//   drops, never errors and never growth.
// - Messages longer than hal::kMaxMessageBytes are rejected with
//   kInvalidArgument and never queued; a malformed address is
//   kInvalidArgument; an unknown destination is a silent counted drop.
// - The network outlives every SimControlNet bound to it (checked).
#ifndef FERRY_SIM_NET_SIM_NETWORK_H_
#define FERRY_SIM_NET_SIM_NETWORK_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "hal/control_net.h"
#include "sim/prng.h"
#include "sim/scheduler.h"
#include "sim/trace.h"
#include "sim/virtual_clock.h"

namespace ferry::sim {

// Trace stream tag for the network's Prng draws ("NET").
inline constexpr uint32_t kNetTraceStream = 0x4e4554;

// Per-seed fault rates and bounds. All integers; probabilities are Ratio.
struct NetPlan {
  uint64_t delay_ns_min = 1'000;       // every copy waits at least this long
  uint64_t delay_ns_max = 1'000;       // inclusive; >= delay_ns_min
  Ratio loss = kNever;                 // copy-independent: the message is lost
  Ratio duplicate = kNever;            // one extra copy (its own delay draw)
  Ratio reorder = kNever;              // a copy gets extra jitter ...
  uint64_t reorder_jitter_ns_max = 0;  // ... uniform in [1, this]
  size_t inbound_max = 1024;           // per endpoint: delivered, not yet polled
  size_t in_flight_max = 65536;        // whole network

  // Draws a swarm-style plan from `prng`: each fault kind is switched on or
  // off per seed, and when on gets a rate drawn from a small integer range.
  static NetPlan Draw(Prng& prng);
  // One line with every field, e.g. "net plan: delay_ns=[1000,5000] ...".
  std::string ToString() const;
  // kInvalidArgument when a field is out of range (den 0, num > den,
  // min > max, zero bounds).
  absl::Status Validate() const;
};

// Why a copy did not reach an inbound queue (also the trace's reason code).
enum class NetDrop : uint8_t {
  kLoss = 1,          // rated or scripted loss
  kUnknownAddress,    // destination never bound
  kPartition,         // link cut at send or at delivery time
  kSenderPaused,      // a paused endpoint sends nothing
  kInFlightOverflow,  // network queue full at send
  kInboundOverflow,   // destination's inbound queue full at delivery
  kDestinationDown,   // destination known but not bound (restarted/closed)
  kRestart,           // queued inbound dropped by Restart
  kUnbind,            // queued inbound dropped when the endpoint closed
};
std::string_view NetDropName(NetDrop d);

struct NetCounters {
  uint64_t sent = 0;                // Send calls accepted (OK returned)
  uint64_t oversize_rejected = 0;   // Send -> kInvalidArgument (size)
  uint64_t malformed_rejected = 0;  // Send -> kInvalidArgument (address)
  uint64_t duplicated = 0;          // extra copies created
  uint64_t reordered = 0;           // copies given reorder jitter
  uint64_t scripted = 0;            // scripted per-message actions applied
  uint64_t delivered = 0;           // copies put into an inbound queue
  uint64_t polled = 0;              // copies returned by Poll
  // Drops by reason; absent key = none.
  std::map<NetDrop, uint64_t> dropped;

  uint64_t Dropped(NetDrop d) const;
  uint64_t DroppedTotal() const;
  // One line: "net counters: sent=.. delivered=.. loss=.. ...".
  std::string ToString() const;
};

enum class PartitionDir : uint8_t {
  kOneWay,  // a -> b cut, b -> a still flows
  kBoth,
};

// A scripted action for the next message on one directed link.
struct ScriptedNetAction {
  enum class Kind : uint8_t { kDrop, kDuplicate, kDelay };
  Kind kind = Kind::kDrop;
  uint64_t delay_ns = 0;  // kDelay: exact delay of the message (no jitter)
};

class SimControlNet;

class SimNetwork final : public Actor {
 public:
  // Scripted actions pending per directed link (bounded).
  static constexpr size_t kScriptedPerLinkMax = 1024;

  // `clock` and `trace` (may be null) must outlive the network. The network
  // attaches `prng` to `trace` under kNetTraceStream. CHECK-fails on an
  // invalid plan (validate with NetPlan::Validate first).
  SimNetwork(Prng prng, VirtualClock* clock, Trace* trace, NetPlan plan);
  ~SimNetwork() override;
  SimNetwork(const SimNetwork&) = delete;
  SimNetwork& operator=(const SimNetwork&) = delete;

  // Creates the endpoint listening on `address` ("host:port").
  // kInvalidArgument for a malformed address; kAlreadyExists while another
  // live endpoint holds it. Binding again after Restart (or after the
  // previous endpoint was destroyed) starts a new incarnation.
  absl::StatusOr<std::unique_ptr<SimControlNet>> Bind(std::string_view address);

  // ------------------------------------------------------------ scripting
  // Cuts a -> b (and b -> a for kBoth). Copies already in flight on a cut
  // link are dropped when they come due.
  absl::Status Partition(std::string_view a, std::string_view b, PartitionDir dir);
  // Restores both directions between a and b.
  absl::Status Heal(std::string_view a, std::string_view b);
  void HealAll();
  // Paused: inbound copies queue up but Poll returns nothing, and Send
  // drops silently (counted). Resume makes the queued copies pollable.
  absl::Status Pause(std::string_view address);
  absl::Status Resume(std::string_view address);
  // The process at `address` restarts: its queued inbound copies are
  // dropped (counted), it is unpaused, and the bound SimControlNet becomes
  // stale (its calls fail kFailedPrecondition). Bind the address again for
  // the new incarnation. Copies still in flight arrive at whichever
  // incarnation is bound when they come due (a datagram network has no
  // connections to reset). kNotFound for an address never bound.
  absl::Status Restart(std::string_view address);
  // Applies `action` to the next message sent from -> to (FIFO per link),
  // instead of the rated draws for that message.
  absl::Status ScriptNext(std::string_view from, std::string_view to, ScriptedNetAction action);
  // Replaces the rates (validated). Copies already in flight keep their fate.
  absl::Status SetPlan(NetPlan plan);
  // Restarts the network's draws (delays, faults) from `seed`.
  void Reseed(uint64_t seed) { prng_.Reseed(seed); }

  // ------------------------------------------------------------ stepping
  // Actor: runnable when a copy is due; Step delivers exactly one due copy.
  std::string_view name() const override { return "net"; }
  bool Runnable() override;
  uint64_t Step() override;
  std::optional<uint64_t> NextWakeNs() override;
  bool HasWork() override { return !in_flight_.empty(); }
  // Delivers every copy due now (for tests and drivers without a
  // scheduler). Returns how many were processed (delivered or dropped).
  size_t DeliverDue();

  // ------------------------------------------------------------ inspection
  const NetPlan& plan() const { return plan_; }
  const NetCounters& counters() const { return counters_; }
  size_t in_flight() const { return in_flight_.size(); }
  // Delivered, not yet polled, for `address` (0 when unknown).
  size_t queued(std::string_view address) const;
  bool paused(std::string_view address) const;
  // Asserts conservation and bounds (FERRY_CHECK); cheap enough per step.
  void CheckInvariants() const;

 private:
  friend class SimControlNet;

  struct Endpoint {
    uint64_t incarnation = 0;  // 0 = never bound
    bool bound = false;
    bool paused = false;
    std::deque<hal::Message> inbound;  // size <= plan_.inbound_max
  };
  struct Copy {
    std::string from;
    std::string to;
    std::vector<uint8_t> bytes;
    uint64_t msg_seq = 0;  // the Send this copy came from
  };
  using FlightKey = std::pair<uint64_t, uint64_t>;  // (deliver_at_ns, copy seq)

  // Endpoint-facing calls (from SimControlNet).
  absl::Status SendFrom(std::string_view from, uint64_t incarnation, std::string_view to,
                        absl::Span<const uint8_t> bytes);
  absl::StatusOr<std::optional<hal::Message>> PollAt(std::string_view address,
                                                     uint64_t incarnation);
  void Unbind(std::string_view address, uint64_t incarnation);
  absl::Status CheckLive(std::string_view address, uint64_t incarnation) const;

  bool Cut(std::string_view from, std::string_view to) const;
  void Drop(NetDrop reason, std::string_view from, std::string_view to, uint64_t msg_seq);
  // Scripted actions per (from, to), consumed one per message in order.
  using ScriptMap = std::map<std::pair<std::string, std::string>, std::deque<ScriptedNetAction>>;
  absl::Status SendScripted(ScriptMap::iterator script, const std::string& from_s,
                            const std::string& to_s, absl::Span<const uint8_t> bytes,
                            uint64_t msg_seq);
  void Enqueue(const std::string& from, const std::string& to, absl::Span<const uint8_t> bytes,
               uint64_t msg_seq, uint64_t delay_ns);
  void DeliverOne();
  // Draw helpers that skip the draw when the outcome is fixed (num == 0,
  // lo == hi), so a plan without a fault kind spends no draws on it.
  bool Roll(Ratio r);
  uint64_t RangeNs(uint64_t lo, uint64_t hi);
  uint64_t DrawDelayNs(uint64_t msg_seq);
  void TraceEvent(std::string_view kind, uint64_t a, uint64_t b, uint64_t c);

  Prng prng_;
  VirtualClock* clock_;
  Trace* trace_;
  NetPlan plan_;
  NetCounters counters_;
  // Never erased: a SimControlNet keeps a pointer to its record.
  std::map<std::string, Endpoint, std::less<>> endpoints_;
  std::map<FlightKey, Copy> in_flight_;
  std::set<std::pair<std::string, std::string>> cut_;  // directed (from, to)
  ScriptMap scripted_;
  uint64_t next_msg_seq_ = 1;
  uint64_t next_copy_seq_ = 1;
  uint64_t next_incarnation_ = 1;
  size_t live_endpoints_ = 0;
  // Conservation bookkeeping (see CheckInvariants).
  uint64_t copies_created_ = 0;
  uint64_t dropped_in_flight_ = 0;   // drops of copies that had been created
  uint64_t dropped_from_queue_ = 0;  // restart/unbind drops of delivered copies
};

// One endpoint of the simulated control network. Not thread-safe (see
// above). Must not outlive its SimNetwork.
class SimControlNet final : public hal::ControlNet {
 public:
  ~SimControlNet() override;
  SimControlNet(const SimControlNet&) = delete;
  SimControlNet& operator=(const SimControlNet&) = delete;

  std::string LocalAddress() const override { return address_; }
  // Never blocks. OK when the message was accepted by the network (which
  // may still lose it); kInvalidArgument for an oversize message or a
  // malformed peer address; kFailedPrecondition after Restart.
  absl::Status Send(std::string_view peer, absl::Span<const uint8_t> bytes) override;
  // Returns immediately with the oldest delivered message, or nullopt
  // (always nullopt while paused). `timeout_ns` is ignored: waiting is
  // modelled by the scheduler advancing virtual time.
  absl::StatusOr<std::optional<hal::Message>> Poll(uint64_t timeout_ns) override;

  uint64_t incarnation() const { return incarnation_; }
  // How many messages Poll would return now without more deliveries (0
  // while paused or after Restart): lets an actor report Runnable().
  size_t pollable() const;

 private:
  friend class SimNetwork;
  SimControlNet(SimNetwork* net, std::string address, uint64_t incarnation,
                const SimNetwork::Endpoint* endpoint)
      : net_(net), address_(std::move(address)), incarnation_(incarnation), endpoint_(endpoint) {}
  SimNetwork* net_;
  std::string address_;
  uint64_t incarnation_;
  // The network's record of address_ (endpoints are never erased, so the
  // pointer stays valid): pollable() reads it without a lookup.
  const SimNetwork::Endpoint* endpoint_;
};

// "host:port" with a non-empty host and a decimal port in [1, 65535].
absl::Status ValidateNetAddress(std::string_view address);

}  // namespace ferry::sim

#endif  // FERRY_SIM_NET_SIM_NETWORK_H_
