// engine/runtime_threads.cc: threads blocking on the workers' wait sets
// (see runtime_threads.h for what must stay true).
#include "engine/runtime_threads.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <optional>
#include <string>

#include "base/check.h"
#include "engine/engine_impl.h"

namespace ferry::engine {

namespace {
// Completion events taken from one channel per wake (bounded loop).
constexpr int kChannelEventsPerWakeMax = 64;
// Messages / events handled per listener or async step.
constexpr size_t kListenerBatch = 64;
constexpr size_t kAsyncBatch = 64;

timespec ToTimespec(uint64_t ns) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return ts;
}

// Drains a non-blocking eventfd; returns whether anything was read.
bool DrainEventFd(int fd) {
  uint64_t v = 0;
  return ::read(fd, &v, sizeof v) == static_cast<ssize_t>(sizeof v);
}

// Names the calling thread (top -H, perf, gdb show it; Linux keeps the
// first 15 bytes). Best effort: a failure changes nothing else.
void NameThisThread(const std::string& name) {
  (void)pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

// Makes an eventfd readable.
void SignalEventFd(int fd) {
  const uint64_t one = 1;
  (void)!::write(fd, &one, sizeof one);
}
}  // namespace

ThreadedRuntime::ThreadedRuntime(EngineImpl* engine) : engine_(engine) {
  FERRY_CHECK(engine_ != nullptr);
  for (size_t i = 0; i < engine_->workers().size(); ++i) {
    auto s = std::make_unique<Slot>();
    s->event_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    FERRY_CHECK_GE(s->event_fd, 0);
    slots_.push_back(std::move(s));
  }
  async_stop_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  FERRY_CHECK_GE(async_stop_fd_, 0);
}

ThreadedRuntime::~ThreadedRuntime() {
  Stop();
  for (auto& s : slots_) ::close(s->event_fd);
  ::close(async_stop_fd_);
}

void ThreadedRuntime::Start() {
  base::MutexLock l(&mu_);
  FERRY_CHECK(!started_.load());
  started_.store(true);
  engine_->set_wake([this](uint32_t w) { Wake(w); });
  engine_->set_submitted([this](uint32_t w) { Submitted(w); });
  for (uint32_t w = 0; w < slots_.size(); ++w) {
    threads_.emplace_back([this, w] {
      NameThisThread("ferry-owner-" + std::to_string(w));
      WorkerLoop(w);
    });
  }
  threads_.emplace_back([this] {
    NameThisThread("ferry-listener");
    ListenerLoop();
  });
  threads_.emplace_back([this] {
    NameThisThread("ferry-async");
    AsyncLoop();
  });
}

void ThreadedRuntime::Stop() {
  std::vector<std::thread> joining;
  {
    base::MutexLock l(&mu_);
    if (stop_.exchange(true)) return;
    joining.swap(threads_);
  }
  {
    // Release user waits at once (they look at the stop flag).
    base::MutexLock l(&progress_mu_);
    ++progress_gen_;
    progress_gen_hint_.store(progress_gen_, std::memory_order_release);
    progress_cv_.SignalAll();
  }
  // Direct writes: Wake() is a no-op once stop_ is set.
  for (auto& sl : slots_) SignalEventFd(sl->event_fd);
  SignalEventFd(async_stop_fd_);
  for (std::thread& t : joining) t.join();
  // A user thread's step in progress ends before Stop returns; later ones
  // see stop_ under the lock and do nothing (StepInline).
  for (auto& sl : slots_) base::MutexLock l(&sl->step_mu);
  // The engine's wake hook keeps pointing here: this object lives as long
  // as the engine (EngineImpl::threaded_runtime), and Wake is a no-op now.
}

void ThreadedRuntime::Wake(uint32_t w) {
  FERRY_CHECK_LT(w, slots_.size());
  if (stop_.load()) return;
  Slot& s = *slots_[w];
  if (s.pending.exchange(true)) return;  // an unconsumed wake: the owner will see it
  // An owner not asleep sees the flag before it sleeps (WorkerLoop reads it
  // after publishing its plan; both sides seq_cst), so the eventfd, two
  // system calls on the submit path (this write, the owner's drain), is
  // written only to an owner that has published a sleep.
  if (s.sleep_until_ns.load() == 0) {
    stats_.wakes_flagged.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  SignalEventFd(s.event_fd);
  stats_.wakes_written.fetch_add(1, std::memory_order_relaxed);
}

bool ThreadedRuntime::WorkersDrained() const {
  for (const auto& s : slots_)
    if (!s->drained.load()) return false;
  return true;
}

void ThreadedRuntime::AddWaiter() {
  base::MutexLock l(&progress_mu_);
  ++waiters_;
  stats_.user_waits.fetch_add(1, std::memory_order_relaxed);
}

void ThreadedRuntime::RemoveWaiter() {
  base::MutexLock l(&progress_mu_);
  FERRY_CHECK_GT(waiters_, 0u);
  --waiters_;
}

uint64_t ThreadedRuntime::ProgressGeneration() {
  base::MutexLock l(&progress_mu_);
  return progress_gen_;
}

void ThreadedRuntime::WaitProgress(uint64_t seen, uint64_t timeout_ns, SpinPolicy policy) {
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::nanoseconds(std::min(timeout_ns, kUserWaitMaxNs));
  // kAdaptive: the budget shared by those waits (a heuristic, so relaxed)
  // is halved after a full spin that saw no progress, down to
  // user_spin_ns / 16, and doubled after one that did, up to user_spin_ns:
  // a user polling an idle engine in a loop spins 1/16 of the time.
  // kFullBudget (WaitBatch: a transfer is in flight) always spins it all.
  const uint64_t spin_max_ns = engine_->config().user_spin_ns;
  const bool adaptive = policy == SpinPolicy::kAdaptive;
  uint64_t budget_ns =
      adaptive ? user_spin_budget_ns_.load(std::memory_order_relaxed) : spin_max_ns;
  if (budget_ns == 0 || budget_ns > spin_max_ns) budget_ns = spin_max_ns;
  const auto budget_end = start + std::chrono::nanoseconds(budget_ns);
  const auto spin_end = std::min(end, budget_end);
  // Spin phase (bounded by spin_end): the hint moves with the generation.
  // With user_thread_steps the spin steps the owners itself (a CQE it polls
  // publishes here, with no thread to wake); a step that found work bumps
  // the generation.
  const bool steps = engine_->config().user_thread_steps;
  const uint32_t workers = static_cast<uint32_t>(slots_.size());
  uint32_t next = 0;
  while (progress_gen_hint_.load(std::memory_order_acquire) == seen && !stop_.load()) {
    if (std::chrono::steady_clock::now() >= spin_end) break;
    bool stepped = false;
    for (uint32_t k = 0; steps && k < workers; ++k) {
      bool found = false;
      stepped = StepInline((next + k) % workers, &found) || stepped;
      if (found) break;
    }
    next = (next + 1) % workers;
    if (!stepped) std::this_thread::yield();
  }
  if (adaptive) {  // the shared budget is the adaptive waits' alone
    if (progress_gen_hint_.load(std::memory_order_acquire) != seen) {
      user_spin_budget_ns_.store(std::min(spin_max_ns, budget_ns * 2), std::memory_order_relaxed);
    } else if (std::chrono::steady_clock::now() >= budget_end) {
      user_spin_budget_ns_.store(std::max(spin_max_ns / 16, budget_ns / 2),
                                 std::memory_order_relaxed);
    }
  }
  base::MutexLock l(&progress_mu_);
  FERRY_CHECK_GT(waiters_, 0u);  // a RuntimeWaiter is registered
  // Bounded: each round either sees a new generation, the stop flag, or
  // the end of the (capped) timeout.
  while (progress_gen_ == seen && !stop_.load()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= end) return;
    progress_cv_.WaitFor(
        &progress_mu_,
        static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(end - now).count()));
  }
}

