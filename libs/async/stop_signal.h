// A stop that interrupts what waits on it: whoever owns an operation (the scheduler's episode attempt, a sandbox
// API request) stops it once, and every call it has in flight — a gRPC call, a permit's wait — is interrupted
// through the hook it registered for its duration (ScopedInterrupt). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace corral::async {

class StopSignal {
 public:
  virtual ~StopSignal() = default;

  // Stops (the first call only) and runs the registered hooks, outside the lock, on this thread. Returns false
  // when it was already stopped. Until the hooks have all run, Unregister waits (a hook may point into the
  // scope that unregisters it: a call's scope cancels its context).
  bool Stop() {
    std::vector<std::function<void()>> hooks;
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return false;
      stopped_ = true;
      for (auto& [id, hook] : hooks_) hooks.push_back(hook);
      hooks_running_ = true;
      hook_thread_ = std::this_thread::get_id();
    }
    for (auto& hook : hooks) hook();
    absl::MutexLock lock(&mu_);
    hooks_running_ = false;
    return true;
  }
  bool signalled() const {
    absl::MutexLock lock(&mu_);
    return stopped_;
  }

  // Registers `interrupt`, run (on the stopping thread) if the signal stops while registered; runs it at once
  // when it already has. Returns an id for Unregister.
  uint64_t Register(std::function<void()> interrupt) {
    {
      absl::MutexLock lock(&mu_);
      if (!stopped_) {
        hooks_[next_id_] = std::move(interrupt);
        return next_id_++;
      }
    }
    interrupt();
    return 0;
  }
  // Once it returns, the hook is not running and will not run (a hook that unregisters itself does not wait).
  void Unregister(uint64_t id) {
    absl::MutexLock lock(&mu_);
    hooks_.erase(id);
    if (hooks_running_ && hook_thread_ != std::this_thread::get_id()) {
      mu_.Await(absl::Condition(
          +[](bool* running) { return !*running; }, &hooks_running_));
    }
  }

 private:
  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::map<uint64_t, std::function<void()>> hooks_ ABSL_GUARDED_BY(mu_);
  bool hooks_running_ ABSL_GUARDED_BY(mu_) = false;  // a Stop is running the hooks it took
  std::thread::id hook_thread_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

// Registers a hook with `signal` (none when null) for the lifetime of a scope.
class ScopedInterrupt {
 public:
  ScopedInterrupt(StopSignal* signal, std::function<void()> interrupt)
      : signal_(signal), id_(signal ? signal->Register(std::move(interrupt)) : 0) {}
  ~ScopedInterrupt() {
    if (signal_ != nullptr && id_ != 0) signal_->Unregister(id_);
  }
  ScopedInterrupt(const ScopedInterrupt&) = delete;
  ScopedInterrupt& operator=(const ScopedInterrupt&) = delete;

 private:
  StopSignal* signal_;
  uint64_t id_;
};

}  // namespace corral::async
