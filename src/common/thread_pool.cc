#include "common/thread_pool.h"

#include <immintrin.h>

namespace tandem {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunTasks(uint64_t round) {
  const Round& r = rounds_[round & 1];
  for (;;) {
    uint64_t cur = claim_.load(std::memory_order_acquire);
    if ((cur >> kIndexBits) != round) return;  // a later round began: ours is done
    const int n_tasks = r.n_tasks.load(std::memory_order_relaxed);
    const int index = int(cur & 0xffffffffu);
    if (index >= n_tasks) return;
    if (!claim_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel)) continue;
    (*r.fn.load(std::memory_order_relaxed))(index);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelFor(int n_tasks, const std::function<void(int)>& fn) {
  if (n_threads_ == 1 || n_tasks <= 1) {
    for (int t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  const uint64_t round = (claim_.load(std::memory_order_relaxed) >> kIndexBits) + 1;
  Round& r = rounds_[round & 1];
  r.fn.store(&fn, std::memory_order_relaxed);
  r.n_tasks.store(n_tasks, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  {
    MutexLock lock(mu_);  // a worker between its check and its wait cannot miss the new round
    claim_.store(round << kIndexBits, std::memory_order_release);
  }
  wake_.notify_all();
  RunTasks(round);
  // A worker still on its last task may have been descheduled (another
  // engine's threads share the cores): after a short spin, give the core up
  // rather than burn the rest of our time slice waiting for it.
  for (int spin = 0; done_.load(std::memory_order_acquire) != n_tasks; ++spin) {
    if (spin < 2000) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly (kernels come in quick bursts during a forward pass),
    // letting other runnable threads have the core now and then, then sleep.
    for (int spin = 0; spin < 4000 && (claim_.load(std::memory_order_acquire) >> kIndexBits) == seen;
         ++spin) {
      if (spin % 512 == 511) {
        std::this_thread::yield();
      } else {
        _mm_pause();
      }
    }
    {
      UniqueLock lock(mu_);
      wake_.wait(lock.native(), [&]() REQUIRES(mu_) { return stop_ || (claim_.load() >> kIndexBits) != seen; });
      if (stop_) return;
      seen = claim_.load() >> kIndexBits;
    }
    RunTasks(seen);
  }
}

}  // namespace tandem
