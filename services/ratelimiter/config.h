// corral-ratelimiter's configuration: the common server keys plus limits and lease bounds.
#pragma once

#include <vector>

#include "libs/core/config.h"
#include "libs/rpc/server_config.h"
#include "services/ratelimiter/limit_spec.h"
#include "services/ratelimiter/limiter.h"

namespace corral::ratelimiter {

struct Config {
  ServerConfig server;
  std::vector<LimitSpec> limits;
  LimiterOptions limiter;
  std::string state_path;  // the lease snapshot (SQLite); empty: none, learning mode after every start
};

// Registers every key (server keys, `limits`, `default_lease_ttl`, `max_lease_ttl`, `learning_mode`,
// `state_path`).
void RegisterConfig(ConfigSchema& schema, Config* config);
// Cross-key checks after loading: INVALID_ARGUMENT naming the keys.
absl::Status ValidateConfig(const Config& config);

}  // namespace corral::ratelimiter
