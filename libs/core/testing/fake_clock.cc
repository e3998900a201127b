#include "libs/core/testing/fake_clock.h"

namespace corral {

absl::Time FakeClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

Clock::TimerId FakeClock::RunAt(absl::Time when, absl::AnyInvocable<void()> fn) {
  absl::MutexLock lock(&mu_);
  return queue_.Add(when, std::move(fn));
}

bool FakeClock::Cancel(TimerId id) {
  absl::MutexLock lock(&mu_);
  return queue_.Cancel(id);
}

void FakeClock::Advance(absl::Duration d) {
  mu_.Lock();
  const absl::Time target = now_ + d;
  while (!queue_.empty() && queue_.next_deadline() <= target) {
    auto [when, fn] = queue_.PopEarliest();
    if (when > now_) now_ = when;
    mu_.Unlock();
    fn();
    fn = nullptr;  // captured state is destroyed before the lock is taken again
    mu_.Lock();
  }
  now_ = target;
  mu_.Unlock();
}

size_t FakeClock::pending_timers() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

}  // namespace corral
