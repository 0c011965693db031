// A mutex the compiler checks. Shared fields say which mutex guards them
// (GUARDED_BY) and functions what they need held (REQUIRES / EXCLUDES);
// clang's -Wthread-safety (the CI's clang build) proves every access holds
// it. Under other compilers the annotations compile to nothing.
//
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_) = 0;
//   void BumpLocked() REQUIRES(mu_);
//   { MutexLock lock(mu_); ++count_; }
//   { UniqueLock lock(mu_); cv_.wait(lock.native(), [&] { return ready_; }); }
#pragma once

#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define TANDEM_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TANDEM_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) TANDEM_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY TANDEM_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) TANDEM_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) TANDEM_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) TANDEM_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) TANDEM_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) TANDEM_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) TANDEM_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS TANDEM_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace tandem {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Holds a Mutex for its scope and lends a std::unique_lock to condition
// variables (which release and retake it while waiting: the analysis treats
// the wait as keeping it held, which it is whenever the waiter runs).
class SCOPED_CAPABILITY UniqueLock {
 public:
  explicit UniqueLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.native()) {}
  ~UniqueLock() RELEASE() {}
  std::unique_lock<std::mutex>& native() { return lock_; }
  // Lets go for a while (work that must not hold it) and takes it back.
  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace tandem
