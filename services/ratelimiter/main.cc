// corral-ratelimiter: composition root. Parses config, then builds in dependency order:
// clock → lease snapshot (beside the config or in /var/lib/corral unless 'none') → limiter (owns limits, leases,
// sessions) → gRPC adapter → server runner; runs until SIGTERM.
#include "libs/core/clock.h"
#include "libs/core/logging.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/server_runner.h"
#include "services/ratelimiter/config.h"
#include "services/ratelimiter/lease_snapshot.h"
#include "services/ratelimiter/limiter.h"
#include "services/ratelimiter/metrics.h"
#include "services/ratelimiter/ratelimit_service.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  corral::BlockShutdownSignals();  // before any thread exists, so only the runner receives SIGTERM

  corral::ratelimiter::Config config;
  if (auto exit_code = corral::LoadServiceConfig(
          "corral-ratelimiter", "Cluster-wide FIFO semaphores and token buckets with crash-safe leases.", "ratelimiter",
          config, corral::ratelimiter::RegisterConfig, corral::ratelimiter::ValidateConfig, argc, argv)) {
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

  // With a lease snapshot the limiter knows what was held before it started and needs no learning mode; a first
  // start on a new file has nothing to learn. A snapshot that cannot be read, or whose file is gone while its
  // change log is there, falls back to learning mode: never over-grant.
  const corral::ratelimiter::StatePath state = corral::ratelimiter::ResolveStatePath(config);
  std::unique_ptr<corral::ratelimiter::LeaseSnapshot> snapshot;
  corral::ratelimiter::LeaseSnapshot::Contents restored;
  if (state.path.empty()) {
    spdlog::warn("no lease snapshot ({}): every start learns for max_lease_ttl", state.origin);
  } else if (corral::ratelimiter::LeaseSnapshot::MissingWhereExpected(state.path)) {
    spdlog::error(
        "lease snapshot {} is missing but its change log is there ({}-log.*): starting in learning mode "
        "(remove the log files to start afresh)",
        state.path, state.path);
    config.limiter.learning_mode = true;
  } else {
    auto opened = corral::ratelimiter::LeaseSnapshot::Open(state.path, &metrics.snapshot_write_errors());
    if (!opened.ok() && opened.status().code() == absl::StatusCode::kFailedPrecondition) {
      spdlog::error("cannot start: {}", opened.status());
      return 1;
    }
    auto contents =
        opened.ok() ? (*opened)->Load() : absl::StatusOr<corral::ratelimiter::LeaseSnapshot::Contents>(opened.status());
    if (contents.ok()) {
      snapshot = *std::move(opened);
      restored = *std::move(contents);
      config.limiter.learning_mode = false;
    } else {
      spdlog::error("{}; starting in learning mode instead", contents.status());
      config.limiter.learning_mode = true;
    }
  }
  corral::ratelimiter::Limiter limiter(&clock, *secret, config.limiter, &metrics, snapshot.get());
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
  if (snapshot != nullptr) {
    const int held = limiter.Restore(restored.leases, restored.last_alive);
    spdlog::info("lease snapshot {} ({}): {} lease(s) still held from before this start; granting at once", state.path,
                 state.origin, held);
  } else if (config.limiter.learning_mode) {
    spdlog::warn(
        "learning mode for {}: only re-claims are granted until then (set state_path to keep leases on "
        "disk and skip it)",
        absl::FormatDuration(config.limiter.max_lease_ttl));
  }
  corral::ratelimiter::RateLimitService service(&limiter, &auth);
  runner.AddService(&service, "corral.v1.RateLimiter");
  runner.set_before_drain([&limiter] { limiter.PrepareShutdown(); });
  if (auto s = runner.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s);
    return 1;
  }
  runner.Wait();
  clock.Stop();  // no timer callback may run into the limiter while it is destroyed
  return 0;
}
