// A fixed pool of worker threads with one primitive: parallel_for(n, fn) runs fn(i) for i in [0, n) on the workers
// (and the calling thread) and returns when all are done. Results go to caller-owned slots indexed by i, so the
// output order never depends on scheduling. One parallel_for at a time per pool (calls are serialized).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace vlm {

class ThreadPool {
 public:
  // `threads` workers besides the caller (0: the caller does all the work).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void parallel_for(size_t n, const std::function<void(size_t)>& fn);
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  void worker_loop();
  void run_items();

  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serializes parallel_for calls
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t n_ = 0, next_ = 0, active_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace vlm
