// ThreadPool implementation: workers take item indices from a shared counter under a mutex (items are coarse:
// an image decode each), so the simple locking costs nothing measurable.
#include "core/thread_pool.h"

namespace vlm {

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_items() {
  std::unique_lock<std::mutex> lock(mu_);
  while (next_ < n_) {
    const size_t i = next_++;
    const auto* fn = fn_;
    ++active_;
    lock.unlock();
    (*fn)(i);
    lock.lock();
    if (--active_ == 0 && next_ >= n_) done_cv_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_items();
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  std::lock_guard<std::mutex> call(call_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_ = 0;
    active_ = 0;
    ++generation_;
  }
  work_cv_.notify_all();
  run_items();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return next_ >= n_ && active_ == 0; });
  fn_ = nullptr;
}

}  // namespace vlm
