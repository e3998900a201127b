// The rollout inspector over HTTP: the page and its assets (embedded in the binary) and the JSON API it reads —
// GET /api/batches, /api/batch?id=, /api/episode?id= — plus /health. Read-only: anything but GET is 405.
// When `require_token`, /api/ wants the cluster token (`Authorization: Bearer …`, or `?token=` for a link); the
// scheduler requires it unless its HTTP port is bound to loopback.
#pragma once

#include "libs/http/server.h"
#include "libs/rpc/auth.h"
#include "services/scheduler/inspector.h"

namespace corral::scheduler {

// `inspector` and `auth` must outlive the handler.
http::Handler MakeInspectorHandler(const Inspector* inspector, const CallAuthenticator* auth, bool require_token);

}  // namespace corral::scheduler
