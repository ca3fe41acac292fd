// sim/demo/demo_world.cc: the producer/consumer toy world (see demo_world.h).
//
// Owns: the world's rules and the derivation order of its Prngs. What must
// stay true: a producer never has more than credits_per_consumer messages
// outstanding (in flight, queued or not yet credited back) towards one
// consumer, so every queue is bounded; every message sent is delivered and
// consumed exactly once unless it is the dropped one; timers capture only
// objects that outlive the clock (the World owns both).
#include "sim/demo/demo_world.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/fnv1a.h"

namespace ferry::sim::demo {
namespace {

constexpr uint32_t kPctDepth = 3;
constexpr uint64_t kSendCostNs = 300;
constexpr uint64_t kPauseMinNs = 5'000;
constexpr uint64_t kPauseMaxNs = 80'000;
constexpr Ratio kPauseChance{1, 4};
constexpr uint64_t kNetDelayMinNs = 1'000;
constexpr uint64_t kNetDelayMaxNs = 40'000;
constexpr uint64_t kCreditDelayMinNs = 1'000;
constexpr uint64_t kCreditDelayMaxNs = 20'000;
constexpr uint64_t kConsumeMinNs = 500;
constexpr uint64_t kConsumeMaxNs = 6'000;

struct Message {
  uint32_t producer = 0;
  uint32_t consumer = 0;
  uint64_t seq = 0;  // per producer
  uint64_t payload = 0;
};

class World;

class Producer final : public Actor {
 public:
  Producer(World* world, uint32_t id, Prng prng, uint32_t consumers, uint32_t credits,
           uint32_t messages)
      : world_(world),
        id_(id),
        name_(absl::StrCat("producer-", id)),
        prng_(std::move(prng)),
        credits_(consumers, credits),
        remaining_(messages) {}

  std::string_view name() const override { return name_; }
  bool Runnable() override;
  uint64_t Step() override;
  std::optional<uint64_t> NextWakeNs() override;
  bool HasWork() override { return remaining_ > 0; }

  void ReturnCredit(uint32_t consumer) {
    FERRY_CHECK_LT(consumer, credits_.size());
    ++credits_[consumer];
  }

 private:
  World* world_;
  uint32_t id_;
  std::string name_;
  Prng prng_;
  std::vector<uint32_t> credits_;  // per consumer
  uint32_t remaining_;
  uint64_t next_seq_ = 0;
  uint64_t next_send_ns_ = 0;
};

class Consumer final : public Actor {
 public:
  Consumer(World* world, uint32_t id, Prng prng, size_t inbox_max)
      : world_(world),
        id_(id),
        name_(absl::StrCat("consumer-", id)),
        prng_(std::move(prng)),
        inbox_max_(inbox_max) {}

  std::string_view name() const override { return name_; }
  bool Runnable() override { return !inbox_.empty(); }
  uint64_t Step() override;
  bool HasWork() override { return !inbox_.empty() || in_flight_ > 0; }

  void Expect() { ++in_flight_; }
  void Deliver(const Message& m) {
    FERRY_CHECK_GT(in_flight_, 0U);
    --in_flight_;
    inbox_.push_back(m);
    FERRY_CHECK_LE(inbox_.size(), inbox_max_);
  }

 private:
  World* world_;
  uint32_t id_;
  std::string name_;
  Prng prng_;
  size_t inbox_max_;
  std::deque<Message> inbox_;
  uint64_t in_flight_ = 0;
};

class World {
 public:
  World(uint64_t seed, Trace* trace, const DemoOptions& options)
      : options_(options), root_(seed), trace_(trace) {
    root_.SetMutations(options.mutations);
    if (trace != nullptr) root_.AttachTrace(trace, kRootStream);
    // Derivation order (fixed forever): scheduler, network, producers,
    // consumers.
    scheduler_ = std::make_unique<Scheduler>(root_.Fork(), &clock_, trace);
    net_ = root_.Fork();
    if (trace != nullptr) net_.AttachTrace(trace, kNetworkStream);
    for (uint32_t p = 0; p < options.producers; ++p) {
      Prng prng = root_.Fork();
      if (trace != nullptr) prng.AttachTrace(trace, kProducerStreamBase + p);
      producers_.push_back(std::make_unique<Producer>(this, p, std::move(prng), options.consumers,
                                                      options.credits_per_consumer,
                                                      options.messages_per_producer));
    }
    const size_t inbox_max = size_t{options.producers} * options.credits_per_consumer;
    for (uint32_t c = 0; c < options.consumers; ++c) {
      Prng prng = root_.Fork();
      if (trace != nullptr) prng.AttachTrace(trace, kConsumerStreamBase + c);
      consumers_.push_back(std::make_unique<Consumer>(this, c, std::move(prng), inbox_max));
    }
    for (auto& p : producers_) scheduler_->AddActor(p.get());
    for (auto& c : consumers_) scheduler_->AddActor(c.get());
    expected_ = uint64_t{options.producers} * options.messages_per_producer;
  }

