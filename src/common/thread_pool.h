// A fixed pool of worker threads for data-parallel kernels. ParallelFor runs
// fn(task) for task in [0, n_tasks) across the workers and the calling thread
// and returns when all are done. Work is split by task index only, so results
// never depend on thread timing. Not reentrant: one ParallelFor at a time.
//
// The caller never waits for a worker that has not started: tasks are claimed
// from a shared counter, so on a busy machine a late or descheduled worker
// simply finds nothing left to do and the caller runs every task itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/mutex.h"

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
  // One round's work, double-buffered by round parity: a worker that claims a
  // task of round r reads slot r % 2, which the caller does not rewrite until
  // round r + 2, long after round r's tasks are all done.
  struct Round {
    std::atomic<const std::function<void(int)>*> fn{nullptr};
    std::atomic<int> n_tasks{0};
  };
  static constexpr uint64_t kIndexBits = 32;

  void WorkerLoop();
  // Claims and runs tasks of the round encoded in `expected` while any remain.
  void RunTasks(uint64_t round);

  const int n_threads_;
  std::vector<std::thread> workers_;
  Round rounds_[2];
  // High bits: round number; low 32 bits: next task index of that round.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> done_{0};
  Mutex mu_;
  std::condition_variable wake_;
  bool stop_ GUARDED_BY(mu_) = false;
};

}  // namespace tandem
