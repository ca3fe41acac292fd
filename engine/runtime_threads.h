// engine/runtime_threads.h: the production runtime: one thread per worker,
// one listener thread, one async-event thread. The only place in engine/
// that creates threads, sleeps or blocks in the kernel (docs/design.md section 4,
// "Steps and runtimes").
//
// Thread safety: Start/Stop from the thread that owns the Engine (Create,
// Shutdown, the destructor); Wake, WorkersDrained and the progress calls
// (RuntimeWaiter) from any thread.
//
// What must stay true:
// - A worker thread that found work keeps stepping before it blocks, as
//   EngineConfig::owner_poll_mode says: not at all (blocking), up to an
//   adaptive budget <= owner_spin_ns_max (adaptive, the default), or until
//   work or a stop request (busy poll). A spin that finds work continues
//   the loop without sleeping; one that ends empty falls through to the
//   block below, so no wakeup is lost either way (the wake flag is read
//   during the spin, the channels are drained after the block).
// - Every runtime thread blocks in the kernel on what can wake it, never in
//   a sleep loop while the backend gives it something to block on:
//   * a worker on its wait set: its wake eventfd (written by Wake after a
//     push into its inbox, unless a user thread's step took the push, see
//     below), the completion-channel fds of its CQs (the simulated RNIC has
//     no fds: with WRs outstanding a short bounded wait, kPollWaitNs,
//     replaces them), and its next deadline; a step that leaves work_now
//     or poll_empty (step.h) is followed by another at once;
//   * the listener in ControlNet::Poll(timeout) (Listener::Step with a
//     first-message wait); a ControlNet that returns at once although
//     nothing arrived (the simulated one) is caught by measuring the call,
//     and the listener then waits kListenerWaitNs;
//   * the async reader in ppoll on the contexts' async fds and the stop
//     eventfd (kAsyncWaitNs sleep only when no context has one, i.e. the
//     simulated RNIC).
//   No wait exceeds kIdleWaitMaxNs (100 ms; the listener's kListenerPollNs,
//   10 ms: a ControlNet cannot be interrupted), so a stop request is seen
//   within that bound even if a wakeup were lost; Stop writes the workers'
//   and the async reader's eventfds, so they see it at once. An idle engine
//   so wakes about 10 times a second per worker (each idle wake-up of a
//   thread showed up in batch-1 p99 on a VM: docs/operations.md 3.1).
// - No lost wakeup: Wake sets the worker's `pending` flag and, when the
//   flag was clear and the owner has published a sleep (`sleep_until_ns`
//   != 0), writes the eventfd. The owner clears the flag *before* Step
//   drains the inbox, and after publishing a sleep plan reads the flag
//   again and skips the sleep if it is set (flag and plan are seq_cst on
//   both sides: either the owner sees the flag or the waker sees the plan
//   and writes the eventfd, which ends the wait). A spinning or stepping
//   owner is so woken without a system call on either side (one eventfd
//   write and one drain per batch-1 submit before 2026-12-06). A write
//   racing the owner's wake-up leaves the eventfd readable; the next wait
//   returns at once and drains it (WaitOn): one early return, no loss.
// - Every completion event taken from a channel is acknowledged at once and
//   its CQ re-armed before the next Step polls it (no CQE can complete
//   between the poll and the arm unseen). Events are taken from every
//   channel the worker owns after every wait, outstanding WRs or not, so a
//   CQ is never left disarmed by an event nobody read.
// - Progress for user waits: after every worker Step of the loop proper
//   and every listener step that read a message, the stepping thread bumps
//   the progress generation under progress_mu_ and signals the waiters (a
//   spin step, the owner's or a user thread's, only when it found work). A
//   waiter reads the generation (under the same mutex) *before* checking
//   its condition and sleeps only while the generation is unchanged, so a
//   publish after its check always wakes it (the publish happens before the
//   bump). A step taken while spinning bumps it only when it found work (a
//   CQE, a post, work_now): a publish without one during a spin (a timeout
//   or cancel of queued slices, evidence by a destroy) is seen at the next
//   bump or when the waiter's wait ends (at most kUserWaitMaxNs): late by
//   up to that, never lost.
// - Worker state is touched only under its slot's step lock (`step_mu`),
//   so no two threads ever step one worker at once (C5: an owner is a
//   worker, whichever thread runs its step). The owner thread holds it for
//   each Step and for taking its channels' events, never while it blocks.
//   What other threads need of it (is it drained?) is published in an
//   atomic after each Step (`drained`), never read from the worker.
// - A user thread's step (EngineConfig::user_thread_steps; StepInline) only
//   try-locks, so it never waits for an owner. When the lock is taken by
//   someone else the owner is woken as without inline steps (it may be
//   about to sleep on a wait set computed before the push). After an inline
//   step the owner is woken unless its sleep already covers what the step
//   left: an owner asleep (`sleep_until_ns` != 0) on at least as many
//   completion channels as the step's wait set lists (a CQE fires an armed
//   channel), until no later than the step's deadline, with no work_now,
//   no poll_empty and, with no channel fds (the simulated RNIC), no WRs or
//   receives outstanding. An owner awake or about to sleep reads 0 there
//   and is not woken: it computes its next sleep plan under the step lock
//   (Worker::CurrentWaitSet), after this step, so the plan covers it.
//   Channel events are taken and CQs re-armed by the owner thread, under
//   the step lock (a CQ a step creates, at a CQ_ERR recreate or a context
//   re-enable, is armed by that step, also under the lock). A CQE a user
//   step polls still fires its armed channel: the owner thread wakes, off
//   the user's path, takes the event and re-arms.
//   Tested gap: on the simulated RNIC (no channel fds) every sleeping owner
//   is woken after an inline step, so the threaded stress test never runs
//   the "plan covers it" branch; only rxe (scripts/softroce) does.
// - Stop joins every thread; after Stop no runtime thread touches the
//   engine. Wake after Stop is a no-op; waiters are released.
#ifndef FERRY_ENGINE_RUNTIME_THREADS_H_
#define FERRY_ENGINE_RUNTIME_THREADS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"
#include "engine/step.h"

