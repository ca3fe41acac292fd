// sim/net/sim_network.cc: the simulated control network (see sim_network.h).
//
// Owns the fate of every control message in a simulated world. What must
// stay true here: each decision is one seeded draw plus one trace event, in
// a fixed order per Send (loss, duplicate, then per copy: delay, reorder);
// containers are ordered; every queue is bounded by the plan.
#include "sim/net/sim_network.h"

#include <charconv>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/fnv1a.h"
#include "base/status_macros.h"

namespace ferry::sim {
namespace {

// Bookworm's Abseil has its own absl::string_view (not std::string_view),
// which StrCat needs.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Numeric identity of an address in the trace: fixed across processes.
uint64_t AddrId(std::string_view address) { return base::Fnv1a64(address); }

bool RatioValid(Ratio r) { return r.den > 0 && r.num <= r.den; }

std::string RatioString(Ratio r) { return absl::StrCat(r.num, "/", r.den); }

// Upper bound on copies handled by one DeliverDue call beyond the queue
// size at entry (delivery never creates copies, so this is just a guard).
constexpr size_t kDeliverDueSlack = 1;

}  // namespace

// ================================================================ address

absl::Status ValidateNetAddress(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("control address \"", Sv(address), "\" is not host:port"));
  }
  const std::string_view port = address.substr(colon + 1);
  uint32_t value = 0;
  const char* end = port.data() + port.size();
  auto [ptr, ec] = std::from_chars(port.data(), end, value);
  if (port.empty() || ec != std::errc() || ptr != end || value == 0 || value > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("control address \"", Sv(address), "\" has no port in [1, 65535]"));
  }
  return absl::OkStatus();
}

// ================================================================ plan

NetPlan NetPlan::Draw(Prng& prng) {
  NetPlan p;
  p.delay_ns_min = prng.Range(1, 50) * 1'000;
  p.delay_ns_max = p.delay_ns_min + prng.Range(0, 200) * 1'000;
  // Swarm: each kind is on for about half of the seeds, with its own rate.
  if (prng.Chance(Ratio{1, 2})) p.loss = Ratio{prng.Range(1, 20), 100};
  if (prng.Chance(Ratio{1, 2})) p.duplicate = Ratio{prng.Range(1, 10), 100};
  if (prng.Chance(Ratio{1, 2})) {
    p.reorder = Ratio{prng.Range(1, 30), 100};
    p.reorder_jitter_ns_max = prng.Range(1, 500) * 1'000;
  }
  FERRY_CHECK(p.Validate().ok());
  return p;
}

std::string NetPlan::ToString() const {
  return absl::StrFormat(
      "net plan: delay_ns=[%d,%d] loss=%s duplicate=%s reorder=%s reorder_jitter_ns_max=%d "
      "inbound_max=%d in_flight_max=%d",
      delay_ns_min, delay_ns_max, RatioString(loss), RatioString(duplicate), RatioString(reorder),
      reorder_jitter_ns_max, inbound_max, in_flight_max);
}

absl::Status NetPlan::Validate() const {
  if (!RatioValid(loss) || !RatioValid(duplicate) || !RatioValid(reorder)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid ratio in ", ToString()));
  }
  if (delay_ns_min > delay_ns_max) {
    return absl::InvalidArgumentError(absl::StrCat("delay_ns_min > delay_ns_max in ", ToString()));
  }
  // Keeps now + delay far from overflow for any realistic run length.
  constexpr uint64_t kDelayNsLimit = uint64_t{1} << 50;
  if (delay_ns_max > kDelayNsLimit || reorder_jitter_ns_max > kDelayNsLimit) {
    return absl::InvalidArgumentError(absl::StrCat("delay out of range in ", ToString()));
  }
  if (reorder.num > 0 && reorder_jitter_ns_max == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("reorder needs reorder_jitter_ns_max > 0 in ", ToString()));
  }
  if (inbound_max == 0 || in_flight_max == 0) {
    return absl::InvalidArgumentError(absl::StrCat("zero queue bound in ", ToString()));
  }
  return absl::OkStatus();
}

