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
  std::string state_path;  // the lease snapshot (SQLite); empty: chosen by ResolveStatePath; "none": no snapshot
};

// Where the lease snapshot lives, and why there (said at start-up).
struct StatePath {
  std::string path;  // empty: no snapshot (learning mode after every start)
  std::string origin;
};

// `state_path` as given, or none for "none". Unset: beside the config file (`<dir>/<stem>.leases.db`) when that
// directory is writable, else `/var/lib/corral/ratelimiter-<port>.leases.db` when that directory is or can be
// made writable, else none. A limiter on the embedded defaults thus restarts safely *and* grants at once.
StatePath ResolveStatePath(const Config& config);

// Registers every key (server keys, `limits`, `default_lease_ttl`, `max_lease_ttl`, `learning_mode`,
// `state_path`).
void RegisterConfig(ConfigSchema& schema, Config* config);
// Cross-key checks after loading: INVALID_ARGUMENT naming the keys.
absl::Status ValidateConfig(const Config& config);

}  // namespace corral::ratelimiter
