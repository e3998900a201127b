// A fixed set of threads running posted jobs in order of posting: where work that may take long (a process
// sweep, a home wipe, a template clone) goes instead of a timer thread or a gRPC thread. The destructor runs
// what is queued, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace corral {

class WorkerPool {
 public:
  explicit WorkerPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~WorkerPool() { Stop(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // After Stop, the job runs at once on the caller's thread.
  void Post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stopping_) {
        jobs_.push_back(std::move(job));
        job = nullptr;
      }
    }
    if (job) {
      job();
      return;
    }
    cv_.notify_one();
  }

  // Runs what is queued, then joins the threads (a composition root stops the pool before the parts its jobs
  // reach go). Idempotent; the destructor calls it.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// Runs `job` on `pool`, or right here when there is none (tests, tools).
inline void RunOn(WorkerPool* pool, std::function<void()> job) {
  if (pool != nullptr) {
    pool->Post(std::move(job));
  } else {
    job();
  }
}

}  // namespace corral
