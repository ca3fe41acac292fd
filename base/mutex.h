// base/mutex.h: the project's mutex: std::mutex with Abseil's thread-safety
// annotations, so clang's -Wthread-safety checks ABSL_GUARDED_BY fields.
//
// Why not absl::Mutex: Debian's Abseil is built without ThreadSanitizer
// instrumentation, so TSan cannot see absl::Mutex's lock/unlock and reports
// false races on everything it guards. std::mutex goes through pthread,
// which TSan intercepts. Use this type for every lock in engine/, hal/ and
// tests that run under TSan.
//
// Thread safety: that is its job. What must stay true: every Lock() is paired
// with one Unlock() on the same thread (use MutexLock); no lock is held across
// a blocking wait other than CondVar::Wait.
#ifndef FERRY_BASE_MUTEX_H_
#define FERRY_BASE_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace ferry::base {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  // Documents (to the analysis) that the caller holds the lock.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable over base::Mutex. Wait* must be called with `mu` held;
// it is held again on return.
class CondVar {
 public:
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Returns false on timeout.
  bool WaitFor(Mutex* mu, uint64_t timeout_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool woke =
        cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns)) == std::cv_status::no_timeout;
    lock.release();
    return woke;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace ferry::base

#endif  // FERRY_BASE_MUTEX_H_
