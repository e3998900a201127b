// corral-sandbox-api's HTTP side, an adapter: SandboxFusion's routes (POST /run_code, GET /v1/ping) and GET
// /health, each answered in the shape its clients expect (FastAPI's {"detail": ...} for errors), and counted.
#pragma once

#include "libs/http/server.h"
#include "services/sandbox_api/metrics.h"
#include "services/sandbox_api/run_code_service.h"

namespace corral::sandbox_api {

http::Handler MakeHttpHandler(RunCodeService* run_code, SandboxApiMetrics* metrics);

}  // namespace corral::sandbox_api