// ================================================================ counters

std::string_view NetDropName(NetDrop d) {
  switch (d) {
    case NetDrop::kLoss:
      return "loss";
    case NetDrop::kUnknownAddress:
      return "unknown_address";
    case NetDrop::kPartition:
      return "partition";
    case NetDrop::kSenderPaused:
      return "sender_paused";
    case NetDrop::kInFlightOverflow:
      return "in_flight_overflow";
    case NetDrop::kInboundOverflow:
      return "inbound_overflow";
    case NetDrop::kDestinationDown:
      return "destination_down";
    case NetDrop::kRestart:
      return "restart";
    case NetDrop::kUnbind:
      return "unbind";
  }
  return "?";
}

uint64_t NetCounters::Dropped(NetDrop d) const {
  auto it = dropped.find(d);
  return it == dropped.end() ? 0 : it->second;
}

uint64_t NetCounters::DroppedTotal() const {
  uint64_t total = 0;
  for (const auto& [reason, n] : dropped) total += n;
  return total;
}

std::string NetCounters::ToString() const {
  std::string out = absl::StrFormat(
      "net counters: sent=%d delivered=%d polled=%d duplicated=%d reordered=%d scripted=%d "
      "oversize_rejected=%d malformed_rejected=%d",
      sent, delivered, polled, duplicated, reordered, scripted, oversize_rejected,
      malformed_rejected);
  for (const auto& [reason, n] : dropped) {
    absl::StrAppend(&out, " drop_", Sv(NetDropName(reason)), "=", n);
  }
  return out;
}

// ================================================================ network

