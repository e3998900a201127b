// A token bucket: tokens refilled continuously at a rate up to a burst, spent by whoever is limited — the
// ratelimiter's rate limits, and the fake inference server's simulated provider quota. A plain value: the owner
// keeps the time (it passes `now`), the lock and the timers around it. Not thread-safe.
#pragma once

#include <algorithm>

#include "absl/time/time.h"

namespace corral {

class TokenBucket {
 public:
  static constexpr double kEpsilon = 1e-9;  // float slack when a refill timer fires exactly on time

  // A bucket starts full.
  TokenBucket(double burst, absl::Time now) : tokens_(burst), refilled_at_(now) {}

  // Tokens there are at `now` (a refill without storing it).
  double TokensAt(absl::Time now, double rate, double burst) const {
    if (now <= refilled_at_) return tokens_;
    return std::min(burst, tokens_ + rate * absl::ToDoubleSeconds(now - refilled_at_));
  }
  // Adds what was earned up to `now`.
  void Refill(absl::Time now, double rate, double burst) {
    if (now <= refilled_at_) return;
    tokens_ = TokensAt(now, rate, burst);
    refilled_at_ = now;
  }
  bool Has(double wanted) const { return tokens_ + kEpsilon >= wanted; }
  // May leave the bucket in debt (negative): a grant above the burst, or a debit after the fact.
  void Spend(double n) { tokens_ -= n; }
  // Gives tokens back, never above the burst.
  void Refund(double n, double burst) { tokens_ = std::min(burst, tokens_ + n); }
  // Never below `floor` (how deep a debt may go).
  void Floor(double floor) { tokens_ = std::max(tokens_, floor); }
  // At most `ceiling` tokens now (a hold empties the bucket below zero).
  void Ceil(double ceiling) { tokens_ = std::min(tokens_, ceiling); }
  // A smaller burst caps what was saved up.
  void Cap(double burst) { tokens_ = std::min(tokens_, burst); }
  // How long, from the last refill, until `wanted` tokens are there (0 when they are).
  absl::Duration TimeUntil(double wanted, double rate) const {
    return absl::Seconds(std::max(0.0, wanted - tokens_) / rate);
  }
  double tokens() const { return tokens_; }

 private:
  double tokens_;
  absl::Time refilled_at_;
};

}  // namespace corral
