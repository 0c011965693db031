// A fixed pool of worker threads for data-parallel kernels. ParallelFor runs
// fn(task) for task in [0, n_tasks) across the workers and the calling thread
// and returns when all are done. Work is split by task index only, so results
// never depend on thread timing. Not reentrant: one ParallelFor at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads >= 1, including the caller
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  void ParallelFor(int n_tasks, const std::function<void(int)>& fn);

 private:
  void WorkerLoop();
  void RunTasks();

  const int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  // Guarded by mu_ for the sleep/wake handshake; read lock-free while spinning.
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;  // guarded by mu_
  // Set by the caller before bumping generation_; read by workers after.
  const std::function<void(int)>* fn_ = nullptr;
  int n_tasks_ = 0;
  std::atomic<int> next_task_{0};
  std::atomic<int> active_workers_{0};
};

}  // namespace tandem