SimNetwork::SimNetwork(Prng prng, VirtualClock* clock, Trace* trace, NetPlan plan)
    : prng_(std::move(prng)), clock_(clock), trace_(trace), plan_(std::move(plan)) {
  FERRY_CHECK(clock_ != nullptr);
  FERRY_CHECK(plan_.Validate().ok());
  if (trace_ != nullptr) prng_.AttachTrace(trace_, kNetTraceStream);
  TraceEvent("net.plan", plan_.delay_ns_min, plan_.delay_ns_max,
             plan_.loss.num * 1'000'000 + plan_.duplicate.num * 1'000 + plan_.reorder.num);
}

SimNetwork::~SimNetwork() {
  // Every SimControlNet holds a pointer to this network.
  FERRY_CHECK_EQ(live_endpoints_, 0u);
  prng_.AttachTrace(nullptr, 0);
}

void SimNetwork::TraceEvent(std::string_view kind, uint64_t a, uint64_t b, uint64_t c) {
  if (trace_ == nullptr) return;
  trace_->SetTimeNs(clock_->NowNs());
  trace_->Event(kind, a, b, c);
}

bool SimNetwork::Roll(Ratio r) {
  FERRY_CHECK(RatioValid(r));
  if (r.num == 0) return false;
  return prng_.Chance(r);
}

uint64_t SimNetwork::RangeNs(uint64_t lo, uint64_t hi) {
  FERRY_CHECK_LE(lo, hi);
  if (lo == hi) return lo;
  return prng_.Range(lo, hi);
}

uint64_t SimNetwork::DrawDelayNs(uint64_t msg_seq) {
  uint64_t delay_ns = RangeNs(plan_.delay_ns_min, plan_.delay_ns_max);
  if (Roll(plan_.reorder)) {
    const uint64_t jitter_ns = RangeNs(1, plan_.reorder_jitter_ns_max);
    delay_ns += jitter_ns;
    ++counters_.reordered;
    TraceEvent("net.reorder", msg_seq, jitter_ns, 0);
  }
  return delay_ns;
}

absl::StatusOr<std::unique_ptr<SimControlNet>> SimNetwork::Bind(std::string_view address) {
  FERRY_RETURN_IF_ERROR(ValidateNetAddress(address));
  auto it = endpoints_.find(address);
  if (it == endpoints_.end()) it = endpoints_.emplace(std::string(address), Endpoint{}).first;
  Endpoint& ep = it->second;
  if (ep.bound) {
    return absl::AlreadyExistsError(absl::StrCat(
        "control address ", Sv(address), " is already bound (incarnation ", ep.incarnation, ")"));
  }
  FERRY_CHECK(ep.inbound.empty());  // dropped by Restart/Unbind
  ep.incarnation = next_incarnation_++;
  ep.bound = true;
  ep.paused = false;
  ++live_endpoints_;
  TraceEvent("net.bind", AddrId(address), ep.incarnation, 0);
  return std::unique_ptr<SimControlNet>(
      new SimControlNet(this, std::string(address), ep.incarnation, &ep));
}

absl::Status SimNetwork::CheckLive(std::string_view address, uint64_t incarnation) const {
  auto it = endpoints_.find(address);
  FERRY_CHECK(it != endpoints_.end());  // an endpoint exists only after Bind
  const Endpoint& ep = it->second;
  if (!ep.bound || ep.incarnation != incarnation) {
    return absl::FailedPreconditionError(absl::StrCat("control endpoint ", Sv(address),
                                                      " incarnation ", incarnation,
                                                      " was restarted or closed"));
  }
  return absl::OkStatus();
}

bool SimNetwork::Cut(std::string_view from, std::string_view to) const {
  return cut_.count({std::string(from), std::string(to)}) != 0;
}

void SimNetwork::Drop(NetDrop reason, std::string_view from, std::string_view to,
                      uint64_t msg_seq) {
  ++counters_.dropped[reason];
  TraceEvent("net.drop", static_cast<uint64_t>(reason), msg_seq, AddrId(from) ^ (AddrId(to) << 1));
}

void SimNetwork::Enqueue(const std::string& from, const std::string& to,
                         absl::Span<const uint8_t> bytes, uint64_t msg_seq, uint64_t delay_ns) {
  ++copies_created_;
  if (in_flight_.size() >= plan_.in_flight_max) {
    ++dropped_in_flight_;
    Drop(NetDrop::kInFlightOverflow, from, to, msg_seq);
    return;
  }
  const uint64_t deliver_at_ns = clock_->NowNs() + delay_ns;
  const uint64_t copy_seq = next_copy_seq_++;
  auto [it, inserted] =
      in_flight_.emplace(FlightKey{deliver_at_ns, copy_seq},
                         Copy{from, to, std::vector<uint8_t>(bytes.begin(), bytes.end()), msg_seq});
  FERRY_CHECK(inserted);  // copy_seq is unique
  TraceEvent("net.queue", msg_seq, copy_seq, deliver_at_ns);
}

// The next scripted action of the (from, to) pair, instead of the plan's
// draws: drop, duplicate, or a given delay.
absl::Status SimNetwork::SendScripted(ScriptMap::iterator script, const std::string& from_s,
                                      const std::string& to_s, absl::Span<const uint8_t> bytes,
                                      uint64_t msg_seq) {
  FERRY_CHECK(!script->second.empty());
  const ScriptedNetAction action = script->second.front();
  script->second.pop_front();
  if (script->second.empty()) scripted_.erase(script);
  ++counters_.scripted;
  TraceEvent("net.scripted", msg_seq, static_cast<uint64_t>(action.kind), action.delay_ns);
  switch (action.kind) {
    case ScriptedNetAction::Kind::kDrop:
      Drop(NetDrop::kLoss, from_s, to_s, msg_seq);
      return absl::OkStatus();
    case ScriptedNetAction::Kind::kDuplicate:
      ++counters_.duplicated;
      Enqueue(from_s, to_s, bytes, msg_seq, DrawDelayNs(msg_seq));
      Enqueue(from_s, to_s, bytes, msg_seq, DrawDelayNs(msg_seq));
      return absl::OkStatus();
    case ScriptedNetAction::Kind::kDelay:
      Enqueue(from_s, to_s, bytes, msg_seq, action.delay_ns);
      return absl::OkStatus();
  }
  FERRY_UNREACHABLE();
}

absl::Status SimNetwork::SendFrom(std::string_view from, uint64_t incarnation, std::string_view to,
                                  absl::Span<const uint8_t> bytes) {
  FERRY_RETURN_IF_ERROR(CheckLive(from, incarnation));
  if (absl::Status s = ValidateNetAddress(to); !s.ok()) {
    ++counters_.malformed_rejected;
    return s;
  }
  if (bytes.size() > hal::kMaxMessageBytes) {
    ++counters_.oversize_rejected;
    TraceEvent("net.oversize", AddrId(from), AddrId(to), bytes.size());
    return absl::InvalidArgumentError(
        absl::StrFormat("control message of %d bytes exceeds kMaxMessageBytes (%d)", bytes.size(),
                        hal::kMaxMessageBytes));
  }
  const uint64_t msg_seq = next_msg_seq_++;
  ++counters_.sent;
  TraceEvent("net.send", AddrId(from), AddrId(to), (msg_seq << 20) ^ bytes.size());

  const Endpoint& sender = endpoints_.find(from)->second;
  if (sender.paused) {
    Drop(NetDrop::kSenderPaused, from, to, msg_seq);
    return absl::OkStatus();
  }
  if (endpoints_.find(to) == endpoints_.end()) {
    Drop(NetDrop::kUnknownAddress, from, to, msg_seq);
    return absl::OkStatus();
  }
  if (Cut(from, to)) {
    Drop(NetDrop::kPartition, from, to, msg_seq);
    return absl::OkStatus();
  }
  const std::string from_s(from);
  const std::string to_s(to);

  auto script = scripted_.find({from_s, to_s});
  if (script != scripted_.end()) return SendScripted(script, from_s, to_s, bytes, msg_seq);

  if (Roll(plan_.loss)) {
    Drop(NetDrop::kLoss, from, to, msg_seq);
    return absl::OkStatus();
  }
  const bool duplicate = Roll(plan_.duplicate);
  Enqueue(from_s, to_s, bytes, msg_seq, DrawDelayNs(msg_seq));
  if (duplicate) {
    ++counters_.duplicated;
    TraceEvent("net.duplicate", msg_seq, 0, 0);
    Enqueue(from_s, to_s, bytes, msg_seq, DrawDelayNs(msg_seq));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<hal::Message>> SimNetwork::PollAt(std::string_view address,
                                                               uint64_t incarnation) {
  FERRY_RETURN_IF_ERROR(CheckLive(address, incarnation));
  Endpoint& ep = endpoints_.find(address)->second;
  if (ep.paused || ep.inbound.empty()) return std::optional<hal::Message>();
  hal::Message m = std::move(ep.inbound.front());
  ep.inbound.pop_front();
  ++counters_.polled;
  TraceEvent("net.poll", AddrId(address), AddrId(m.from), m.bytes.size());
  return std::optional<hal::Message>(std::move(m));
}

void SimNetwork::Unbind(std::string_view address, uint64_t incarnation) {
  auto it = endpoints_.find(address);
  FERRY_CHECK(it != endpoints_.end());
  Endpoint& ep = it->second;
  if (!ep.bound || ep.incarnation != incarnation) return;  // already restarted
  const uint64_t n = ep.inbound.size();
  if (n > 0) counters_.dropped[NetDrop::kUnbind] += n;
  dropped_from_queue_ += n;
  ep.inbound.clear();
  ep.bound = false;
  ep.paused = false;
  FERRY_CHECK_GT(live_endpoints_, 0u);
  --live_endpoints_;
  TraceEvent("net.unbind", AddrId(address), incarnation, n);
}

absl::Status SimNetwork::Partition(std::string_view a, std::string_view b, PartitionDir dir) {
  FERRY_RETURN_IF_ERROR(ValidateNetAddress(a));
  FERRY_RETURN_IF_ERROR(ValidateNetAddress(b));
  if (a == b) {
    return absl::InvalidArgumentError(absl::StrCat("cannot partition ", Sv(a), " from itself"));
  }
  cut_.insert({std::string(a), std::string(b)});
  if (dir == PartitionDir::kBoth) cut_.insert({std::string(b), std::string(a)});
  TraceEvent("net.partition", AddrId(a), AddrId(b), static_cast<uint64_t>(dir));
  return absl::OkStatus();
}

absl::Status SimNetwork::Heal(std::string_view a, std::string_view b) {
  FERRY_RETURN_IF_ERROR(ValidateNetAddress(a));
  FERRY_RETURN_IF_ERROR(ValidateNetAddress(b));
  cut_.erase({std::string(a), std::string(b)});
  cut_.erase({std::string(b), std::string(a)});
  TraceEvent("net.heal", AddrId(a), AddrId(b), 0);
  return absl::OkStatus();
}

void SimNetwork::HealAll() {
  TraceEvent("net.heal_all", cut_.size(), 0, 0);
  cut_.clear();
}

absl::Status SimNetwork::Pause(std::string_view address) {
  auto it = endpoints_.find(address);
  if (it == endpoints_.end()) {
    return absl::NotFoundError(
        absl::StrCat("pause: control address ", Sv(address), " never bound"));
  }
  it->second.paused = true;
  TraceEvent("net.pause", AddrId(address), 1, 0);
  return absl::OkStatus();
}

absl::Status SimNetwork::Resume(std::string_view address) {
  auto it = endpoints_.find(address);
  if (it == endpoints_.end()) {
    return absl::NotFoundError(
        absl::StrCat("resume: control address ", Sv(address), " never bound"));
  }
  it->second.paused = false;
  TraceEvent("net.pause", AddrId(address), 0, it->second.inbound.size());
  return absl::OkStatus();
}

absl::Status SimNetwork::Restart(std::string_view address) {
  auto it = endpoints_.find(address);
  if (it == endpoints_.end()) {
    return absl::NotFoundError(
        absl::StrCat("restart: control address ", Sv(address), " never bound"));
  }
  Endpoint& ep = it->second;
  const uint64_t n = ep.inbound.size();
  if (n > 0) counters_.dropped[NetDrop::kRestart] += n;
  dropped_from_queue_ += n;
  ep.inbound.clear();
  ep.paused = false;
  if (ep.bound) {
    ep.bound = false;
    FERRY_CHECK_GT(live_endpoints_, 0u);
    --live_endpoints_;
  }
  TraceEvent("net.restart", AddrId(address), ep.incarnation, n);
  return absl::OkStatus();
}

absl::Status SimNetwork::ScriptNext(std::string_view from, std::string_view to,
                                    ScriptedNetAction action) {
  FERRY_RETURN_IF_ERROR(ValidateNetAddress(from));
  FERRY_RETURN_IF_ERROR(ValidateNetAddress(to));
  if (action.kind == ScriptedNetAction::Kind::kDelay && action.delay_ns > (uint64_t{1} << 50)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scripted delay ", action.delay_ns, " ns out of range"));
  }
  auto& queue = scripted_[{std::string(from), std::string(to)}];
  if (queue.size() >= kScriptedPerLinkMax) {
    return absl::ResourceExhaustedError(absl::StrCat("more than ", kScriptedPerLinkMax,
                                                     " scripted actions pending on ", Sv(from),
                                                     " -> ", Sv(to)));
  }
  queue.push_back(action);
  TraceEvent("net.script", AddrId(from), AddrId(to), static_cast<uint64_t>(action.kind));
  return absl::OkStatus();
}

absl::Status SimNetwork::SetPlan(NetPlan plan) {
  FERRY_RETURN_IF_ERROR(plan.Validate());
  plan_ = std::move(plan);
  TraceEvent("net.plan", plan_.delay_ns_min, plan_.delay_ns_max,
             plan_.loss.num * 1'000'000 + plan_.duplicate.num * 1'000 + plan_.reorder.num);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- stepping

bool SimNetwork::Runnable() {
  return !in_flight_.empty() && in_flight_.begin()->first.first <= clock_->NowNs();
}

std::optional<uint64_t> SimNetwork::NextWakeNs() {
  if (in_flight_.empty()) return std::nullopt;
  return in_flight_.begin()->first.first;
}

void SimNetwork::DeliverOne() {
  FERRY_CHECK(Runnable());
  auto node = in_flight_.extract(in_flight_.begin());
  Copy& copy = node.mapped();
  auto it = endpoints_.find(copy.to);
  FERRY_CHECK(it != endpoints_.end());  // unknown destinations never enter the queue
  Endpoint& ep = it->second;
  NetDrop reason{};
  bool drop = true;
  if (!ep.bound) {
    reason = NetDrop::kDestinationDown;
  } else if (Cut(copy.from, copy.to)) {
    reason = NetDrop::kPartition;
  } else if (ep.inbound.size() >= plan_.inbound_max) {
    reason = NetDrop::kInboundOverflow;
  } else {
    drop = false;
  }
  if (drop) {
    ++dropped_in_flight_;
    Drop(reason, copy.from, copy.to, copy.msg_seq);
    return;
  }
  ++counters_.delivered;
  TraceEvent("net.deliver", copy.msg_seq, node.key().second, AddrId(copy.to));
  hal::Message m;
  // The network knows the real sender: its host is the source, whatever a
  // message may claim (sim addresses are "host:port").
  m.source_host = copy.from.substr(0, copy.from.rfind(':'));
  m.from = std::move(copy.from);
  m.bytes = std::move(copy.bytes);
  ep.inbound.push_back(std::move(m));
}

uint64_t SimNetwork::Step() {
  DeliverOne();
  CheckInvariants();
  return 0;  // delivery timing is modelled by the delay itself
}

size_t SimNetwork::DeliverDue() {
  const size_t limit = in_flight_.size() + kDeliverDueSlack;
  size_t n = 0;
  while (Runnable()) {
    FERRY_CHECK_LT(n, limit);
    DeliverOne();
    ++n;
  }
  CheckInvariants();
  return n;
}

size_t SimNetwork::queued(std::string_view address) const {
  auto it = endpoints_.find(address);
  return it == endpoints_.end() ? 0 : it->second.inbound.size();
}

bool SimNetwork::paused(std::string_view address) const {
  auto it = endpoints_.find(address);
  return it != endpoints_.end() && it->second.paused;
}

void SimNetwork::CheckInvariants() const {
  FERRY_CHECK_LE(in_flight_.size(), plan_.in_flight_max);
  FERRY_CHECK_EQ(copies_created_, in_flight_.size() + counters_.delivered + dropped_in_flight_);
  uint64_t queued_total = 0;
  size_t live = 0;
  for (const auto& [address, ep] : endpoints_) {
    // A SetPlan lowering inbound_max may leave a longer queue; it only drains.
    queued_total += ep.inbound.size();
    if (ep.bound) ++live;
    if (!ep.bound) FERRY_CHECK(ep.inbound.empty());
  }
  FERRY_CHECK_EQ(live, live_endpoints_);
  FERRY_CHECK_EQ(counters_.delivered, queued_total + counters_.polled + dropped_from_queue_);
}

// ================================================================ endpoint

SimControlNet::~SimControlNet() { net_->Unbind(address_, incarnation_); }

absl::Status SimControlNet::Send(std::string_view peer, absl::Span<const uint8_t> bytes) {
  return net_->SendFrom(address_, incarnation_, peer, bytes);
}

size_t SimControlNet::pollable() const {
  // CheckLive's rule on the endpoint record, without a lookup (asked at
  // every scheduler step).
  const SimNetwork::Endpoint& ep = *endpoint_;
  if (!ep.bound || ep.incarnation != incarnation_ || ep.paused) return 0;
  return ep.inbound.size();
}

absl::StatusOr<std::optional<hal::Message>> SimControlNet::Poll(uint64_t /*timeout_ns*/) {
  return net_->PollAt(address_, incarnation_);
}

}  // namespace ferry::sim
