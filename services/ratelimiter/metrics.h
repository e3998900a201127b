// Every metric of corral-ratelimiter, in one place. Labels are limit names only (never keys, leases or
// sessions), so cardinality stays at the number of declared limits.
#pragma once

#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace corral::ratelimiter {

// Handles for one limit (summed over its instances).
struct LimitMetrics {
  prometheus::Gauge* in_use = nullptr;
  prometheus::Gauge* capacity = nullptr;
  prometheus::Gauge* waiters = nullptr;
  prometheus::Histogram* wait_seconds = nullptr;
  prometheus::Counter* granted = nullptr;
  prometheus::Counter* timeouts = nullptr;
  prometheus::Counter* cancelled = nullptr;
  prometheus::Counter* rejected = nullptr;
  prometheus::Counter* expired = nullptr;
  // Adjust: tokens debited and refunded after the fact, and holds (an upstream's Retry-After).
  prometheus::Counter* debited = nullptr;
  prometheus::Counter* refunded = nullptr;
  prometheus::Counter* holds = nullptr;
};

// Thread-safe (prometheus-cpp metrics are).
class RateLimiterMetrics {
 public:
  explicit RateLimiterMetrics(prometheus::Registry& registry);

  LimitMetrics AddLimit(const std::string& limit);
  void RemoveLimit(const LimitMetrics& m);

  prometheus::Gauge& sessions() { return sessions_; }
  prometheus::Gauge& leases() { return leases_; }
  prometheus::Gauge& learning_mode() { return learning_mode_; }
  prometheus::Counter& snapshot_write_errors() { return snapshot_write_errors_; }

 private:
  prometheus::Family<prometheus::Gauge>& in_use_;
  prometheus::Family<prometheus::Gauge>& capacity_;
  prometheus::Family<prometheus::Gauge>& waiters_;
  prometheus::Family<prometheus::Histogram>& wait_seconds_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& expirations_;
  prometheus::Family<prometheus::Counter>& adjusted_;
  prometheus::Family<prometheus::Counter>& holds_;
  prometheus::Gauge& sessions_;
  prometheus::Gauge& leases_;
  prometheus::Gauge& learning_mode_;
  prometheus::Counter& snapshot_write_errors_;
};

inline RateLimiterMetrics::RateLimiterMetrics(prometheus::Registry& registry)
    : in_use_(prometheus::BuildGauge()
                  .Name("corral_ratelimiter_permits_in_use")
                  .Help("Permits held by leases (concurrency) or tokens spent from a full bucket (rate), per limit.")
                  .Register(registry)),
      capacity_(prometheus::BuildGauge()
                    .Name("corral_ratelimiter_permits_capacity")
                    .Help("Permits (concurrency) or burst (rate) of each instance of the limit.")
                    .Register(registry)),
      waiters_(prometheus::BuildGauge()
                   .Name("corral_ratelimiter_waiters")
                   .Help("Requests queued in FIFO order, per limit.")
                   .Register(registry)),
      wait_seconds_(prometheus::BuildHistogram()
                        .Name("corral_ratelimiter_wait_seconds")
                        .Help("Time from request to grant, per limit.")
                        .Register(registry)),
      requests_(prometheus::BuildCounter()
                    .Name("corral_ratelimiter_requests_total")
                    .Help("Acquire outcomes per limit: granted, timeout, cancelled, rejected.")
                    .Register(registry)),
      expirations_(prometheus::BuildCounter()
                       .Name("corral_ratelimiter_lease_expirations_total")
                       .Help("Leases that ran out of TTL without a release — a sign of crashed clients.")
                       .Register(registry)),
      adjusted_(prometheus::BuildCounter()
                    .Name("corral_ratelimiter_adjusted_tokens_total")
                    .Help("Tokens a rate limit's clients corrected after the fact (Adjust): debit or refund.")
                    .Register(registry)),
      holds_(prometheus::BuildCounter()
                 .Name("corral_ratelimiter_holds_total")
                 .Help("Adjusts that held a rate limit for a while (an upstream's HTTP 429 Retry-After).")
                 .Register(registry)),
      sessions_(prometheus::BuildGauge()
                    .Name("corral_ratelimiter_sessions")
                    .Help("Open client sessions.")
                    .Register(registry)
                    .Add({})),
      leases_(prometheus::BuildGauge()
                  .Name("corral_ratelimiter_leases")
                  .Help("Live concurrency leases across all limits.")
                  .Register(registry)
                  .Add({})),
      learning_mode_(prometheus::BuildGauge()
                         .Name("corral_ratelimiter_learning_mode")
                         .Help("1 while the limiter only lets clients re-claim leases after a restart.")
                         .Register(registry)
                         .Add({})),
      snapshot_write_errors_(prometheus::BuildCounter()
                                 .Name("corral_ratelimiter_snapshot_write_errors_total")
                                 .Help("Lease snapshot writes that failed (disk full, I/O error); each is a change "
                                       "a restart would not know.")
                                 .Register(registry)
                                 .Add({})) {}

inline LimitMetrics RateLimiterMetrics::AddLimit(const std::string& limit) {
  static const prometheus::Histogram::BucketBoundaries kWaitBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
  LimitMetrics m;
  m.in_use = &in_use_.Add({{"limit", limit}});
  m.capacity = &capacity_.Add({{"limit", limit}});
  m.waiters = &waiters_.Add({{"limit", limit}});
  m.wait_seconds = &wait_seconds_.Add({{"limit", limit}}, kWaitBuckets);
  m.granted = &requests_.Add({{"limit", limit}, {"outcome", "granted"}});
  m.timeouts = &requests_.Add({{"limit", limit}, {"outcome", "timeout"}});
  m.cancelled = &requests_.Add({{"limit", limit}, {"outcome", "cancelled"}});
  m.rejected = &requests_.Add({{"limit", limit}, {"outcome", "rejected"}});
  m.expired = &expirations_.Add({{"limit", limit}});
  m.debited = &adjusted_.Add({{"limit", limit}, {"direction", "debit"}});
  m.refunded = &adjusted_.Add({{"limit", limit}, {"direction", "refund"}});
  m.holds = &holds_.Add({{"limit", limit}});
  return m;
}

inline void RateLimiterMetrics::RemoveLimit(const LimitMetrics& m) {
  in_use_.Remove(m.in_use);
  capacity_.Remove(m.capacity);
  waiters_.Remove(m.waiters);
  wait_seconds_.Remove(m.wait_seconds);
  for (prometheus::Counter* c : {m.granted, m.timeouts, m.cancelled, m.rejected}) requests_.Remove(c);
  expirations_.Remove(m.expired);
  adjusted_.Remove(m.debited);
  adjusted_.Remove(m.refunded);
  holds_.Remove(m.holds);
}

}  // namespace corral::ratelimiter