void ThreadedRuntime::NotifyProgress() {
  base::MutexLock l(&progress_mu_);
  ++progress_gen_;
  progress_gen_hint_.store(progress_gen_, std::memory_order_release);
  if (waiters_ == 0) return;
  stats_.progress_signals.fetch_add(1, std::memory_order_relaxed);
  progress_cv_.SignalAll();
}

void ThreadedRuntime::WaitOn(Slot& s, std::vector<int>& fds, uint64_t wait_ns) {
  std::vector<pollfd> p;
  p.reserve(fds.size() + 1);
  p.push_back(pollfd{s.event_fd, POLLIN, 0});
  for (int fd : fds) p.push_back(pollfd{fd, POLLIN, 0});
  const timespec ts = ToTimespec(std::min(wait_ns, kIdleWaitMaxNs));
  stats_.worker_waits.fetch_add(1, std::memory_order_relaxed);
  // A write that raced the wake-up (the plan was seen just before it was
  // withdrawn) leaves the eventfd readable: it is drained the next time a
  // wait returns on it, one early return later.
  if (::ppoll(p.data(), p.size(), &ts, nullptr) > 0 && (p[0].revents & POLLIN) != 0)
    (void)DrainEventFd(s.event_fd);
}

WaitSet ThreadedRuntime::StepLocked(Worker& worker, Slot& s, bool* found) {
  const uint64_t work_before = worker.stats().cqes + worker.stats().posted;
  const WaitSet ws = worker.Step();
  stats_.worker_steps.fetch_add(1, std::memory_order_relaxed);
  s.drained.store(worker.ShutDown());
  if (found != nullptr) *found = worker.stats().cqes + worker.stats().posted != work_before;
  return ws;
}

