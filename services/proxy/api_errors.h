// Every error the proxy's OpenAI-compatible side answers, in one table: HTTP status, OpenAI error type and
// code. Bodies are OpenAI's shape ({"error": {"message", "type", "param", "code"}}); a budget refusal also
// carries a finish_reason "length" choice so agents that look only at choices stop cleanly.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace corral::proxy {

enum class ApiError {
  kUnknownRoute,      // 404
  kMethodNotAllowed,  // 405
  kUnauthenticated,   // 401: no, malformed or forged env token
  kSessionClosed,     // 410
  kBadRequest,        // 400: the body is not a JSON object
  kModelNotAllowed,   // 400
  kBudgetExhausted,   // 400
  kUpstream,          // 502 by default (503: none serves the model, 504: timed out)
  kRateLimited,       // 429: a quota was not granted within quota_max_wait
  kServer,            // 500: the call could not be journaled
};

struct ApiErrorShape {
  int http_status;
  absl::string_view type;
  absl::string_view code;  // empty: null
};
ApiErrorShape ShapeOf(ApiError error);

// The JSON body; `chat` picks the shape of a budget refusal's choice.
std::string ErrorBody(ApiError error, absl::string_view message, bool chat = true);
// The same as one SSE event, for a stream already started.
std::string ErrorEvent(ApiError error, absl::string_view message);

}  // namespace corral::proxy
