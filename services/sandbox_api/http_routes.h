// corral-sandbox-api's HTTP side, an adapter: each request goes to its route (routes.h) — SandboxFusion's,
// E2B's control plane or envd's — is answered in the shape its clients expect, and counted. A path no route has
// is a 404, a method its route does not take a 405, each in its door's shape.
#pragma once

#include "libs/http/server.h"
#include "services/sandbox_api/e2b/e2b_control.h"
#include "services/sandbox_api/e2b/envd_http.h"
#include "services/sandbox_api/metrics.h"
#include "services/sandbox_api/run_code_service.h"

namespace corral::sandbox_api {

// `e2b` and `envd` may be null (the E2B API is then not served).
http::Handler MakeHttpHandler(RunCodeService* run_code, E2bControlPlane* e2b, EnvdHttp* envd,
                              SandboxApiMetrics* metrics);

}  // namespace corral::sandbox_api
