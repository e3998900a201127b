#include "libs/core/clock.h"

#include <algorithm>

namespace corral {

Clock::TimerId TimerQueue::Add(absl::Time when, absl::AnyInvocable<void()> fn) {
  Clock::TimerId id = next_id_++;
  timers_.emplace(Key{when, id}, std::move(fn));
  deadlines_.emplace(id, when);
  return id;
}

bool TimerQueue::Cancel(Clock::TimerId id) {
  auto it = deadlines_.find(id);
  if (it == deadlines_.end()) return false;
  timers_.erase(Key{it->second, id});
  deadlines_.erase(it);
  return true;
}

std::pair<absl::Time, absl::AnyInvocable<void()>> TimerQueue::PopEarliest() {
  auto node = timers_.extract(timers_.begin());
  deadlines_.erase(node.key().second);
  return {node.key().first, std::move(node.mapped())};
}

RealClock::RealClock() : thread_([this] { Loop(); }) {}

RealClock::~RealClock() { Stop(); }

void RealClock::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

Clock::TimerId RealClock::RunAt(absl::Time when, absl::AnyInvocable<void()> fn) {
  absl::MutexLock lock(&mu_);
  return queue_.Add(when, std::move(fn));
}

bool RealClock::Cancel(TimerId id) {
  absl::MutexLock lock(&mu_);
  return queue_.Cancel(id);
}

void RealClock::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    if (queue_.empty()) {
      // Wake on a new timer or on shutdown; the condition re-reads both under the lock.
      mu_.Await(absl::Condition(
          +[](RealClock* c) ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->stopping_ || !c->queue_.empty(); }, this));
      continue;
    }
    absl::Time deadline = queue_.next_deadline();
    const absl::Time now = Now();
    if (now < deadline) {
      // An earlier timer added meanwhile, or shutdown, ends the wait early.
      struct Wake {
        RealClock* clock;
        absl::Time deadline;
        bool operator()() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return clock->stopping_ || clock->queue_.empty() || clock->queue_.next_deadline() < deadline;
        }
      } wake{this, deadline};
      // Relative and at most a second: the mutex's own deadlines read the wall clock, which may step.
      mu_.AwaitWithTimeout(absl::Condition(&wake), std::min(deadline - now, absl::Seconds(1)));
      continue;
    }
    auto fn = std::move(queue_.PopEarliest().second);
    mu_.Unlock();
    fn();
    fn = nullptr;  // captured state is destroyed before the lock is taken again
    mu_.Lock();
  }
}

bool WakeableSleep::SleepFor(Clock& clock, absl::Duration d) {
  std::shared_ptr<State> st = state_;
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&st->mu);
    if (st->woken) return true;
    ticket = ++st->issued;
  }
  const Clock::TimerId timer = clock.RunAfter(d, [st, ticket] {
    absl::MutexLock lock(&st->mu);
    st->rung = std::max(st->rung, ticket);
  });
  bool woken = false;
  {
    absl::MutexLock lock(&st->mu);
    Waiting waiting{st.get(), ticket};
    st->mu.Await(absl::Condition(&Waiting::Over, &waiting));
    woken = st->woken;
  }
  clock.Cancel(timer);
  return woken;
}

void WakeableSleep::Wake() {
  absl::MutexLock lock(&state_->mu);
  state_->woken = true;
}

bool WakeableSleep::woken() const {
  absl::MutexLock lock(&state_->mu);
  return state_->woken;
}

}  // namespace corral
