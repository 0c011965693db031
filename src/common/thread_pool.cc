#include "common/thread_pool.h"

#include <immintrin.h>

namespace tandem {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunTasks() {
  for (int t = next_task_.fetch_add(1); t < n_tasks_; t = next_task_.fetch_add(1)) (*fn_)(t);
}

void ThreadPool::ParallelFor(int n_tasks, const std::function<void(int)>& fn) {
  if (n_threads_ == 1 || n_tasks <= 1) {
    for (int t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  fn_ = &fn;
  n_tasks_ = n_tasks;
  next_task_.store(0);
  active_workers_.store(int(workers_.size()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  RunTasks();
  while (active_workers_.load(std::memory_order_acquire) != 0) _mm_pause();
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly (kernels come in quick bursts during a forward pass), then sleep.
    for (int spin = 0; spin < 20000 && generation_.load(std::memory_order_acquire) == seen; ++spin) {
      _mm_pause();
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      seen = generation_.load();
      if (stop_) return;
    }
    RunTasks();
    active_workers_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace tandem
