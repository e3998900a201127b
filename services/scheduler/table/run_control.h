// The handle on one running episode attempt that the rest of the scheduler uses to stop it: Cancel, Drain, a
// lost host and the batch deadline mark it stopped with a reason, then every operation the attempt has in flight
// (gRPC calls, permit waits) is interrupted through the hooks it registered with its StopSignal
// (libs/async/stop_signal.h), which is what the other services' clients see of it. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/synchronization/mutex.h"
#include "libs/async/stop_signal.h"

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

class RunControl : public async::StopSignal {
 public:
  RunPhase phase() const { return phase_.load(std::memory_order_relaxed); }
  void set_phase(RunPhase p) { phase_.store(p, std::memory_order_relaxed); }
  // The run's state now lives outside the scheduler too (a trainer drives its environment): however it ends,
  // its result is final — no retry, re-queue or stale re-run could take the trainer back to where it was.
  void set_final() { final_.store(true); }
  bool final() const { return final_.load(); }

  // Marks the run stopped (the first reason wins) and interrupts whatever it waits on (the hooks registered with
  // the signal: a gRPC call's scope cancels its context). Returns false when it was already stopped.
  bool Stop(StopReason reason, std::string message) {
    {
      absl::MutexLock lock(&mu_);
      if (reason_ != StopReason::kNone) return false;
      reason_ = reason;
      message_ = std::move(message);
    }
    return StopSignal::Stop();
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

 private:
  std::atomic<RunPhase> phase_{RunPhase::kAcquire};
  std::atomic<bool> final_{false};
  mutable absl::Mutex mu_;
  StopReason reason_ ABSL_GUARDED_BY(mu_) = StopReason::kNone;
  std::string message_ ABSL_GUARDED_BY(mu_);
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

}  // namespace corral::scheduler
