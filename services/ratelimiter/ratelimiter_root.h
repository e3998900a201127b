// corral-ratelimiter's composition root: every part as a member, declared in the order they depend on each other
// — the cluster secret → server runner and metrics → clock → lease snapshot (beside the config, or in
// /var/lib/corral unless 'none') → limiter (limits, leases, sessions) → gRPC adapter. Threads: gRPC's callback
// threads and the clock's timer thread (docs/threading.md).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "libs/core/clock.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/server_config.h"
#include "libs/rpc/server_runner.h"
#include "services/ratelimiter/config.h"
#include "services/ratelimiter/lease_snapshot.h"
#include "services/ratelimiter/limiter.h"
#include "services/ratelimiter/metrics.h"
#include "services/ratelimiter/ratelimit_service.h"

namespace corral::ratelimiter {

class RateLimiterRoot {
 public:
  // The secret, the lease snapshot (restored), the configured limits: everything that can fail before serving.
  static absl::StatusOr<std::unique_ptr<RateLimiterRoot>> Build(Config config);
  ~RateLimiterRoot();
  RateLimiterRoot(const RateLimiterRoot&) = delete;
  RateLimiterRoot& operator=(const RateLimiterRoot&) = delete;

  // Serves until SIGTERM/SIGINT. Returns the process's exit code.
  int Run();

 private:
  RateLimiterRoot(Config config, TokenSigner secret);
  // With a lease snapshot the limiter knows what was held before it started and needs no learning mode; a first
  // start on a new file has nothing to learn. A snapshot that cannot be read, or whose file is gone while its
  // change log is there, falls back to learning mode: never over-grant. Then the limiter and its limits.
  absl::Status Open();

  Config config_;
  const TokenSigner secret_;  // signs lease ids (re-claims verify after a restart) and authenticates callers
  const CallAuthenticator auth_;
  ServerRunner runner_;
  RateLimiterMetrics metrics_;
  RealClock clock_;
  StatePath state_;
  std::unique_ptr<LeaseSnapshot> snapshot_;  // null without one (state_path none, or unreadable)
  std::unique_ptr<Limiter> limiter_;
  std::unique_ptr<RateLimitService> service_;
};

}  // namespace corral::ratelimiter
