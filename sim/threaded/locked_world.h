// sim/threaded/locked_world.h: the single-threaded simulated world
// (sim::Fabric, sim::SimNetwork, sim::VirtualClock) made usable by the
// production runtime's threads: the threaded stress test and
// ferry::testing::SimCluster (testing/sim_cluster.cc) run Ferry's real
// threaded runtime on it.
//
// Owns: one world mutex and decorators of the four ports that take it
// around every call (LockedVerbs, LockedControlNet, LockedClock,
// LockedEntropy), a pump thread that steps the fabric and the control
// network under the same mutex, and world timers (At: pauses, partitions,
// scripted network faults of SimCluster) the pump runs under it too.
//
// Thread safety: every decorator method and the pump may run on any thread
// at any time; the world is only ever touched with the world mutex held, so
// the fabric and the network stay single-threaded as they require
// (sim/rnic/fabric.h, sim/net/sim_network.h).
//
// Time (what must stay true): virtual time advances only in the pump, and
// only "tied to progress": when the fabric or the network has an event, the
// pump processes every event due now or jumps the clock to the earliest
// one; when neither has any, it advances the clock by idle_tick_ns and
// sleeps idle_sleep_ns of real time, so engine timers (handshake resends,
// deadlines) still fire, slowly, while nothing is in flight. The clock
// never decreases. DMA bytes are copied by the pump with the mutex held;
// the engine learns of them by a poll under the same mutex, so a task
// published COMPLETED happens-after its bytes landed (TSan sees the chain).
#ifndef FERRY_SIM_THREADED_LOCKED_WORLD_H_
#define FERRY_SIM_THREADED_LOCKED_WORLD_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/check.h"
#include "hal/clock.h"
#include "hal/control_net.h"
#include "hal/entropy.h"
#include "hal/verbs.h"
#include "sim/net/sim_network.h"
#include "sim/prng.h"
#include "sim/rnic/fabric.h"
#include "sim/virtual_clock.h"

namespace ferry::sim {

// The world mutex: a std::mutex (pthread), not absl::Mutex, because the
// system Abseil is not built with ThreadSanitizer, so TSan cannot see
// absl::Mutex's happens-before edges; pthread mutexes are intercepted.
// Annotated for clang -Wthread-safety.
class ABSL_LOCKABLE WorldMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { m_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { m_.unlock(); }

 private:
  std::mutex m_;
};

class ABSL_SCOPED_LOCKABLE WorldLock {
 public:
  explicit WorldLock(WorldMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~WorldLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  WorldLock(const WorldLock&) = delete;
  WorldLock& operator=(const WorldLock&) = delete;

 private:
  WorldMutex* const mu_;
};

// hal::Verbs decorator: every call holds the world mutex.
class LockedVerbs final : public hal::Verbs {
 public:
  LockedVerbs(WorldMutex* mu, std::unique_ptr<hal::Verbs> inner, sim::Fabric* fabric)
      : mu_(mu), inner_(std::move(inner)), fabric_(fabric) {}

#define FERRY_LOCKED_(call) \
  WorldLock l(mu_);         \
  return inner_->call

