// Every route of corral-sandbox-api, in one table: SandboxFusion's (/run_code, /v1/ping, /health), E2B's
// control plane (/v2/sandboxes, /sandboxes and under), envd's — each Connect call of the in-sandbox API,
// /files and its /health — which a request reaches by naming a sandbox in E2b-Sandbox-Id, and the code
// interpreter's (/execute, /contexts), reached by naming port 49999 too (one port serves them all, so
// E2B_API_URL and E2B_SANDBOX_URL may both name it). A row says which door answers, the methods
// it takes, its metrics label, and for envd's Connect calls the typed call it is. Adding a call is one row.
// Plain data: thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/strings/string_view.h"
#include "boost/asio/awaitable.hpp"
#include "boost/beast/http/verb.hpp"
#include "services/sandbox_api/e2b/envd.h"
#include "services/sandbox_api/run_code_service.h"

namespace corral::sandbox_api {

enum class Door : uint8_t {
  kSandboxFusion,    // answered by the row's `fusion`
  kE2bControl,       // E2bControlPlane
  kEnvd,             // EnvdHttp (the request names a sandbox)
  kCodeInterpreter,  // EnvdHttp's code interpreter (the request names a sandbox and its port 49999)
};

struct Route {
  Door door;
  absl::string_view path;  // exact; with `prefix`, also every path under it
  bool prefix = false;
  absl::string_view methods;  // the methods it takes as an Allow header lists them ("GET, POST"); "": any
  absl::string_view label;    // the metrics' route label
  // SandboxFusion's answer to the request's body.
  boost::asio::awaitable<HttpAnswer> (*fusion)(RunCodeService& run_code, std::string body) = nullptr;
  // envd's Connect calls: a unary call or a server stream.
  EnvdUnary unary = nullptr;
  EnvdServerStream stream = nullptr;

  bool Takes(boost::beast::http::verb method) const;
};

// Every route, in a fixed order.
std::span<const Route> Routes();
// The route of `path` among the routes of the doors a request may reach: `door` alone for a request to a sandbox
// (kEnvd, kCodeInterpreter), SandboxFusion's and the control plane's for any other (kSandboxFusion); nullptr when
// none has it.
const Route* FindRoute(Door door, absl::string_view path);

}  // namespace corral::sandbox_api