namespace ferry {
class EngineImpl;
namespace engine {
class Worker;

// Counters of the runtime (relaxed atomics; read from any thread).
struct ThreadedRuntimeStats {
  std::atomic<uint64_t> worker_steps{0};
  std::atomic<uint64_t> worker_waits{0};    // times a worker blocked
  std::atomic<uint64_t> channel_events{0};  // completion events taken
  std::atomic<uint64_t> wakes_written{0};   // eventfd writes by Wake
  std::atomic<uint64_t> wakes_flagged{0};   // Wakes of an owner not asleep (flag only)
  std::atomic<uint64_t> listener_messages{0};
  std::atomic<uint64_t> listener_waits{0};   // blocking ControlNet polls
  std::atomic<uint64_t> listener_sleeps{0};  // fallback sleeps (Poll did not block)
  std::atomic<uint64_t> async_events{0};
  std::atomic<uint64_t> progress_signals{0};  // generation bumps with a waiter
  std::atomic<uint64_t> user_waits{0};        // blocking waits of user helpers
  std::atomic<uint64_t> spin_steps{0};        // worker steps taken while spinning
  std::atomic<uint64_t> spin_hits{0};         // spins that found work (no sleep)
  std::atomic<uint64_t> inline_steps{0};      // steps run on a user thread
  std::atomic<uint64_t> inline_wakes{0};      // owner woken after an inline step
  std::atomic<uint64_t> inline_busy{0};       // a user thread found the step lock taken
};

// How a user wait spins before it sleeps (ThreadedRuntime::WaitProgress).
enum class SpinPolicy : uint8_t {
  kAdaptive,    // an adaptive budget, shared by such waits (idle polls shrink it)
  kFullBudget,  // all of user_spin_ns (WaitBatch: a transfer is in flight)
};

class ThreadedRuntime {
 public:
  // Most a worker or the async reader waits before it looks at the stop
  // flag again (Stop also wakes both through their eventfds).
  static constexpr uint64_t kIdleWaitMaxNs = 100'000'000;
  // Most one round of a user wait (WaitProgress) lasts.
  static constexpr uint64_t kUserWaitMaxNs = 10'000'000;
  // Wait of a worker with WRs outstanding when the backend has no channel
  // fds (the simulated RNIC), and of the listener between empty polls.
  static constexpr uint64_t kPollWaitNs = 20'000;
  // Listener: the blocking Poll's bound, and the fallback wait after a Poll
  // that returned empty sooner than kListenerBlockedMinNs (did not block).
  static constexpr uint64_t kListenerPollNs = 10'000'000;
  static constexpr uint64_t kListenerBlockedMinNs = 50'000;
  static constexpr uint64_t kListenerWaitNs = 200'000;
  static constexpr uint64_t kAsyncWaitNs = 1'000'000;

