// engine/runtime_threads.cc: threads blocking on the workers' wait sets
// (see runtime_threads.h).
#include "engine/runtime_threads.h"

#include <poll.h>

#include <algorithm>
#include <chrono>

#include "absl/time/time.h"
#include "engine/engine_impl.h"

namespace ferry::engine {

namespace {
constexpr uint64_t kIdleWaitMaxNs = 10'000'000;  // re-check shutdown at least this often
constexpr uint64_t kPollWaitNs = 20'000;         // WRs outstanding, no channel fds
}  // namespace

ThreadedRuntime::ThreadedRuntime(EngineImpl* engine) : engine_(engine) {
  for (size_t i = 0; i < engine_->workers().size(); ++i) slots_.push_back(std::make_unique<Slot>());
}

ThreadedRuntime::~ThreadedRuntime() { Stop(); }

void ThreadedRuntime::Start() {
  engine_->set_wake([this](uint32_t w) { Wake(w); });
  for (uint32_t w = 0; w < slots_.size(); ++w) threads_.emplace_back([this, w] { WorkerLoop(w); });
  threads_.emplace_back([this] { ListenerLoop(); });
  threads_.emplace_back([this] { AsyncLoop(); });
}

void ThreadedRuntime::Stop() {
  if (stop_.exchange(true)) return;
  for (uint32_t w = 0; w < slots_.size(); ++w) Wake(w);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  engine_->set_wake(nullptr);
}

void ThreadedRuntime::Wake(uint32_t w) {
  Slot& s = *slots_[w];
  absl::MutexLock l(&s.mu);
  s.woken = true;
  s.cv.Signal();
}

void ThreadedRuntime::WorkerLoop(uint32_t w) {
  Worker& worker = *engine_->workers()[w];
  hal::Clock* clock = engine_->env().clock;
  hal::Verbs* verbs = engine_->env().verbs;
  while (!stop_.load()) {
    const WaitSet ws = worker.Step();
    if (ws.work_now) continue;
    uint64_t wait_ns = kIdleWaitMaxNs;
    if (ws.deadline_ns) {
      const uint64_t now = clock->NowNs();
      wait_ns = std::min(wait_ns, *ws.deadline_ns > now ? *ws.deadline_ns - now : 0);
    }
    if (ws.poll_now) {
      // Block on the CQ channels when the backend has fds, else a short wait.
      std::vector<pollfd> fds;
      for (hal::CompChannelHandle ch : ws.channels) {
        auto fd = verbs->CompChannelFd(ch);
        if (fd.ok()) fds.push_back(pollfd{*fd, POLLIN, 0});
      }
      if (!fds.empty()) {
        (void)::poll(fds.data(), fds.size(),
                     static_cast<int>(std::min<uint64_t>(wait_ns / 1'000'000, 10)));
        for (hal::CompChannelHandle ch : ws.channels) {
          for (int k = 0; k < 64; ++k) {  // drain and re-arm
            auto cq = verbs->GetCqEvent(ch);
            if (!cq.ok()) break;
            verbs->AckCqEvents(*cq, 1);
            (void)verbs->ReqNotifyCq(*cq, false);
          }
        }
        continue;
      }
      wait_ns = std::min(wait_ns, kPollWaitNs);
    }
    Slot& s = *slots_[w];
    absl::MutexLock l(&s.mu);
    if (!s.woken && worker.InboxSize() == 0)
      s.cv.WaitWithTimeout(&s.mu, absl::Nanoseconds(static_cast<int64_t>(wait_ns)));
    s.woken = false;
  }
}

void ThreadedRuntime::ListenerLoop() {
  while (!stop_.load()) {
    if (engine_->listener().Step(64) == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void ThreadedRuntime::AsyncLoop() {
  while (!stop_.load()) {
    if (engine_->async().Step(64) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
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

void RuntimeYield() { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

}  // namespace ferry::engine
