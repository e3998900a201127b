// corral-proxy's composition root: every part as a member, declared in the order they depend on each other —
// the cluster secret → server runner and metrics → journal (restores sessions and calls) → sessions → upstreams
// → their ledger → the ratelimiter's client when quotas are configured → dispatcher and health checks → policy
// version and generation gate → HTTP handler on its own I/O threads → gRPC session service.
//
// Threads: gRPC's callback threads (adapters), `http_threads` event-loop threads (every relayed call is a coroutine
// there, and the health checks), the clock's timer thread (session expiry), the journal's writer thread and the
// ratelimiter client's connection thread (docs/threading.md).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "libs/core/clock.h"
#include "libs/http/server.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/server_config.h"
#include "libs/rpc/server_runner.h"
#include "services/proxy/config.h"
#include "services/proxy/generation_gate.h"
#include "services/proxy/health_checker.h"
#include "services/proxy/http_handler.h"
#include "services/proxy/metrics.h"
#include "services/proxy/policy_version.h"
#include "services/proxy/proxy_journal.h"
#include "services/proxy/proxy_service.h"
#include "services/proxy/quotas.h"
#include "services/proxy/session_ledger.h"
#include "services/proxy/sessions.h"
#include "services/proxy/upstream_dispatcher.h"
#include "services/proxy/upstreams.h"
#include "services/ratelimiter/client/ratelimit_client.h"

namespace corral::proxy {

class ProxyRoot {
 public:
  // The secret, the journal (read back), the ratelimiter's client, the HTTP listener: everything that can fail
  // before serving.
  static absl::StatusOr<std::unique_ptr<ProxyRoot>> Build(Config config);
  ~ProxyRoot();
  ProxyRoot(const ProxyRoot&) = delete;
  ProxyRoot& operator=(const ProxyRoot&) = delete;

  // Serves until SIGTERM/SIGINT. Returns the process's exit code.
  int Run();

 private:
  struct Prepared {
    TokenSigner secret;
    std::unique_ptr<ProxyJournal> journal;
    std::unique_ptr<ratelimiter::RateLimitClient> limiter;
  };
  ProxyRoot(Config config, Prepared p);
  // Restores the journal's sessions, binds the HTTP listener, then makes the gRPC service (which advertises it).
  absl::Status Open();
  // Each second: session TTLs and trajectory retention; not while generation is paused (the agents cannot call
  // meanwhile: the resume moves the open sessions' TTLs by the pause).
  void ExpireEachSecond();

  Config config_;
  const TokenSigner secret_;
  const CallAuthenticator auth_;
  RealClock clock_;
  ServerRunner runner_;
  ProxyMetrics metrics_;
  const std::unique_ptr<ProxyJournal> journal_;
  SessionStore sessions_;
  UpstreamPool upstreams_;  // before the ledger: a session's model is checked against what they serve
  SessionLedger ledger_;
  const std::unique_ptr<ratelimiter::RateLimitClient> limiter_;  // null without quotas
  Quotas quotas_;
  UpstreamDispatcher dispatcher_;
  HealthChecker health_;
  PolicyVersion policy_version_;
  GenerationGate gate_;
  HttpHandler handler_;
  http::HttpServer http_;
  std::string http_address_;
  std::unique_ptr<ProxyService> service_;  // made once the HTTP address it advertises is known
};

}  // namespace corral::proxy
