// Time and timers behind an interface, so core logic never reads the wall clock itself:
// services get RealClock, tests get FakeClock (testing/fake_clock.h) and advance it by hand.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace corral {

// Thread-safe. A timer callback runs at most once, never while the clock's internal lock is held, so it
// may schedule or cancel other timers.
class Clock {
 public:
  using TimerId = uint64_t;
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;
  // Runs `fn` once, at or after `when`. Returns an id for Cancel (never 0).
  virtual TimerId RunAt(absl::Time when, absl::AnyInvocable<void()> fn) = 0;
  TimerId RunAfter(absl::Duration delay, absl::AnyInvocable<void()> fn) { return RunAt(Now() + delay, std::move(fn)); }
  // Returns true when the timer was still pending; it will then never run. False if it already ran
  // (or is running right now) or never existed.
  virtual bool Cancel(TimerId id) = 0;
};

// Pending timers ordered by deadline, then by creation: the shared bookkeeping of both clocks.
// Not thread-safe; the owning clock locks around it.
class TimerQueue {
 public:
  Clock::TimerId Add(absl::Time when, absl::AnyInvocable<void()> fn);
  bool Cancel(Clock::TimerId id);
  bool empty() const { return timers_.empty(); }
  size_t size() const { return timers_.size(); }
  absl::Time next_deadline() const { return timers_.begin()->first.first; }
  // Removes and returns the earliest timer's deadline and callback. Requires !empty().
  std::pair<absl::Time, absl::AnyInvocable<void()>> PopEarliest();

 private:
  using Key = std::pair<absl::Time, Clock::TimerId>;
  std::map<Key, absl::AnyInvocable<void()>> timers_;
  std::map<Clock::TimerId, absl::Time> deadlines_;
  Clock::TimerId next_id_ = 1;
};

// The process's time: the wall clock as it read when the process first asked, moved on by the monotonic clock
// since. A step of the wall clock (NTP correcting a large offset, a VM restored from a snapshot, `date -s`) moves
// nothing in it; it stays as close to the wall clock as the monotonic clock does, which NTP slews alike. Every
// RealClock reads it, so deadlines from any of them, and from the adapters that read it directly, compare.
absl::Time ProcessNow();
// A deadline in process time as the system clock's (what gRPC takes): now on the system clock plus what is left
// of it, so a step of the wall clock since the process started does not move it. InfiniteFuture: the maximum.
std::chrono::system_clock::time_point ToSystemDeadline(absl::Time deadline);
// The other way: a deadline gRPC gives (a server call's), in process time.
absl::Time FromSystemDeadline(std::chrono::system_clock::time_point deadline);

// Where process time stands on the machine's monotonic clock: what process time read when CLOCK_MONOTONIC was
// zero, on boot `boot_id`. A service that journals times journals an anchor too, so that a later process on the
// same boot reads them exactly (add `now.at_zero - then.at_zero`) whatever the wall clock did in between; on
// another boot only the wall clock relates the two.
struct ClockAnchor {
  std::string boot_id;  // empty: unknown
  absl::Time at_zero;
};
ClockAnchor ProcessAnchor();

// ProcessNow() with one background thread that runs due timers in deadline order: a step of the wall clock moves
// no deadline, timer or lease expiry.
class RealClock final : public Clock {
 public:
  RealClock();
  ~RealClock() override;  // Stop()
  // Stops the timer thread and waits for a running callback to return; pending timers are dropped. Call it
  // before destroying objects that timer callbacks point into. Idempotent.
  void Stop();
  RealClock(const RealClock&) = delete;
  RealClock& operator=(const RealClock&) = delete;

  absl::Time Now() const override { return ProcessNow(); }
  TimerId RunAt(absl::Time when, absl::AnyInvocable<void()> fn) override;
  bool Cancel(TimerId id) override;

 private:
  void Loop();

  // The standard mutex and condition variable, not absl's: their timed waits run on the monotonic clock, where
  // absl's (this version) turn a timeout into a wall-clock deadline, and a step back of the wall clock stalled
  // every timer by the size of the step (found by tests/faults: leases that never expired).
  std::mutex mu_;
  std::condition_variable wake_;
  TimerQueue queue_;       // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;     // last: it reads the members above
};

// A blocking sleep on a Clock (a FakeClock's Advance ends it in tests) that another thread may cut short. Wake is
// sticky: every sleep after it returns at once. Thread-safe.
class WakeableSleep {
 public:
  // Blocks until `d` has passed on `clock`, or until Wake(). True when woken.
  bool SleepFor(Clock& clock, absl::Duration d);
  void Wake();
  bool woken() const;

 private:
  struct State {
    absl::Mutex mu;
    bool woken ABSL_GUARDED_BY(mu) = false;
    uint64_t issued ABSL_GUARDED_BY(mu) = 0;  // sleeps started
    uint64_t rung ABSL_GUARDED_BY(mu) = 0;    // the latest sleep whose time has passed
  };
  struct Waiting {
    State* state;
    uint64_t ticket;
    static bool Over(Waiting* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->state->mu) {
      return w->state->woken || w->state->rung >= w->ticket;
    }
  };
  // Shared with the timers, which may fire after the sleep that set them has returned.
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace corral
