#include "services/scheduler/inspector_http.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "boost/json.hpp"
#include "libs/http/embedded_files.h"
#include "libs/http/url.h"

extern const corral::http::EmbeddedFile kInspectorAssets[];

namespace corral::scheduler {
namespace {

namespace bhttp = boost::beast::http;

int HttpStatusOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kFailedPrecondition: return 409;
    case absl::StatusCode::kOutOfRange: return 410;
    default: return 500;
  }
}

std::string ErrorJson(absl::string_view message) {
  boost::json::object o;
  o["error"] = std::string(message);
  return boost::json::serialize(o);
}

// The page never changes while the binary runs; the data always may.
const http::Fields kNoStore = {{"Cache-Control", "no-store"}};
const http::Fields kAsset = {{"Cache-Control", "no-cache"}, {"X-Content-Type-Options", "nosniff"}};
const http::Fields kGetOnly = {{"Allow", "GET"}};

absl::Status CheckToken(const CallAuthenticator& auth, const http::Request& request, const http::Target& target) {
  absl::string_view header(request[bhttp::field::authorization].data(), request[bhttp::field::authorization].size());
  std::string token;
  if (absl::ConsumePrefix(&header, "Bearer ")) {
    token = std::string(header);
  } else if (auto it = target.query.find("token"); it != target.query.end()) {
    token = it->second;
  }
  if (token.empty()) {
    return absl::UnauthenticatedError(
        "the inspector wants the cluster token: 'Authorization: Bearer <token>' or ?token=");
  }
  return auth.CheckClusterToken(token);
}

absl::StatusOr<std::string> Api(const Inspector& inspector, const http::Target& target) {
  auto param = [&](const char* key) {
    auto it = target.query.find(key);
    return it == target.query.end() ? std::string() : it->second;
  };
  if (target.path == "/api/batches") {
    int32_t page_size = 50;
    if (const std::string s = param("page_size"); !s.empty() && !absl::SimpleAtoi(s, &page_size)) {
      return absl::InvalidArgumentError("page_size must be an integer");
    }
    return inspector.BatchesJson(page_size, param("page_token"));
  }
  const std::string id = param("id");
  if (target.path == "/api/batch" || target.path == "/api/episode") {
    if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(target.path, " wants ?id="));
    return target.path == "/api/batch" ? inspector.BatchJson(id) : inspector.EpisodeJson(id);
  }
  return absl::NotFoundError(absl::StrCat("no API ", target.path));
}

}  // namespace

http::Handler MakeInspectorHandler(const Inspector* inspector, const CallAuthenticator* auth, bool require_token) {
  return [=](http::Request& request, http::Responder& responder) -> boost::asio::awaitable<void> {
    if (request.method() != bhttp::verb::get) {
      const std::string body = ErrorJson("the inspector is read-only: GET only");
      co_await responder.Send(405, "application/json", body, kGetOnly);
      co_return;
    }
    auto target = http::ParseTarget(absl::string_view(request.target().data(), request.target().size()));
    if (!target.ok()) {
      const std::string body = ErrorJson(target.status().message());
      co_await responder.Send(400, "application/json", body);
      co_return;
    }
    if (target->path == "/health") {
      co_await responder.Send(200, "application/json", "{\"status\":\"ok\"}");
      co_return;
    }
    if (absl::StartsWith(target->path, "/api/")) {
      const absl::Status allowed = require_token ? CheckToken(*auth, request, *target) : absl::OkStatus();
      absl::StatusOr<std::string> body = allowed.ok() ? Api(*inspector, *target) : absl::StatusOr<std::string>(allowed);
      if (!body.ok()) {
        const std::string error = ErrorJson(body.status().message());
        co_await responder.Send(HttpStatusOf(body.status()), "application/json", error, kNoStore);
        co_return;
      }
      co_await responder.Send(200, "application/json", *std::move(body), kNoStore);
      co_return;
    }
    // The page and its assets (no data in them: served without the token, so the page can ask for it).
    const std::string path = target->path == "/" ? "index.html" : target->path.substr(1);
    const http::EmbeddedFile* file = http::FindEmbedded(kInspectorAssets, path);
    if (file == nullptr) {
      const std::string body = ErrorJson(absl::StrCat("no page ", target->path));
      co_await responder.Send(404, "application/json", body);
      co_return;
    }
    std::string body(file->data);
    co_await responder.Send(200, http::ContentTypeOf(file->path), std::move(body), kAsset);
  };
}

}  // namespace corral::scheduler
