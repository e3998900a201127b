// corral-ratelimiter: composition root. Parses config, then builds in dependency order:
// clock → limiter (owns limits, leases, sessions) → gRPC adapter → server runner; runs until SIGTERM.
#include "libs/core/clock.h"
#include "libs/core/logging.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/server_runner.h"
#include "services/ratelimiter/config.h"
#include "services/ratelimiter/limiter.h"
#include "services/ratelimiter/metrics.h"
#include "services/ratelimiter/ratelimit_service.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  corral::BlockShutdownSignals();  // before any thread exists, so only the runner receives SIGTERM

  corral::ratelimiter::Config config;
  if (auto exit_code = corral::LoadServiceConfig(
          "corral-ratelimiter",
          "Cluster-wide FIFO semaphores and token buckets with crash-safe leases.",
          "ratelimiter", config, corral::ratelimiter::RegisterConfig, corral::ratelimiter::ValidateConfig, argc, argv)) {
    return *exit_code;
  }

  // The cluster secret signs lease ids (so re-claims verify after a restart) and authenticates callers.
  auto secret = corral::LoadClusterSecret(config.server);
  if (!secret.ok()) {
    spdlog::error("cannot start: {}", secret.status());
    return 1;
  }
  const corral::CallAuthenticator auth = corral::MakeCallAuthenticator(config.server, *secret);

  corral::ServerRunner runner("ratelimiter", config.server);
  corral::RealClock clock;
  corral::ratelimiter::RateLimiterMetrics metrics(*runner.registry());
  corral::ratelimiter::Limiter limiter(&clock, *secret, config.limiter, &metrics);
  for (const auto& spec : config.limits) {
    if (auto s = limiter.CreateLimit(spec); !s.ok()) {
      spdlog::error("cannot declare limit: {}", s);
      return 2;
    }
    spdlog::info("limit '{}{}{}': {} {}", spec.name, spec.keyed() ? "/" : "", spec.key_template,
                 corral::ratelimiter::LimitKindName(spec.kind),
                 spec.kind == corral::ratelimiter::LimitKind::kConcurrency
                     ? absl::StrCat(spec.permits, " permits")
                     : absl::StrCat(spec.rate_per_s, "/s burst ", spec.burst));
  }
  if (config.limiter.learning_mode) {
    spdlog::info("learning mode for {}: only re-claims are granted until then",
                 absl::FormatDuration(config.limiter.max_lease_ttl));
  }
  corral::ratelimiter::RateLimitService service(&limiter, &auth);
  runner.AddService(&service, "corral.v1.RateLimiter");
  if (auto s = runner.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s);
    return 1;
  }
  runner.Wait();
  clock.Stop();  // no timer callback may run into the limiter while it is destroyed
  return 0;
}
