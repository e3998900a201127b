// corral-sandbox-api's composition root: the cluster token, the clients of the scheduler (leases) and the
// ratelimiter (the code limit), the /run_code service and the E2B API (control plane and envd) over them, keys
// checked with the cluster secret, the HTTP server, and the gRPC runner that gives
// the process its health service, /metrics and ready file like every Corral service. Stateless: any number of
// replicas serve the same cluster (the limit is the ratelimiter's, the sandboxes are the scheduler's leases).
//
// Threads: `http_threads` HTTP I/O threads (every call is a coroutine there), gRPC's own threads, and the
// ratelimiter client's connection thread.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "libs/api/e2b_auth.h"
#include "libs/core/clock.h"
#include "libs/http/server.h"
#include "libs/rpc/server_runner.h"
#include "services/ratelimiter/client/limiter_client.h"
#include "services/ratelimiter/client/ratelimit_client.h"
#include "services/sandbox_api/config.h"
#include "services/sandbox_api/e2b/e2b_control.h"
#include "services/sandbox_api/e2b/e2b_templates.h"
#include "services/sandbox_api/e2b/envd_http.h"
#include "services/sandbox_api/lease_client.h"
#include "services/sandbox_api/metrics.h"
#include "services/sandbox_api/run_code_service.h"

namespace corral::sandbox_api {

class SandboxApiRoot {
 public:
  static absl::StatusOr<std::unique_ptr<SandboxApiRoot>> Build(Config config);
  ~SandboxApiRoot();
  // Serves until SIGTERM/SIGINT; returns the exit code.
  int Run();

 private:
  struct Prepared;
  SandboxApiRoot(Config config, Prepared prepared);

  const Config config_;
  ServerRunner runner_;
  SandboxApiMetrics metrics_;
  RealClock clock_;
  LeaseClient leases_;
  const std::unique_ptr<ratelimiter::RateLimitClient> limiter_session_;  // null without a ratelimiter
  const std::unique_ptr<ratelimiter::LimiterClient> limiter_;
  RunCodeService run_code_;
  const api::E2bAuth e2b_auth_;
  E2bTemplates templates_;
  E2bControlPlane e2b_;
  Envd envd_;
  CodeInterpreter code_;
  EnvdHttp envd_http_;
  http::HttpServer http_;
};

}  // namespace corral::sandbox_api
