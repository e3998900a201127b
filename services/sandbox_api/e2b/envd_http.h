// envd's HTTP side, an adapter over the core (envd.h) and the code interpreter (code_interpreter.h), at one
// endpoint for every sandbox (the SDK's E2B_SANDBOX_URL): a request names its sandbox in E2b-Sandbox-Id and
// presents that sandbox's access token in X-Access-Token (or E2B-Traffic-Access-Token, as @e2b/code-interpreter
// sends it); the user it names (Basic auth on RPCs, `username` on /files) is one the sandbox has (CheckEnvdUser).
//   Connect RPC, JSON codec:  /process.Process/{Start,Connect,List,SendInput,CloseStdin,SendSignal,Update}
//                             /filesystem.Filesystem/{Stat,ListDir,MakeDir,Move,Remove,WatchDir}
//                             (a unary call is a JSON body; a server stream one enveloped message)
//   REST:                     GET|POST /files (download; multipart or octet-stream upload), GET /health
//   code interpreter:         at E2b-Sandbox-Port 49999: POST /execute (NDJSON lines), GET|POST /contexts,
//                             DELETE /contexts/{id}, POST /contexts/{id}/restart
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
#include "services/sandbox_api/e2b/code_interpreter.h"
#include "services/sandbox_api/e2b/envd.h"

namespace corral::sandbox_api {

struct Route;

// Who calls: the owner of the sandbox the request names (E2b-Sandbox-Id), from the sandbox's access token
// (X-Access-Token) — UNAUTHENTICATED when it is missing or another sandbox's, or Basic auth is malformed. The user
// Basic auth names is checked once the sandbox is known (CheckEnvdUser).
absl::StatusOr<std::string> EnvdCaller(const api::E2bAuth& auth, const http::Request& request);

class EnvdHttp {
 public:
  // `code` may be null (the code interpreter is then not served).
  EnvdHttp(Envd* envd, CodeInterpreter* code, const api::E2bAuth* auth) : envd_(envd), code_(code), auth_(auth) {}

  // True for a request to a sandbox (it names one in E2b-Sandbox-Id); to its code interpreter when it names
  // port 49999 (E2b-Sandbox-Port), else to its envd.
  static bool Serves(const http::Request& request);
  static bool ForCodeInterpreter(const http::Request& request);
  // Answers `request` for its route (null: no route of its door has its path), through `responder`.
  boost::asio::awaitable<void> Handle(const Route* route, http::Request& request, http::Responder& responder);

 private:
  // The sandbox the request names, its access token checked.
  boost::asio::awaitable<absl::StatusOr<EnvdSandbox>> Open(const http::Request& request, bool fresh);
  boost::asio::awaitable<void> Health(const http::Request& request, http::Responder& responder);
  boost::asio::awaitable<void> Rpc(const Route& route, http::Request& request, http::Responder& responder);
  boost::asio::awaitable<void> Files(http::Request& request, http::Responder& responder);
  boost::asio::awaitable<void> Code(const std::string& path, http::Request& request, http::Responder& responder);
  boost::asio::awaitable<void> Execute(const EnvdSandbox& s, http::Request& request, http::Responder& responder);

  Envd* const envd_;
  CodeInterpreter* const code_;
  const api::E2bAuth* const auth_;
};

}  // namespace corral::sandbox_api
