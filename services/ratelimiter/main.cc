// corral-ratelimiter: parses its configuration, then builds and runs the service (ratelimiter_root.h).
#include <utility>

#include "libs/core/logging.h"
#include "libs/rpc/server_config.h"
#include "libs/rpc/server_runner.h"
#include "services/ratelimiter/config.h"
#include "services/ratelimiter/ratelimiter_root.h"
#include "spdlog/spdlog.h"

using corral::ratelimiter::Config;
using corral::ratelimiter::RateLimiterRoot;

int main(int argc, char** argv) {
  corral::BlockShutdownSignals();  // before any thread exists, so only the runner receives SIGTERM
  Config config;
  if (auto exit_code = corral::LoadServiceConfig(
          "corral-ratelimiter", "Cluster-wide FIFO semaphores and token buckets with crash-safe leases.", "ratelimiter",
          config, corral::ratelimiter::RegisterConfig, corral::ratelimiter::ValidateConfig, argc, argv)) {
    return *exit_code;
  }
  auto root = RateLimiterRoot::Build(std::move(config));
  if (!root.ok()) {
    spdlog::error("cannot start: {}", root.status());
    return 1;
  }
  return (*root)->Run();
}