  absl::StatusOr<std::vector<hal::DeviceInfo>> ListDevices() override {
    FERRY_LOCKED_(ListDevices());
  }
  absl::StatusOr<hal::ContextHandle> OpenDevice(std::string_view name) override {
    FERRY_LOCKED_(OpenDevice(name));
  }
  absl::Status CloseDevice(hal::ContextHandle ctx) override { FERRY_LOCKED_(CloseDevice(ctx)); }
  absl::StatusOr<hal::DeviceAttr> QueryDevice(hal::ContextHandle ctx) override {
    FERRY_LOCKED_(QueryDevice(ctx));
  }
  absl::StatusOr<hal::PortAttr> QueryPort(hal::ContextHandle ctx, uint8_t port) override {
    FERRY_LOCKED_(QueryPort(ctx, port));
  }
  absl::StatusOr<hal::Gid> QueryGid(hal::ContextHandle ctx, uint8_t port, int index) override {
    FERRY_LOCKED_(QueryGid(ctx, port, index));
  }
  absl::StatusOr<hal::GidEntry> QueryGidEntry(hal::ContextHandle ctx, uint8_t port,
                                              int index) override {
    FERRY_LOCKED_(QueryGidEntry(ctx, port, index));
  }
  absl::StatusOr<hal::PdHandle> AllocPd(hal::ContextHandle ctx) override {
    FERRY_LOCKED_(AllocPd(ctx));
  }
  absl::Status DeallocPd(hal::PdHandle pd) override { FERRY_LOCKED_(DeallocPd(pd)); }
  absl::StatusOr<hal::MrInfo> RegMr(hal::PdHandle pd, void* addr, size_t length,
                                    uint32_t access) override {
    FERRY_LOCKED_(RegMr(pd, addr, length, access));
  }
  absl::Status DeregMr(hal::MrHandle mr) override { FERRY_LOCKED_(DeregMr(mr)); }
  absl::StatusOr<hal::MwInfo> AllocMw(hal::PdHandle pd, hal::MwType type) override {
    FERRY_LOCKED_(AllocMw(pd, type));
  }
  absl::Status DeallocMw(hal::MwHandle mw) override { FERRY_LOCKED_(DeallocMw(mw)); }
  absl::StatusOr<hal::CompChannelHandle> CreateCompChannel(hal::ContextHandle ctx) override {
    FERRY_LOCKED_(CreateCompChannel(ctx));
  }
  absl::Status DestroyCompChannel(hal::CompChannelHandle ch) override {
    FERRY_LOCKED_(DestroyCompChannel(ch));
  }
  absl::StatusOr<hal::CqHandle> GetCqEvent(hal::CompChannelHandle ch) override {
    FERRY_LOCKED_(GetCqEvent(ch));
  }
  void AckCqEvents(hal::CqHandle cq, uint32_t count) override {
    FERRY_LOCKED_(AckCqEvents(cq, count));
  }
  absl::StatusOr<hal::CqInfo> CreateCq(hal::ContextHandle ctx, uint32_t cqe,
                                       hal::CompChannelHandle ch) override {
    FERRY_LOCKED_(CreateCq(ctx, cqe, ch));
  }
  absl::Status DestroyCq(hal::CqHandle cq) override { FERRY_LOCKED_(DestroyCq(cq)); }
  absl::StatusOr<uint32_t> PollCq(hal::CqHandle cq, absl::Span<hal::WorkCompletion> out) override {
    FERRY_LOCKED_(PollCq(cq, out));
  }
  absl::Status ReqNotifyCq(hal::CqHandle cq, bool solicited_only) override {
    FERRY_LOCKED_(ReqNotifyCq(cq, solicited_only));
  }
  absl::StatusOr<hal::QpInfo> CreateQp(hal::PdHandle pd, const hal::QpInitAttr& init) override {
    FERRY_LOCKED_(CreateQp(pd, init));
  }
  absl::Status ModifyQp(hal::QpHandle qp, const hal::QpAttr& attr, uint32_t mask) override {
    FERRY_LOCKED_(ModifyQp(qp, attr, mask));
  }
  absl::StatusOr<hal::QpAttr> QueryQp(hal::QpHandle qp) override { FERRY_LOCKED_(QueryQp(qp)); }
  // ibv_destroy_qp waits until every async event of the QP that was gotten
  // has been acked; with threads, another thread (the async reader) acks it
  // a moment later. Modelled here: wait (mutex released, bounded to about a
  // second) while the QP has unacked events, then destroy. The simulated
  // RNIC itself, single-threaded, reports a destroy with unacked events as
  // a violation ("would block forever"), which it still does after the wait.
  absl::Status DestroyQp(hal::QpHandle qp) override {
    for (uint32_t round = 0; round < kDestroyWaitRounds; ++round) {
      {
        WorldLock l(mu_);
        absl::StatusOr<uint32_t> n = fabric_->UnackedEventsOf(qp);
        if (!n.ok() || *n == 0) return inner_->DestroyQp(qp);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    FERRY_LOCKED_(DestroyQp(qp));
  }
  hal::PostResult PostSend(hal::QpHandle qp, absl::Span<const hal::SendWr> chain) override {
    FERRY_LOCKED_(PostSend(qp, chain));
  }
  hal::PostResult PostRecv(hal::QpHandle qp, absl::Span<const hal::RecvWr> chain) override {
    FERRY_LOCKED_(PostRecv(qp, chain));
  }
  absl::StatusOr<hal::AsyncEvent> GetAsyncEvent(hal::ContextHandle ctx) override {
    FERRY_LOCKED_(GetAsyncEvent(ctx));
  }
  void AckAsyncEvent(const hal::AsyncEvent& event) override { FERRY_LOCKED_(AckAsyncEvent(event)); }
  absl::StatusOr<int> CompChannelFd(hal::CompChannelHandle ch) override {
    FERRY_LOCKED_(CompChannelFd(ch));
  }
  absl::StatusOr<int> AsyncEventFd(hal::ContextHandle ctx) override {
    FERRY_LOCKED_(AsyncEventFd(ctx));
  }
#undef FERRY_LOCKED_

 private:
  static constexpr uint32_t kDestroyWaitRounds = 10'000;
  WorldMutex* const mu_;
  const std::unique_ptr<hal::Verbs> inner_;  // used only with *mu_ held
  sim::Fabric* const fabric_;                // used only with *mu_ held
};

// hal::ControlNet decorator over a sim::SimControlNet.
class LockedControlNet final : public hal::ControlNet {
 public:
  LockedControlNet(WorldMutex* mu, std::unique_ptr<sim::SimControlNet> inner)
      : mu_(mu), inner_(std::move(inner)), address_(inner_->LocalAddress()) {}
  ~LockedControlNet() override {
    WorldLock l(mu_);
    inner_.reset();
  }
  std::string LocalAddress() const override { return address_; }
  absl::Status Send(std::string_view peer, absl::Span<const uint8_t> bytes) override {
    WorldLock l(mu_);
    return inner_->Send(peer, bytes);
  }
  absl::StatusOr<std::optional<hal::Message>> Poll(uint64_t timeout_ns) override {
    (void)timeout_ns;  // the sim never waits; the listener thread re-polls
    WorldLock l(mu_);
    return inner_->Poll(0);
  }

 private:
  WorldMutex* const mu_;
  std::unique_ptr<sim::SimControlNet> inner_;
  const std::string address_;
};

class LockedClock final : public hal::Clock {
 public:
  LockedClock(WorldMutex* mu, sim::VirtualClock* inner) : mu_(mu), inner_(inner) {}
  uint64_t NowNs() override {
    WorldLock l(mu_);
    return inner_->NowNs();
  }

 private:
  WorldMutex* const mu_;
  sim::VirtualClock* const inner_;
};

class LockedEntropy final : public hal::Entropy {
 public:
  explicit LockedEntropy(sim::Prng prng) : prng_(std::move(prng)) {}
  uint64_t Next64() override {
    WorldLock l(&mu_);
    return prng_.Next();
  }

 private:
  WorldMutex mu_;
  sim::Prng prng_ ABSL_GUARDED_BY(mu_);
};

// The simulated world behind one mutex, and the pump thread stepping it.
class LockedWorld {
 public:
  struct Options {
    uint64_t idle_tick_ns = 10'000;      // virtual time per idle pump round
    uint64_t idle_sleep_ns = 50'000;     // real time slept per idle round
    uint32_t events_per_round_max = 64;  // bounded work per lock hold
    sim::NetPlan net_plan;               // the control network's rates
  };

  // A world timer: runs in the pump, with the world mutex held, once the
  // virtual clock reached its time. It may act on ctx.fabric and ctx.net
  // and schedule further timers with ctx.At; it must not call the Locked*
  // ports (the mutex is held).
  struct TimerCtx;
  using TimerFn = std::function<void(TimerCtx&)>;
  struct TimerCtx {
    sim::Fabric& fabric;
    sim::SimNetwork& net;
    uint64_t now_ns;
    std::vector<std::pair<uint64_t, TimerFn>> spawned;
    void At(uint64_t at_ns, TimerFn fn) { spawned.emplace_back(at_ns, std::move(fn)); }
  };
  static constexpr size_t kTimersMax = 4096;

  LockedWorld(uint64_t seed, sim::FabricConfig fabric_config, Options options)
      : options_(options),
        root_(seed),
        fabric_(std::move(fabric_config), root_.Fork(), &clock_),
        net_(root_.Fork(), &clock_, nullptr, options.net_plan),
        locked_clock_(&mu_, &clock_) {}

  ~LockedWorld() { StopPump(); }

  // Ports for host `h` (valid until the world is destroyed).
  std::unique_ptr<hal::Verbs> NewVerbs(uint32_t h) {
    WorldLock l(&mu_);
    return std::make_unique<LockedVerbs>(&mu_, fabric_.NewVerbs(h), &fabric_);
  }
  absl::StatusOr<std::unique_ptr<hal::ControlNet>> Bind(std::string_view address) {
    std::unique_ptr<sim::SimControlNet> n;
    {
      WorldLock l(&mu_);
      auto b = net_.Bind(address);
      if (!b.ok()) return b.status();
      n = std::move(*b);
    }
    return std::unique_ptr<hal::ControlNet>(new LockedControlNet(&mu_, std::move(n)));
  }
  std::unique_ptr<hal::Entropy> NewEntropy() {
    WorldLock l(&mu_);
    return std::make_unique<LockedEntropy>(root_.Fork());
  }
  hal::Clock* clock() { return &locked_clock_; }
  // Host h's process exits: the RNIC closes its contexts and its control
  // endpoint loses what was queued (sim::Fabric::RestartHost,
  // sim::SimNetwork::Restart).
  absl::Status RestartHost(uint32_t h, std::string_view address) {
    WorldLock l(&mu_);
    fabric_.RestartHost(h);
    return net_.Restart(address);
  }

  void StartPump() {
    stop_.store(false);
    pump_ = std::thread([this] { PumpLoop(); });
  }
  void StopPump() {
    if (!pump_.joinable()) return;
    stop_.store(true);
    pump_.join();
  }
  uint64_t pump_rounds() const { return rounds_.load(); }

  // Runs `fn` at virtual time at_ns (now, if that has passed). Timers do
  // not move the clock: one comes due when events or idle ticks reach its
  // time (so a pause of N ns lasts N ns of the world's own progress).
  // kResourceExhausted beyond kTimersMax / 2 pending (the other half is
  // room for what running timers spawn).
  absl::Status At(uint64_t at_ns, TimerFn fn) {
    WorldLock l(&mu_);
    if (timers_.size() >= kTimersMax / 2)
      return absl::ResourceExhaustedError("LockedWorld::At: kTimersMax / 2 timers pending");
    timers_.emplace(at_ns, std::move(fn));
    return absl::OkStatus();
  }

  // Runs `fn` now, on the caller's thread, with the world mutex held (what
  // it schedules joins the timers). So a fault a test injects is in force
  // when the call returns.
  void RunNow(const TimerFn& fn) {
    WorldLock l(&mu_);
    TimerCtx ctx{fabric_, net_, clock_.NowNs(), {}};
    fn(ctx);
    QueueSpawned(ctx);
  }

  // Runs `fn(network)` with the world mutex held.
  template <typename Fn>
  auto WithNet(Fn fn) {
    WorldLock l(&mu_);
    return fn(net_);
  }

  // Runs `fn(fabric)` with the world mutex held (leak checks, stats).
  template <typename Fn>
  auto WithFabric(Fn fn) {
    WorldLock l(&mu_);
    return fn(fabric_);
  }

 private:
  // One round: process up to events_per_round_max due events of the
  // fabric and the network, or jump to the earliest future one, or (both
  // idle) tick. Returns true when the world was idle.
  bool Round() {
    WorldLock l(&mu_);
    RunDueTimers();
    for (uint32_t i = 0; i < options_.events_per_round_max; ++i) {
      const uint64_t now = clock_.NowNs();
      std::optional<uint64_t> next;
      for (sim::Actor* a : {static_cast<sim::Actor*>(&fabric_), static_cast<sim::Actor*>(&net_)}) {
        if (a->Runnable()) {
          (void)a->Step();
          next = now;
        } else if (auto t = a->NextWakeNs(); t.has_value() && (!next || *t < *next)) {
          next = t;
        }
      }
      if (!next.has_value()) {
        if (i == 0) {
          clock_.Advance(options_.idle_tick_ns);
          return true;
        }
        return false;
      }
      if (*next > now) clock_.AdvanceTo(*next);
    }
    return false;
  }

  // Every timer due now, in (time, insertion) order; what they schedule
  // runs no earlier than the next round (bounded work per round). Spawned
  // timers stay within kTimersMax by construction: At() admits at most
  // half of it, each of SimCluster's timers spawns at most one (a pause's
  // or partition's end) and its swarm tick a bounded few per period.
  void RunDueTimers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    TimerCtx ctx{fabric_, net_, clock_.NowNs(), {}};
    while (!timers_.empty() && timers_.begin()->first <= ctx.now_ns) {
      TimerFn fn = std::move(timers_.begin()->second);
      timers_.erase(timers_.begin());
      fn(ctx);
    }
    QueueSpawned(ctx);
  }
  void QueueSpawned(TimerCtx& ctx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto& [at, fn] : ctx.spawned) {
      FERRY_CHECK(timers_.size() < kTimersMax);
      timers_.emplace(std::max(at, ctx.now_ns + 1), std::move(fn));
    }
  }

  void PumpLoop() {
    while (!stop_.load()) {
      rounds_.fetch_add(1, std::memory_order_relaxed);
      if (Round()) std::this_thread::sleep_for(std::chrono::nanoseconds(options_.idle_sleep_ns));
    }
  }

  const Options options_;
  WorldMutex mu_;
  sim::VirtualClock clock_ ABSL_GUARDED_BY(mu_);
  sim::Prng root_ ABSL_GUARDED_BY(mu_);
  sim::Fabric fabric_ ABSL_GUARDED_BY(mu_);
  sim::SimNetwork net_ ABSL_GUARDED_BY(mu_);
  std::multimap<uint64_t, TimerFn> timers_ ABSL_GUARDED_BY(mu_);  // by time, then insertion
  LockedClock locked_clock_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> rounds_{0};
  std::thread pump_;
};

}  // namespace ferry::sim

#endif  // FERRY_SIM_THREADED_LOCKED_WORLD_H_