  explicit ThreadedRuntime(EngineImpl* engine);
  ~ThreadedRuntime();
  ThreadedRuntime(const ThreadedRuntime&) = delete;
  ThreadedRuntime& operator=(const ThreadedRuntime&) = delete;

  // Installs the engine's wake hook and starts workers + 2 threads. Once.
  void Start();
  // Idempotent; joins every thread.
  void Stop();
  // Any thread: worker `w` has a new inbox item.
  void Wake(uint32_t w);
  // Any thread: every worker thread reported, after its last Step, that
  // its worker shut down (Worker::ShutDown() evaluated on the owner).
  bool WorkersDrained() const;
  bool running() const { return started_.load() && !stop_.load(); }
  const ThreadedRuntimeStats& stats() const { return stats_; }

  // User waits (see RuntimeWaiter). Any thread.
  void AddWaiter();
  void RemoveWaiter();
  uint64_t ProgressGeneration();
  // Blocks until the generation differs from `seen`, timeout_ns passed
  // (capped at kUserWaitMaxNs) or the runtime stopped; spins first (stepping
  // the owners with user_thread_steps, else yielding), up to an adaptive
  // budget <= EngineConfig::user_spin_ns (`policy`: kAdaptive halves it
  // after a spin that saw no progress, down to 1/16, and doubles it after
  // one that did): a completion that arrives within it costs no futex
  // wake-up.
  void WaitProgress(uint64_t seen, uint64_t timeout_ns, SpinPolicy policy);
  // User threads (EngineConfig::user_thread_steps; see the file comment).
  // After Submit pushed into w's inbox: steps w here if its lock is free
  // (waking the owner only when its sleep does not cover what is left),
  // else wakes it. Without user_thread_steps: Wake(w).
  void Submitted(uint32_t w);
  // Tries one step of worker w on the calling thread. Returns false when
  // the lock was taken or the runtime stopped (nothing done), true after a
  // step; *found: the step posted, polled a CQE or published.
  bool StepInline(uint32_t w, bool* found);
  // After a step (or a user call such as Cancel) that may have published:
  // bump the generation, wake waiters. Any thread.
  void NotifyProgress();

 private:
  struct Slot {
    int event_fd = -1;                 // wake eventfd (non-blocking)
    std::atomic<bool> pending{false};  // a wake not yet consumed by the owner
    std::atomic<bool> drained{false};  // Worker::ShutDown() after the last Step
    uint64_t spin_ns = 0;              // the adaptive spin budget (its thread only)
    base::Mutex step_mu;               // held for every step of the worker
    // The owner thread's current sleep: until when (0: not asleep) and on
    // how many completion-channel fds (see the file comment).
    std::atomic<uint64_t> sleep_until_ns{0};
    std::atomic<uint32_t> sleep_channels{0};
  };
  // One step of `worker` with its slot's lock held; publishes `drained`.
  // *found (if given): the step posted or polled a CQE.
  WaitSet StepLocked(Worker& worker, Slot& s, bool* found = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.step_mu);
  // The owner thread's sleep plan, under the step lock: fills the channel
  // fds to wait on and publishes the plan in the slot; returns the wait, or
  // nullopt when the worker must step again at once (work left, or a wake
  // flagged before the plan was published: the plan is withdrawn).
  std::optional<uint64_t> PlanSleep(Worker& worker, Slot& s, std::vector<int>& fds,
                                    std::vector<hal::CompChannelHandle>& channels);
  // Whether an owner asleep as the slot says misses something `ws` asks for.
  bool OwnerMustWake(const Slot& s, const WaitSet& ws) const;
  void WorkerLoop(uint32_t w);
  // After a step with nothing left to do: keeps stepping (owner_poll_mode
  // adaptive: up to the slot's budget, which it adapts; busy poll: until
  // work or a stop request) and returns whether work was found, so the
  // loop goes on without sleeping. Blocking mode: returns false at once.
  bool Spin(Worker& worker, Slot& s);
  void ListenerLoop();
  void AsyncLoop();
  // Blocks up to wait_ns on the slot's eventfd and `fds` (appended after
  // it). Returns after the first readable fd or the timeout.
  void WaitOn(Slot& s, std::vector<int>& fds, uint64_t wait_ns);

