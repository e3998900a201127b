#include "services/sandbox_api/e2b/envd_wire.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "boost/json.hpp"
#include "libs/http/connect_codec.h"

namespace corral::sandbox_api::envd_wire {

namespace asio = boost::asio;
namespace json = boost::json;

std::string StringField(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
}

const json::object* ObjectField(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_object() ? &v->as_object() : nullptr;
}

absl::Status CheckUser(absl::string_view user) {
  if (user.empty() || user == "user") return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("user '", user,
                   "': a Corral sandbox has one user, 'user' (unprivileged); commands and files "
                   "cannot run as another"));
}

absl::Status CheckBasicUser(const http::Request& r) {
  const std::string auth(r[boost::beast::http::field::authorization]);
  if (auth.empty()) return absl::OkStatus();
  absl::string_view v = auth;
  std::string decoded;
  if (!absl::ConsumePrefix(&v, "Basic ") || !absl::Base64Unescape(v, &decoded)) {
    return absl::UnauthenticatedError("Authorization must be Basic base64(user:)");
  }
  return CheckUser(decoded.substr(0, decoded.find(':')));
}

bool BoolField(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_bool() && v->as_bool();
}

namespace {

// /files errors: {"code": <status>, "message"}.
std::string FilesError(int status, absl::string_view message) {
  return json::serialize(
      json::object{{"code", status}, {"message", json::string_view(message.data(), message.size())}});
}

}  // namespace

int FilesStatus(absl::StatusCode code) {
  // A full disk is envd's 507 (the SDK's NotEnoughSpaceError); the rest as everywhere.
  return code == absl::StatusCode::kResourceExhausted ? 507 : http::connect::HttpStatus(code);
}

absl::Duration StreamTimeout(const http::Request& r, absl::Duration fallback) {
  int64_t ms = 0;
  if (!absl::SimpleAtoi(std::string(r["connect-timeout-ms"]), &ms) || ms <= 0) return fallback;
  return std::min(absl::Milliseconds(ms), fallback);
}

asio::awaitable<void> Reply(http::Responder& responder, int status, const char* type, std::string& body) {
  co_await responder.Send(status, type, std::move(body));
}

asio::awaitable<void> ReplyError(http::Responder& responder, const absl::Status& s, int status) {
  std::string body = FilesError(status, s.message());
  co_await responder.Send(status, kJson, std::move(body));
}

asio::awaitable<void> EndStreamWith(http::Responder& responder, const absl::Status& status) {
  const std::string eos = http::connect::EndOfStream(status);
  if (!responder.started() && !co_await responder.StartStream(200, kStreamType)) co_return;
  if (co_await responder.WriteChunk(eos)) co_await responder.EndStream();
}

asio::awaitable<void> ReplyConnectError(http::Responder& responder, const absl::Status& s, bool stream) {
  if (stream) {
    co_await EndStreamWith(responder, s);
  } else {
    std::string body = http::connect::ErrorJson(s);
    co_await responder.Send(http::connect::HttpStatus(s.code()), kJson, std::move(body));
  }
}

}  // namespace corral::sandbox_api::envd_wire
