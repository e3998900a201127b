// The handle on one running episode attempt that the rest of the scheduler uses to stop it: Cancel, Drain, a
// lost host and the batch deadline mark it stopped with a reason, then every operation the attempt has in flight
// (gRPC calls, permit waits) is interrupted through the hooks it registered. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace corral::scheduler {

enum class StopReason {
  kNone,
  kCancelled,  // Cancel: ends CANCELLED
  kRequeue,    // Drain (scheduler or host): stopped and queued again, not an attempt
  kHostLost,   // its host stopped answering: an infra failure, retried
  kDeadline,   // the batch deadline: ends TIMEOUT (phase DEADLINE)
  kRedundant,  // its group completed without it: never delivered
  kTimeout,    // a timeout the runner enforces itself (the agent phase, with generation pauses): ends TIMEOUT
};

// What a running attempt is doing now (for `corral top` and the running-by-phase gauge).
enum class RunPhase : uint8_t { kAcquire, kSetup, kAgent, kTool, kVerifier, kReward };
inline constexpr RunPhase kRunPhases[] = {RunPhase::kAcquire, RunPhase::kSetup,    RunPhase::kAgent,
                                          RunPhase::kTool,    RunPhase::kVerifier, RunPhase::kReward};
inline const char* RunPhaseName(RunPhase p) {
  switch (p) {
    case RunPhase::kAcquire: return "acquire";
    case RunPhase::kSetup: return "setup";
    case RunPhase::kAgent: return "agent";
    case RunPhase::kTool: return "tool";
    case RunPhase::kVerifier: return "verifier";
    case RunPhase::kReward: return "reward";
  }
  return "unknown";
}

class RunControl {
 public:
  RunPhase phase() const { return phase_.load(std::memory_order_relaxed); }
  void set_phase(RunPhase p) { phase_.store(p, std::memory_order_relaxed); }
  // The run's state now lives outside the scheduler too (a trainer drives its environment): however it ends,
  // its result is final — no retry, re-queue or stale re-run could take the trainer back to where it was.
  void set_final() { final_.store(true); }
  bool final() const { return final_.load(); }

  // Marks the run stopped (the first reason wins) and interrupts whatever it waits on. Returns false when it
  // was already stopped. The hooks run outside the lock; until they have all run, Unregister waits (a hook
  // may point into the scope that unregisters it: CallScope's cancels its ClientContext).
  bool Stop(StopReason reason, std::string message) {
    std::vector<std::function<void()>> hooks;
    {
      absl::MutexLock lock(&mu_);
      if (reason_ != StopReason::kNone) return false;
      reason_ = reason;
      message_ = std::move(message);
      for (auto& [id, hook] : hooks_) hooks.push_back(hook);
      hooks_running_ = true;
      hook_thread_ = std::this_thread::get_id();
    }
    for (auto& hook : hooks) hook();
    absl::MutexLock lock(&mu_);
    hooks_running_ = false;
    return true;
  }
  StopReason reason() const {
    absl::MutexLock lock(&mu_);
    return reason_;
  }
  bool stopped() const { return reason() != StopReason::kNone; }
  std::string message() const {
    absl::MutexLock lock(&mu_);
    return message_;
  }

  // Registers `interrupt`, run (on the stopping thread) if the run is stopped while registered; runs it at once
  // when the run is already stopped. Returns an id for Unregister.
  uint64_t Register(std::function<void()> interrupt) {
    {
      absl::MutexLock lock(&mu_);
      if (reason_ == StopReason::kNone) {
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
  std::atomic<RunPhase> phase_{RunPhase::kAcquire};
  std::atomic<bool> final_{false};
  mutable absl::Mutex mu_;
  StopReason reason_ ABSL_GUARDED_BY(mu_) = StopReason::kNone;
  std::string message_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::function<void()>> hooks_ ABSL_GUARDED_BY(mu_);
  bool hooks_running_ ABSL_GUARDED_BY(mu_) = false;  // a Stop is running the hooks it took
  std::thread::id hook_thread_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

// Sets the run's phase for a scope (a tool call inside the agent phase), then puts the previous one back.
class PhaseScope {
 public:
  PhaseScope(RunControl* control, RunPhase phase) : control_(control), previous_(control->phase()) {
    control_->set_phase(phase);
  }
  ~PhaseScope() { control_->set_phase(previous_); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  RunControl* control_;
  RunPhase previous_;
};

// Registers a hook for the lifetime of a scope.
class ScopedInterrupt {
 public:
  ScopedInterrupt(RunControl* control, std::function<void()> interrupt)
      : control_(control), id_(control ? control->Register(std::move(interrupt)) : 0) {}
  ~ScopedInterrupt() {
    if (control_ != nullptr && id_ != 0) control_->Unregister(id_);
  }
  ScopedInterrupt(const ScopedInterrupt&) = delete;
  ScopedInterrupt& operator=(const ScopedInterrupt&) = delete;

 private:
  RunControl* control_;
  uint64_t id_;
};

}  // namespace corral::scheduler