  EngineImpl* const engine_;
  std::vector<std::unique_ptr<Slot>> slots_;  // fixed after construction
  int async_stop_fd_ = -1;                    // eventfd: Stop wakes the async reader
  std::atomic<bool> started_{false};
  std::atomic<bool> stop_{false};
  ThreadedRuntimeStats stats_;
  base::Mutex mu_;  // Start/Stop may come from different user threads
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  base::Mutex progress_mu_;
  base::CondVar progress_cv_;
  uint64_t progress_gen_ ABSL_GUARDED_BY(progress_mu_) = 0;
  // Written with progress_gen_ (under progress_mu_), read without it by the
  // spin phase of WaitProgress (a hint only: the blocking phase decides).
  std::atomic<uint64_t> progress_gen_hint_{0};
  // WaitProgress's adaptive spin budget (0: not set yet = user_spin_ns).
  std::atomic<uint64_t> user_spin_budget_ns_{0};
  uint32_t waiters_ ABSL_GUARDED_BY(progress_mu_) = 0;
};

// What a blocking helper (engine.cc: OpenSegment, WaitBatch, Shutdown) uses
// between two looks at the non-blocking core. Registered as a waiter for
// its lifetime. Loop:
//   const uint64_t seen = waiter.Generation();
//   if (condition holds) break;
//   waiter.Wait(seen, remaining_ns);
// With a threaded runtime running, Wait returns when a worker or the
// listener stepped after `seen` was read (or after the bounded timeout);
// without one (the engine is stepped elsewhere) it sleeps a short while.
class RuntimeWaiter {
 public:
  explicit RuntimeWaiter(EngineImpl* engine, SpinPolicy policy = SpinPolicy::kAdaptive);
  ~RuntimeWaiter();
  RuntimeWaiter(const RuntimeWaiter&) = delete;
  RuntimeWaiter& operator=(const RuntimeWaiter&) = delete;
  uint64_t Generation();
  void Wait(uint64_t seen, uint64_t timeout_ns);

 private:
  const SpinPolicy policy_;
  ThreadedRuntime* rt_;  // null: no threaded runtime
};

// Creates and starts the runtime of `engine` (engine->threaded_runtime).
void StartThreadedRuntime(EngineImpl* engine);
// Stops it if one runs (null engine: no-op).
void StopThreadedRuntime(EngineImpl* engine);
// Whether every worker shut down: from the runtime's published flags when a
// threaded runtime runs the engine (the worker objects belong to their
// threads), else from the workers themselves (sim, single-threaded).
bool RuntimeWorkersDrained(EngineImpl* engine);
// A user call may have published a task (Cancel): wakes the blocking
// helpers' waiters if a threaded runtime runs; nothing otherwise.
void RuntimeNotifyProgress(EngineImpl* engine);
// Sleep of a RuntimeWaiter without a threaded runtime.
inline constexpr uint64_t kWaiterFallbackSleepNs = 50'000;
// A short sleep (kWaiterFallbackSleepNs), for test loops that step
// something themselves; the engine's blocking helpers use RuntimeWaiter.
void RuntimeYield();

}  // namespace engine
}  // namespace ferry

#endif  // FERRY_ENGINE_RUNTIME_THREADS_H_