  DemoResult Run() {
    DemoResult result;
    // One send and one consume step per message: change points fall inside
    // the run.
    result.plan = scheduler_->MakePlan(options_.force_mode, kPctDepth, 2 * expected_);
    for (auto& p : producers_) absl::StrAppend(&result.actor_names, std::string(p->name()), " ");
    for (auto& c : consumers_) absl::StrAppend(&result.actor_names, std::string(c->name()), " ");
    if (!result.actor_names.empty()) result.actor_names.pop_back();
    result.run = scheduler_->Run([this] { return consumed_ == expected_; }, options_.step_max,
                                 options_.time_max_ns);
    result.sent = sent_;
    result.delivered = delivered_;
    result.consumed = consumed_;
    result.expected = expected_;
    FERRY_CHECK_LE(consumed_, delivered_);
    FERRY_CHECK_LE(delivered_, sent_);
    result.digest = base::Fnv1a64UpdateU64(digest_, clock_.NowNs());
    return result;
  }

  uint64_t NowNs() { return clock_.NowNs(); }

  void Send(const Message& m) {
    const uint64_t index = sent_++;
    Consumer* consumer = consumers_[m.consumer].get();
    consumer->Expect();
    if (options_.drop_message.has_value() && *options_.drop_message == index) {
      if (trace_ != nullptr) trace_->Event("demo_drop", m.producer, m.consumer, m.seq);
      return;  // lost: the consumer waits for it forever
    }
    const uint64_t delay_ns = net_.Range(kNetDelayMinNs, kNetDelayMaxNs);
    clock_.AddTimer(clock_.NowNs() + delay_ns, [this, consumer, m] {
      consumer->Deliver(m);
      ++delivered_;
    });
  }

  void Consumed(const Message& m) {
    ++consumed_;
    FERRY_CHECK_LE(consumed_, expected_);
    digest_ = base::Fnv1a64UpdateU64(digest_, (uint64_t{m.producer} << 32) | m.consumer);
    digest_ = base::Fnv1a64UpdateU64(digest_, m.seq);
    digest_ = base::Fnv1a64UpdateU64(digest_, m.payload);
    const uint64_t delay_ns = net_.Range(kCreditDelayMinNs, kCreditDelayMaxNs);
    Producer* producer = producers_[m.producer].get();
    const uint32_t consumer = m.consumer;
    clock_.AddTimer(clock_.NowNs() + delay_ns,
                    [producer, consumer] { producer->ReturnCredit(consumer); });
  }

 private:
  DemoOptions options_;
  Prng root_;
  Trace* trace_;
  VirtualClock clock_;
  Prng net_{0};
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Producer>> producers_;
  std::vector<std::unique_ptr<Consumer>> consumers_;
  uint64_t expected_ = 0;
  uint64_t sent_ = 0;
  uint64_t delivered_ = 0;
  uint64_t consumed_ = 0;
  uint64_t digest_ = base::kFnv1a64Offset;
};

bool Producer::Runnable() {
  if (remaining_ == 0 || world_->NowNs() < next_send_ns_) return false;
  return std::any_of(credits_.begin(), credits_.end(), [](uint32_t c) { return c > 0; });
}

std::optional<uint64_t> Producer::NextWakeNs() {
  if (remaining_ > 0 && next_send_ns_ > world_->NowNs()) return next_send_ns_;
  return std::nullopt;
}

uint64_t Producer::Step() {
  FERRY_CHECK(Runnable());
  // Consumers with a credit, in index order; pick one uniformly.
  uint32_t open[16];
  uint32_t open_count = 0;
  for (uint32_t c = 0; c < credits_.size(); ++c) {
    if (credits_[c] > 0) open[open_count++] = c;
  }
  FERRY_CHECK_GT(open_count, 0U);
  const uint32_t target = open[prng_.Below(open_count)];
  --credits_[target];
  --remaining_;
  world_->Send(Message{id_, target, next_seq_++, prng_.Next()});
  if (prng_.Chance(kPauseChance)) {
    next_send_ns_ = world_->NowNs() + prng_.Range(kPauseMinNs, kPauseMaxNs);
  }
  return kSendCostNs;
}

uint64_t Consumer::Step() {
  FERRY_CHECK(!inbox_.empty());
  const Message m = inbox_.front();
  inbox_.pop_front();
  FERRY_CHECK_EQ(m.consumer, id_);
  world_->Consumed(m);
  return prng_.Range(kConsumeMinNs, kConsumeMaxNs);
}

DemoOptions Clamped(const DemoOptions& in) {
  DemoOptions o = in;
  o.producers = std::clamp<uint32_t>(o.producers, 1, 16);
  o.consumers = std::clamp<uint32_t>(o.consumers, 1, 16);
  o.messages_per_producer = std::clamp<uint32_t>(o.messages_per_producer, 1, 10000);
  o.credits_per_consumer = std::clamp<uint32_t>(o.credits_per_consumer, 1, 64);
  return o;
}

}  // namespace

DemoResult RunDemo(uint64_t seed, Trace* trace, const DemoOptions& options) {
  World world(seed, trace, Clamped(options));
  return world.Run();
}

}  // namespace ferry::sim::demo
