// envd's HTTP side, an adapter over the core (envd.h), at one endpoint for every sandbox (the SDK's
// E2B_SANDBOX_URL): a request names its sandbox in E2b-Sandbox-Id and presents that sandbox's access token in
// X-Access-Token; the user it names (Basic auth on RPCs, `username` on /files) must be the sandbox's one user.
//   Connect RPC, JSON codec:  /process.Process/{Start,Connect,List,SendInput,CloseStdin,SendSignal,Update}
//                             /filesystem.Filesystem/{Stat,ListDir,MakeDir,Move,Remove,WatchDir}
//                             (a unary call is a JSON body; a server stream one enveloped message)
//   REST:                     GET|POST /files (download; multipart or octet-stream upload), GET /health
// Messages are read and written with protobuf's JSON mapping (unknown fields ignored, as connect-go does);
// errors come in the shape the caller's decoder reads: Connect's for RPCs, {"code", "message"} for REST.
// Which call a path is comes from the sandbox API's route table (routes.h). Thread-safe.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "boost/asio/awaitable.hpp"
#include "libs/api/e2b_auth.h"
#include "libs/http/server.h"
#include "services/sandbox_api/e2b/envd.h"

namespace corral::sandbox_api {

struct Route;

// A Connect call of envd, from its JSON message: a unary one answers its response's JSON; a server stream sends
// its events to `out` and returns how it ended.
using EnvdUnary = boost::asio::awaitable<absl::StatusOr<std::string>> (*)(Envd& envd, const EnvdSandbox& s,
                                                                          const std::string& json);
using EnvdServerStream = boost::asio::awaitable<absl::Status> (*)(Envd& envd, const EnvdSandbox& s,
                                                                  const std::string& json, absl::Duration timeout,
                                                                  EnvdStream& out);

// `json` as `message` (protobuf's JSON mapping, unknown fields ignored; "" is {}); INVALID_ARGUMENT naming what
// is wrong.
absl::Status FromEnvdJson(const std::string& json, google::protobuf::Message* message);
// `message` in protobuf's JSON mapping, as connect-go writes it (field names in lowerCamelCase, defaults left out).
std::string ToEnvdJson(const google::protobuf::Message& message);

// Who calls: the owner of the sandbox the request names (E2b-Sandbox-Id), from the sandbox's access token
// (X-Access-Token) — UNAUTHENTICATED when it is missing or another sandbox's —, naming no user but the sandbox's
// one in Basic auth (PERMISSION_DENIED for another; UNAUTHENTICATED when malformed).
absl::StatusOr<std::string> EnvdCaller(const api::E2bAuth& auth, const http::Request& request);

// A unary call of the core, from and to JSON.
template <typename Request, typename Response,
          boost::asio::awaitable<absl::StatusOr<Response>> (Envd::*Call)(const EnvdSandbox&, Request)>
boost::asio::awaitable<absl::StatusOr<std::string>> UnaryJson(Envd& envd, const EnvdSandbox& s,
                                                              const std::string& json) {
  Request request;
  if (absl::Status parsed = FromEnvdJson(json, &request); !parsed.ok()) co_return parsed;
  absl::StatusOr<Response> answer = co_await (envd.*Call)(s, std::move(request));
  if (!answer.ok()) co_return answer.status();
  co_return ToEnvdJson(*answer);
}

// A server stream of the core, from JSON.
template <typename Request,
          boost::asio::awaitable<absl::Status> (Envd::*Call)(const EnvdSandbox&, Request, absl::Duration, EnvdStream&)>
boost::asio::awaitable<absl::Status> StreamJson(Envd& envd, const EnvdSandbox& s, const std::string& json,
                                                absl::Duration timeout, EnvdStream& out) {
  Request request;
  if (absl::Status parsed = FromEnvdJson(json, &request); !parsed.ok()) co_return parsed;
  absl::Status ended = co_await (envd.*Call)(s, std::move(request), timeout, out);
  co_return ended;
}

class EnvdHttp {
 public:
  EnvdHttp(Envd* envd, const api::E2bAuth* auth) : envd_(envd), auth_(auth) {}

  // True for a request to a sandbox's envd (it names one in E2b-Sandbox-Id).
  static bool Serves(const http::Request& request);
  // Answers `request` for its route (null: no envd route has its path), through `responder`.
  boost::asio::awaitable<void> Handle(const Route* route, http::Request& request, http::Responder& responder);

 private:
  // The sandbox the request names, its access token checked.
  boost::asio::awaitable<absl::StatusOr<EnvdSandbox>> Open(const http::Request& request, bool fresh);
  boost::asio::awaitable<void> Health(const http::Request& request, http::Responder& responder);
  boost::asio::awaitable<void> Rpc(const Route& route, http::Request& request, http::Responder& responder);
  boost::asio::awaitable<void> Files(http::Request& request, http::Responder& responder);

  Envd* const envd_;
  const api::E2bAuth* const auth_;
};

}  // namespace corral::sandbox_api
