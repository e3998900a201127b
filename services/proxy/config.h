// corral-proxy's configuration: the common server keys, the HTTP listener and its limits, upstreams, the
// journal, session defaults and relay timeouts. Every key is also a flag (`--help` lists them).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "libs/core/config.h"
#include "libs/http/server.h"
#include "libs/rpc/server_config.h"
#include "services/proxy/quotas.h"
#include "services/proxy/sessions.h"
#include "services/proxy/upstream_dispatcher.h"
#include "services/proxy/upstreams.h"

namespace corral::proxy {

struct Config {
  ServerConfig server;
  std::string http_listen = "127.0.0.1:8080";
  std::string advertise_url;  // default: http://<http_listen>/v1
  int64_t http_threads = 2;
  http::ServerLimits http_limits;
  int64_t max_body_bytes = 16 << 20;
  int64_t max_connections = 10000;
  std::vector<std::string> upstream_urls;  // --upstream URL (repeatable)
  std::vector<UpstreamSpec> upstreams;     // `upstreams:` in the file; both lists are used
  std::string default_model;               // a session's model when it names none (else the only one served)
  std::string journal = "corral-proxy.db";
  bool journal_fsync = false;
  bool record = true;  // false: calls are relayed, counted and metered, never recorded (no trajectories)
  SessionLimits sessions;
  int64_t max_sessions = 100000;
  RelayOptions relay;
  int64_t max_attempts = 3;
  absl::Duration health_interval = absl::Seconds(5);
  BreakerOptions breaker;  // circuit breaking and the panic threshold (upstream_panic_threshold)
  // Quotas (upstreams' `quota:` and model_quotas) through corral-ratelimiter.
  std::string ratelimiter;  // HOST:PORT; required when a quota is configured
  bool limiter_fail_open = false;
  std::map<std::string, QuotaSpec> model_quotas;
  QuotaOptions quota;
  bool has_quotas() const;
};

void RegisterConfig(ConfigSchema& schema, Config* config);
// Cross-key checks; fills derived values (upstreams from URLs, advertise_url). INVALID_ARGUMENT naming the key.
absl::Status ValidateConfig(Config& config);

}  // namespace corral::proxy
