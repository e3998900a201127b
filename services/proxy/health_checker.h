// Active health checks of the inference backends: GET /health on every upstream every interval (an upstream
// failing it is skipped by picking until it passes again), and GET /v1/models to learn what it serves. The
// per-upstream health gauge is created once, not per tick.
#pragma once

#include <vector>

#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "libs/core/clock.h"
#include "services/proxy/metrics.h"
#include "services/proxy/upstreams.h"

namespace corral::proxy {

class HealthChecker {
 public:
  // `timeout`: how long GET /health may take before the upstream counts as unhealthy (a deadline on the
  // request's socket). Run's interval passes on `clock`.
  HealthChecker(UpstreamPool* upstreams, ProxyMetrics* metrics, Clock* clock,
                absl::Duration timeout = absl::Seconds(2));
  // Checks every upstream once (tests), or forever every `interval` (spawn on an executor).
  boost::asio::awaitable<void> CheckAll();
  boost::asio::awaitable<void> Run(absl::Duration interval);

 private:
  UpstreamPool* const upstreams_;
  Clock* const clock_;
  const absl::Duration timeout_;
  std::vector<prometheus::Gauge*> healthy_;  // per upstream, as UpstreamPool::all() orders them
};

}  // namespace corral::proxy
