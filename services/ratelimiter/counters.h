// What one instance of a limit counts: a Semaphore (permits held out of a capacity) for concurrency limits, a
// TokenBucket (libs/core/token_bucket.h) for rate limits. Plain values; the Limiter keeps the queue, the leases
// and the timers around them.
#pragma once

#include <algorithm>
#include <cstdint>

#include "libs/core/token_bucket.h"

namespace corral::ratelimiter {

using corral::TokenBucket;

class Semaphore {
 public:
  int64_t in_use() const { return in_use_; }
  bool Fits(int64_t permits, int64_t capacity) const { return in_use_ + permits <= capacity; }
  void Take(int64_t permits) { in_use_ += permits; }
  void Give(int64_t permits) { in_use_ -= permits; }

 private:
  int64_t in_use_ = 0;
};

}  // namespace corral::ratelimiter
