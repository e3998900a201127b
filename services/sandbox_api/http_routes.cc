#include "services/sandbox_api/http_routes.h"

#include <string>

#include "libs/http/url.h"
#include "services/sandbox_api/routes.h"

namespace corral::sandbox_api {
namespace {

namespace bhttp = boost::beast::http;
namespace asio = boost::asio;

constexpr char kJson[] = "application/json";

// How the client reached this replica: its Host, and the scheme a TLS-ending proxy says it used; "" without a Host.
std::string BaseUrl(const http::Request& request) {
  const std::string host(request[bhttp::field::host]);
  if (host.empty()) return "";
  const std::string proto(request["x-forwarded-proto"]);
  return (proto == "https" ? "https://" : "http://") + host;
}

asio::awaitable<void> RouteE2b(E2bControlPlane* e2b, SandboxApiMetrics* metrics, http::Request& request,
                               http::Target target, http::Responder& responder) {
  E2bRequest call{.method = std::string(request.method_string()),
                  .path = std::move(target.path),
                  .query = std::move(target.query),
                  .api_key = std::string(request["x-api-key"]),
                  .base_url = BaseUrl(request),
                  .body = std::move(request.body())};
  E2bAnswer answer = co_await e2b->Handle(std::move(call));
  if (metrics != nullptr) metrics->Request("e2b", answer.status);
  http::Fields headers(answer.headers.begin(), answer.headers.end());
  co_await responder.Send(answer.status, kJson, std::move(answer.body), headers);
}

// SandboxFusion's routes, and the refusals of paths no route has (FastAPI's shapes).
asio::awaitable<void> RouteFusion(RunCodeService* run_code, SandboxApiMetrics* metrics, const Route* route,
                                  http::Request& request, http::Responder& responder) {
  HttpAnswer answer{404, R"({"detail":"Not Found"})"};
  http::Fields headers;
  if (route != nullptr && !route->Takes(request.method())) {
    answer = HttpAnswer{405, R"({"detail":"Method Not Allowed"})"};
    headers = {{"Allow", std::string(route->methods)}};
  } else if (route != nullptr) {
    answer = co_await route->fusion(*run_code, std::move(request.body()));
  }
  if (metrics != nullptr) metrics->Request(route != nullptr ? std::string(route->label) : "other", answer.status);
  co_await responder.Send(answer.status, kJson, std::move(answer.body), headers);
}

asio::awaitable<void> Serve(RunCodeService* run_code, E2bControlPlane* e2b, EnvdHttp* envd, SandboxApiMetrics* metrics,
                            http::Request& request, http::Responder& responder) {
  auto target = http::ParseTarget(absl::string_view(request.target().data(), request.target().size()));
  const std::string path = target.ok() ? target->path : "";
  const bool in_sandbox = envd != nullptr && EnvdHttp::Serves(request);
  const Door door = !in_sandbox                             ? Door::kSandboxFusion
                    : EnvdHttp::ForCodeInterpreter(request) ? Door::kCodeInterpreter
                                                            : Door::kEnvd;
  const Route* route = FindRoute(door, path);
  if (in_sandbox) {
    co_await envd->Handle(route, request, responder);
    if (metrics != nullptr)
      metrics->Request(route != nullptr ? std::string(route->label) : "envd_other", responder.status());
  } else if (route != nullptr && route->door == Door::kE2bControl && e2b != nullptr) {
    co_await RouteE2b(e2b, metrics, request, *std::move(target), responder);
  } else {
    const Route* fusion = route != nullptr && route->door == Door::kSandboxFusion ? route : nullptr;
    co_await RouteFusion(run_code, metrics, fusion, request, responder);
  }
}

}  // namespace

http::Handler MakeHttpHandler(RunCodeService* run_code, E2bControlPlane* e2b, EnvdHttp* envd,
                              SandboxApiMetrics* metrics) {
  return [run_code, e2b, envd, metrics](http::Request& request, http::Responder& responder) {
    return Serve(run_code, e2b, envd, metrics, request, responder);
  };
}

}  // namespace corral::sandbox_api
