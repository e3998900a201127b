#include "services/sandbox_api/http_routes.h"

#include <string>

#include "libs/http/url.h"

namespace corral::sandbox_api {
namespace {

namespace bhttp = boost::beast::http;
namespace asio = boost::asio;

constexpr char kJson[] = "application/json";

asio::awaitable<void> Route(RunCodeService* run_code, SandboxApiMetrics* metrics, http::Request& request,
                            http::Responder& responder) {
  auto target = http::ParseTarget(absl::string_view(request.target().data(), request.target().size()));
  const std::string path = target.ok() ? target->path : "";
  std::string route = "other";
  HttpAnswer answer{404, R"({"detail":"Not Found"})"};
  http::Fields headers;
  auto only = [&](bhttp::verb verb, const char* allow) {
    if (request.method() == verb) return true;
    answer = HttpAnswer{405, R"({"detail":"Method Not Allowed"})"};
    headers = {{"Allow", allow}};
    return false;
  };
  if (path == "/run_code") {
    route = "run_code";
    if (only(bhttp::verb::post, "POST")) answer = co_await run_code->RunCode(std::move(request.body()));
  } else if (path == "/v1/ping") {
    route = "ping";
    if (only(bhttp::verb::get, "GET")) answer = HttpAnswer{200, R"("pong")"};
  } else if (path == "/health") {
    route = "health";
    if (only(bhttp::verb::get, "GET")) answer = HttpAnswer{200, R"({"status":"ok"})"};
  }
  if (metrics != nullptr) metrics->Request(route, answer.status);
  co_await responder.Send(answer.status, kJson, std::move(answer.body), headers);
}

}  // namespace

http::Handler MakeHttpHandler(RunCodeService* run_code, SandboxApiMetrics* metrics) {
  return [run_code, metrics](http::Request& request, http::Responder& responder) {
    return Route(run_code, metrics, request, responder);
  };
}

}  // namespace corral::sandbox_api