bool ThreadedRuntime::OwnerMustWake(const Slot& s, const WaitSet& ws) const {
  const uint64_t until = s.sleep_until_ns.load();
  // Not asleep: its next plan is computed under the step lock, after this
  // step (WorkerLoop), so it sees what the step left.
  if (until == 0) return false;
  if (ws.work_now || ws.poll_empty) return true;
  if (ws.deadline_ns && *ws.deadline_ns < until) return true;
  const uint32_t channels = s.sleep_channels.load();
  if (channels < ws.channels.size()) return true;
  // No fds (the simulated RNIC): only a timed poll sees a CQE.
  return channels == 0 && (ws.poll_now || ws.recv_posted);
}

void ThreadedRuntime::Submitted(uint32_t w) {
  bool found = false;
  if (!engine_->config().user_thread_steps || !StepInline(w, &found)) Wake(w);
}

bool ThreadedRuntime::StepInline(uint32_t w, bool* found) {
  FERRY_CHECK_LT(w, slots_.size());
  *found = false;
  Slot& s = *slots_[w];
  if (!s.step_mu.TryLock()) {
    stats_.inline_busy.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (stop_.load()) {  // Stop takes every step lock once after setting it
    s.step_mu.Unlock();
    return false;
  }
  const WaitSet ws = StepLocked(*engine_->workers()[w], s, found);
  s.step_mu.Unlock();
  stats_.inline_steps.fetch_add(1, std::memory_order_relaxed);
  if (OwnerMustWake(s, ws)) {
    stats_.inline_wakes.fetch_add(1, std::memory_order_relaxed);
    Wake(w);
  }
  if (*found) NotifyProgress();
  return true;
}

std::optional<uint64_t> ThreadedRuntime::PlanSleep(Worker& worker, Slot& s, std::vector<int>& fds,
                                                   std::vector<hal::CompChannelHandle>& channels) {
  hal::Clock* clock = engine_->env().clock;
  hal::Verbs* verbs = engine_->env().verbs;
  // The plan comes from the worker's state now (user threads may have
  // stepped it since this thread did) and is published under the lock: an
  // inline step before this saw sleep_until_ns 0 and is in the plan, one
  // after it compares its wait set with the plan (OwnerMustWake).
  base::MutexLock l(&s.step_mu);
  const WaitSet ws = worker.CurrentWaitSet();
  // poll_empty: a destroyed QP's empty poll is due, and no CQE or timer
  // would end a sleep for it (step.h).
  if (ws.work_now || ws.poll_empty) return std::nullopt;
  uint64_t wait_ns = kIdleWaitMaxNs;
  if (ws.deadline_ns) {
    const uint64_t now = clock->NowNs();
    wait_ns = std::min(wait_ns, *ws.deadline_ns > now ? *ws.deadline_ns - now : 0);
  }
  fds.clear();
  channels.clear();
  // Every channel, outstanding WRs or not: a CQE polled inline (rxe can
  // complete a WRITE inside post_send) still fired the armed CQ's event,
  // which must be taken and the CQ re-armed before the next post relies
  // on it. A stale event costs one early return, once per arm.
  for (hal::CompChannelHandle ch : ws.channels) {
    if (!ch.valid()) continue;
    auto fd = verbs->CompChannelFd(ch);
    if (!fd.ok()) continue;
    fds.push_back(*fd);
    channels.push_back(ch);
  }
  // No fds (simulated RNIC): completions are seen by polling, soon.
  if ((ws.poll_now || ws.recv_posted) && fds.empty()) wait_ns = std::min(wait_ns, kPollWaitNs);
  if (wait_ns > 0) {
    s.sleep_channels.store(static_cast<uint32_t>(fds.size()));
    s.sleep_until_ns.store(std::max<uint64_t>(1, clock->NowNs() + wait_ns));
    // Read after the plan is published: a Wake that saw no plan set the
    // flag without writing the eventfd, so the flag is the only trace.
    if (s.pending.load()) {
      s.sleep_until_ns.store(0);
      return std::nullopt;
    }
  }
  return wait_ns;
}

void ThreadedRuntime::WorkerLoop(uint32_t w) {
  Worker& worker = *engine_->workers()[w];
  Slot& s = *slots_[w];
  hal::Verbs* verbs = engine_->env().verbs;
  std::vector<int> fds;
  std::vector<hal::CompChannelHandle> fd_channels;
  while (!stop_.load()) {
    // Consume the wake before the step drains the inbox (no lost wakeup):
    // a push after this sets the flag again, and it is read before the
    // next sleep. The eventfd is drained where a wait returns on it.
    if (s.pending.load()) s.pending.store(false);
    WaitSet ws;
    {
      base::MutexLock l(&s.step_mu);
      ws = StepLocked(worker, s);
    }
    // After the drained flag: a Shutdown waiter that wakes sees it.
    NotifyProgress();
    if (ws.work_now || ws.poll_empty) continue;
    if (Spin(worker, s)) continue;
    const std::optional<uint64_t> wait_ns = PlanSleep(worker, s, fds, fd_channels);
    if (!wait_ns.has_value()) continue;
    if (*wait_ns > 0) {
      WaitOn(s, fds, *wait_ns);
      s.sleep_until_ns.store(0);
    }
    base::MutexLock l(&s.step_mu);
    for (hal::CompChannelHandle ch : fd_channels) {
      for (int k = 0; k < kChannelEventsPerWakeMax; ++k) {  // take, ack, re-arm
        auto cq = verbs->GetCqEvent(ch);
        if (!cq.ok()) break;
        verbs->AckCqEvents(*cq, 1);
        (void)verbs->ReqNotifyCq(*cq, false);
        stats_.channel_events.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
}

bool ThreadedRuntime::Spin(Worker& worker, Slot& s) {
  const OwnerPollMode mode = engine_->config().owner_poll_mode;
  if (mode == OwnerPollMode::kBlocking || stop_.load()) return false;
  const uint64_t max_ns = engine_->config().owner_spin_ns_max;
  if (s.spin_ns == 0) s.spin_ns = max_ns;
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::nanoseconds(s.spin_ns);
  bool found = false;
  // Bounded: by the spin budget (adaptive), or by a stop request or any
  // work found (busy poll, which has no budget).
  while (!stop_.load(std::memory_order_relaxed)) {
    if (s.pending.load(std::memory_order_acquire)) {
      found = true;  // the loop's top consumes the wake and steps
      break;
    }
    std::this_thread::yield();
    bool work = false;
    {
      base::MutexLock l(&s.step_mu);
      bool found_cqe_or_post = false;
      work = StepLocked(worker, s, &found_cqe_or_post).work_now || found_cqe_or_post;
    }
    stats_.spin_steps.fetch_add(1, std::memory_order_relaxed);
    if (work) {
      NotifyProgress();
      found = true;
      break;
    }
    if (mode == OwnerPollMode::kAdaptive && std::chrono::steady_clock::now() >= end) break;
  }
  if (mode == OwnerPollMode::kAdaptive)
    s.spin_ns = found ? std::min(max_ns, s.spin_ns * 2) : std::max(max_ns / 16, s.spin_ns / 2);
  if (found) stats_.spin_hits.fetch_add(1, std::memory_order_relaxed);
  return found;
}

void ThreadedRuntime::ListenerLoop() {
  while (!stop_.load()) {
    // Blocks in ControlNet::Poll for the first message (bounded, so the
    // stop flag is seen within kListenerPollNs).
    const auto t0 = std::chrono::steady_clock::now();
    const size_t n = engine_->listener().Step(kListenerBatch, kListenerPollNs);
    stats_.listener_messages.fetch_add(n, std::memory_order_relaxed);
    if (n > 0) {
      NotifyProgress();  // a descriptor may have arrived (OpenSegment waits)
      continue;
    }
    stats_.listener_waits.fetch_add(1, std::memory_order_relaxed);
    const auto waited = std::chrono::steady_clock::now() - t0;
    if (waited < std::chrono::nanoseconds(kListenerBlockedMinNs)) {
      // The ControlNet did not block (the simulated one never does): do
      // not spin.
      stats_.listener_sleeps.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::nanoseconds(kListenerWaitNs));
    }
  }
}

void ThreadedRuntime::AsyncLoop() {
  hal::Verbs* verbs = engine_->env().verbs;
  std::vector<pollfd> p;
  while (!stop_.load()) {
    const size_t n = engine_->async().Step(kAsyncBatch);
    stats_.async_events.fetch_add(n, std::memory_order_relaxed);
    if (n > 0) continue;
    p.clear();
    for (auto& c : engine_->contexts()) {
      c->WithAsyncHandle([&](hal::ContextHandle h) {
        auto fd = verbs->AsyncEventFd(h);
        if (fd.ok()) p.push_back(pollfd{*fd, POLLIN, 0});
      });
    }
    if (p.empty()) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(kAsyncWaitNs));
    } else {
      p.push_back(pollfd{async_stop_fd_, POLLIN, 0});  // never drained: set once, by Stop
      const timespec ts = ToTimespec(kIdleWaitMaxNs);
      (void)::ppoll(p.data(), p.size(), &ts, nullptr);
    }
  }
}

void StartThreadedRuntime(EngineImpl* engine) {
  engine->threaded_runtime = std::make_unique<ThreadedRuntime>(engine);
  engine->threaded_runtime->Start();
}

void StopThreadedRuntime(EngineImpl* engine) {
  if (engine == nullptr || engine->threaded_runtime == nullptr) return;
  engine->threaded_runtime->Stop();
}

bool RuntimeWorkersDrained(EngineImpl* engine) {
  if (engine->threaded_runtime != nullptr && engine->threaded_runtime->running())
    return engine->threaded_runtime->WorkersDrained();
  return engine->WorkersDrained();
}

void RuntimeNotifyProgress(EngineImpl* engine) {
  if (engine->threaded_runtime != nullptr && engine->threaded_runtime->running())
    engine->threaded_runtime->NotifyProgress();
}

void RuntimeYield() {
  std::this_thread::sleep_for(std::chrono::nanoseconds(kWaiterFallbackSleepNs));
}

RuntimeWaiter::RuntimeWaiter(EngineImpl* engine, SpinPolicy policy)
    : policy_(policy),
      rt_(engine->threaded_runtime != nullptr && engine->threaded_runtime->running()
              ? engine->threaded_runtime.get()
              : nullptr) {
  if (rt_ != nullptr) rt_->AddWaiter();
}

RuntimeWaiter::~RuntimeWaiter() {
  if (rt_ != nullptr) rt_->RemoveWaiter();
}

uint64_t RuntimeWaiter::Generation() { return rt_ != nullptr ? rt_->ProgressGeneration() : 0; }

void RuntimeWaiter::Wait(uint64_t seen, uint64_t timeout_ns) {
  if (rt_ != nullptr && rt_->running()) {
    rt_->WaitProgress(seen, timeout_ns, policy_);
  } else {
    std::this_thread::sleep_for(
        std::chrono::nanoseconds(std::min(timeout_ns, kWaiterFallbackSleepNs)));
  }
}

}  // namespace ferry::engine
