// engine/runtime_threads.h: the production runtime: one thread per worker,
// one listener thread, one async-event thread. The only place in engine/
// that creates threads or sleeps.
//
// Thread safety: Start/Stop from the thread that owns the Engine; Wake from
// any thread.
// What must stay true: a worker thread blocks only on its wait set (its
// inbox condition variable, its CQ channels, its next deadline); nothing
// else wakes it and nothing else is waited on. Stop joins every thread.
#ifndef FERRY_ENGINE_RUNTIME_THREADS_H_
#define FERRY_ENGINE_RUNTIME_THREADS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ferry {
class EngineImpl;
namespace engine {

class ThreadedRuntime {
 public:
  explicit ThreadedRuntime(EngineImpl* engine);
  ~ThreadedRuntime();
  ThreadedRuntime(const ThreadedRuntime&) = delete;
  ThreadedRuntime& operator=(const ThreadedRuntime&) = delete;

  void Start();
  void Stop();  // idempotent; joins every thread
  void Wake(uint32_t worker);

 private:
  struct Slot {
    absl::Mutex mu;
    absl::CondVar cv;
    bool woken ABSL_GUARDED_BY(mu) = false;
  };
  void WorkerLoop(uint32_t w);
  void ListenerLoop();
  void AsyncLoop();

  EngineImpl* const engine_;
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::thread> threads_;
};

// Creates and starts the runtime of `engine` (engine->threaded_runtime).
void StartThreadedRuntime(EngineImpl* engine);
// Stops it if one runs (null engine: no-op).
void StopThreadedRuntime(EngineImpl* engine);
// What a blocking helper does between two polls of the non-blocking core.
void RuntimeYield();

}  // namespace engine
}  // namespace ferry

#endif  // FERRY_ENGINE_RUNTIME_THREADS_H_
