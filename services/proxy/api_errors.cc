#include "services/proxy/api_errors.h"

#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "libs/http/openai_json.h"

namespace corral::proxy {

namespace json = boost::json;

ApiErrorShape ShapeOf(ApiError error) {
  switch (error) {
    case ApiError::kUnknownRoute: return {404, "invalid_request_error", "not_found"};
    case ApiError::kMethodNotAllowed: return {405, "invalid_request_error", "method_not_allowed"};
    case ApiError::kUnauthenticated: return {401, "invalid_request_error", "invalid_api_key"};
    case ApiError::kSessionClosed: return {410, "invalid_request_error", "session_closed"};
    case ApiError::kBadRequest: return {400, "invalid_request_error", ""};
    case ApiError::kModelNotAllowed: return {400, "invalid_request_error", "model_not_allowed"};
    case ApiError::kBudgetExhausted: return {400, "invalid_request_error", "budget_exhausted"};
    case ApiError::kUpstream: return {502, "upstream_error", ""};
    case ApiError::kRateLimited: return {429, "rate_limit_error", "rate_limit_exceeded"};
    case ApiError::kServer: return {500, "server_error", ""};
  }
  return {500, "server_error", ""};
}

std::string ErrorBody(ApiError error, absl::string_view message, bool chat) {
  const ApiErrorShape shape = ShapeOf(error);
  std::string body = http::ErrorJson(message, shape.type, shape.code);
  if (error != ApiError::kBudgetExhausted) return body;
  json::object out = json::parse(body).as_object();
  json::object choice;
  choice["index"] = 0;
  choice["finish_reason"] = "length";
  if (chat) {
    json::object m;
    m["role"] = "assistant";
    m["content"] = "";
    choice["message"] = std::move(m);
  } else {
    choice["text"] = "";
  }
  out["object"] = chat ? "chat.completion" : "text_completion";
  out["choices"] = json::array{std::move(choice)};
  return json::serialize(out);
}

std::string ErrorEvent(ApiError error, absl::string_view message) {
  const ApiErrorShape shape = ShapeOf(error);
  return absl::StrCat("data: ", http::ErrorJson(message, shape.type, shape.code), "\n\n");
}

}  // namespace corral::proxy
