// A Clock that only moves when a test says so. Advancing it runs every timer that falls due, in deadline
// order, on the advancing thread — so a test sees exactly which callbacks ran, with no sleeps.
#pragma once

#include "libs/core/clock.h"

namespace corral {

// Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}

  absl::Time Now() const override;
  TimerId RunAt(absl::Time when, absl::AnyInvocable<void()> fn) override;
  bool Cancel(TimerId id) override;

  // Moves time forward by `d`, running each timer due by then at its own deadline (Now() inside a
  // callback reads that deadline). Timers scheduled by callbacks run too if they fall due in range.
  void Advance(absl::Duration d);
  // Runs timers that are already due without moving time.
  void RunDue() { Advance(absl::ZeroDuration()); }
  size_t pending_timers() const;

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  TimerQueue queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral
