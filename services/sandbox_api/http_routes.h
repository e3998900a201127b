// corral-sandbox-api's HTTP side, an adapter: SandboxFusion's routes (POST /run_code, GET /v1/ping), E2B's
// control plane (/sandboxes, /v2/sandboxes) and in-sandbox API (any request naming a sandbox in E2b-Sandbox-Id),
// and GET /health, each answered in the shape its clients expect, and counted. One port serves them all, so
// E2B_API_URL and E2B_SANDBOX_URL may both name it.
#pragma once

#include "libs/http/server.h"
#include "services/sandbox_api/e2b/e2b_control.h"
#include "services/sandbox_api/e2b/envd.h"
#include "services/sandbox_api/metrics.h"
#include "services/sandbox_api/run_code_service.h"

namespace corral::sandbox_api {

// `e2b` and `envd` may be null (the E2B API is then not served).
http::Handler MakeHttpHandler(RunCodeService* run_code, E2bControlPlane* e2b, Envd* envd, SandboxApiMetrics* metrics);

}  // namespace corral::sandbox_api
