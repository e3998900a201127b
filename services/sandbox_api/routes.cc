#include "services/sandbox_api/routes.h"

#include <array>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;

asio::awaitable<HttpAnswer> RunCode(RunCodeService& run_code, std::string body) {
  co_return co_await run_code.RunCode(std::move(body));
}
asio::awaitable<HttpAnswer> Ping(RunCodeService&, std::string) { co_return HttpAnswer{200, R"("pong")"}; }
asio::awaitable<HttpAnswer> Health(RunCodeService&, std::string) { co_return HttpAnswer{200, R"({"status":"ok"})"}; }

template <typename Request, typename Response,
          asio::awaitable<absl::StatusOr<Response>> (Envd::*Call)(const EnvdSandbox&, Request)>
constexpr Route Unary(absl::string_view path) {
  return Route{.door = Door::kEnvd,
               .path = path,
               .methods = "POST",
               .label = "envd_rpc",
               .unary = &UnaryJson<Request, Response, Call>};
}

template <typename Request,
          asio::awaitable<absl::Status> (Envd::*Call)(const EnvdSandbox&, Request, absl::Duration, EnvdStream&)>
constexpr Route Stream(absl::string_view path) {
  return Route{.door = Door::kEnvd,
               .path = path,
               .methods = "POST",
               .label = "envd_stream",
               .stream = &StreamJson<Request, Call>};
}

const std::array kRoutes = {
    // SandboxFusion.
    Route{.door = Door::kSandboxFusion, .path = "/run_code", .methods = "POST", .label = "run_code", .fusion = RunCode},
    Route{.door = Door::kSandboxFusion, .path = "/v1/ping", .methods = "GET", .label = "ping", .fusion = Ping},
    Route{.door = Door::kSandboxFusion, .path = "/health", .methods = "GET", .label = "health", .fusion = Health},
    // E2B's control plane (its own calls under these paths: e2b_control.h).
    Route{.door = Door::kE2bControl, .path = "/v2/sandboxes", .prefix = true, .label = "e2b"},
    Route{.door = Door::kE2bControl, .path = "/sandboxes", .prefix = true, .label = "e2b"},
    Route{.door = Door::kE2bControl, .path = "/templates", .prefix = true, .label = "e2b_templates"},
    Route{.door = Door::kE2bControl, .path = "/v2/templates", .prefix = true, .label = "e2b_templates"},
    Route{.door = Door::kE2bControl, .path = "/v3/templates", .prefix = true, .label = "e2b_templates"},
    // envd.
    Route{.door = Door::kEnvd, .path = "/health", .methods = "GET", .label = "envd_health"},
    Route{.door = Door::kEnvd, .path = "/files", .methods = "GET, POST", .label = "envd_files"},
    Stream<envd::StartRequest, &Envd::Start>("/process.Process/Start"),
    Stream<envd::ConnectRequest, &Envd::Connect>("/process.Process/Connect"),
    Unary<envd::ListRequest, envd::ListResponse, &Envd::List>("/process.Process/List"),
    Unary<envd::SendInputRequest, envd::SendInputResponse, &Envd::SendInput>("/process.Process/SendInput"),
    Unary<envd::CloseStdinRequest, envd::CloseStdinResponse, &Envd::CloseStdin>("/process.Process/CloseStdin"),
    Unary<envd::SendSignalRequest, envd::SendSignalResponse, &Envd::SendSignal>("/process.Process/SendSignal"),
    Unary<envd::UpdateRequest, envd::UpdateResponse, &Envd::Update>("/process.Process/Update"),
    Unary<envd::StatRequest, envd::StatResponse, &Envd::Stat>("/filesystem.Filesystem/Stat"),
    Unary<envd::ListDirRequest, envd::ListDirResponse, &Envd::ListDir>("/filesystem.Filesystem/ListDir"),
    Unary<envd::MakeDirRequest, envd::MakeDirResponse, &Envd::MakeDir>("/filesystem.Filesystem/MakeDir"),
    Unary<envd::MoveRequest, envd::MoveResponse, &Envd::Move>("/filesystem.Filesystem/Move"),
    Unary<envd::RemoveRequest, envd::RemoveResponse, &Envd::Remove>("/filesystem.Filesystem/Remove"),
    Stream<envd::WatchDirRequest, &Envd::WatchDir>("/filesystem.Filesystem/WatchDir"),
    // The code interpreter (its calls under /contexts: envd_http.cc).
    Route{.door = Door::kCodeInterpreter, .path = "/execute", .methods = "POST", .label = "code_execute"},
    Route{.door = Door::kCodeInterpreter,
          .path = "/contexts",
          .prefix = true,
          .methods = "GET, POST, DELETE",
          .label = "code_contexts"},
};

}  // namespace

bool Route::Takes(boost::beast::http::verb method) const {
  if (methods.empty()) return true;
  const std::string name(boost::beast::http::to_string(method));
  for (absl::string_view m : absl::StrSplit(methods, ',')) {
    if (absl::StripAsciiWhitespace(m) == name) return true;
  }
  return false;
}

std::span<const Route> Routes() { return kRoutes; }

const Route* FindRoute(Door door, absl::string_view path) {
  const bool sandbox = door == Door::kEnvd || door == Door::kCodeInterpreter;
  for (const Route& r : kRoutes) {
    if (sandbox ? r.door != door : r.door == Door::kEnvd || r.door == Door::kCodeInterpreter) continue;
    if (path == r.path) return &r;
    absl::string_view rest = path;
    if (r.prefix && absl::ConsumePrefix(&rest, r.path) && absl::StartsWith(rest, "/")) return &r;
  }
  return nullptr;
}

}  // namespace corral::sandbox_api
