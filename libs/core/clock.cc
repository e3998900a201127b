#include "libs/core/clock.h"

#include <algorithm>
#include <fstream>

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

namespace {

// Process time when the monotonic clock (steady_clock: CLOCK_MONOTONIC on Linux) read zero.
absl::Time AtMonotonicZero() {
  static const absl::Time at_zero = absl::Now() - absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
  return at_zero;
}

}  // namespace

absl::Time ProcessNow() {
  return AtMonotonicZero() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

ClockAnchor ProcessAnchor() {
  static const std::string boot_id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string id;
    std::getline(in, id);
    return id;
  }();
  return ClockAnchor{boot_id, AtMonotonicZero()};
}

std::chrono::system_clock::time_point ToSystemDeadline(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return std::chrono::system_clock::time_point::max();
  const absl::Duration left = std::max(absl::ZeroDuration(), deadline - ProcessNow());  // past: due now
  if (left > absl::Hours(24 * 365)) return std::chrono::system_clock::time_point::max();
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(absl::ToChronoNanoseconds(left));
}

absl::Time FromSystemDeadline(std::chrono::system_clock::time_point deadline) {
  const auto now = std::chrono::system_clock::now();
  if (deadline > now + std::chrono::hours(24 * 365)) return absl::InfiniteFuture();
  return ProcessNow() + absl::FromChrono(deadline - now);
}

RealClock::RealClock() : thread_([this] { Loop(); }) {}

RealClock::~RealClock() { Stop(); }

void RealClock::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Clock::TimerId RealClock::RunAt(absl::Time when, absl::AnyInvocable<void()> fn) {
  Clock::TimerId id;
  bool earliest = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    earliest = queue_.empty() || when < queue_.next_deadline();
    id = queue_.Add(when, std::move(fn));
  }
  // Only a timer earlier than every other changes what the loop waits for: waking it for a later one (a lease's
  // expiry, added with every grant) cost two context switches per timer for nothing.
  if (earliest) wake_.notify_one();
  return id;
}

bool RealClock::Cancel(TimerId id) {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.Cancel(id);
}

void RealClock::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (queue_.empty()) {
      wake_.wait(lock);  // a new timer or shutdown; the loop re-reads both
      continue;
    }
    const absl::Time deadline = queue_.next_deadline();
    const absl::Time now = Now();
    if (now < deadline) {
      // On the monotonic clock (steady_clock); an earlier timer added meanwhile, or shutdown, ends it early.
      // At most an hour at a time: steady_clock's now plus a duration near its maximum would overflow.
      wake_.wait_for(lock, absl::ToChronoNanoseconds(std::min(deadline - now, absl::Hours(1))));
      continue;
    }
    auto fn = std::move(queue_.PopEarliest().second);
    lock.unlock();
    fn();
    fn = nullptr;  // captured state is destroyed before the lock is taken again
    lock.lock();
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
