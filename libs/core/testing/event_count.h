// A count of events that happen on other threads (a fake upstream's requests, a sink's keepalives), and a wait
// for it to reach a number. The waiter wakes when the count changes, never on a timer: the timeout only bounds
// a test that is failing. Thread-safe.
#pragma once

#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace corral::testing {

class EventCount {
 public:
  void Add(int64_t n = 1) {
    absl::MutexLock lock(&mu_);
    count_ += n;
  }
  int64_t value() const {
    absl::MutexLock lock(&mu_);
    return count_;
  }
  // True once the count is at least `n`; false when `timeout` passed first.
  bool AwaitAtLeast(int64_t n, absl::Duration timeout = absl::Seconds(10)) const {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

 private:
  mutable absl::Mutex mu_;
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace corral::testing
