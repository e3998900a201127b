#include "services/sandbox_api/e2b/e2b_wire.h"

#include "absl/strings/strip.h"
#include "boost/json.hpp"
#include "libs/http/connect_codec.h"

namespace corral::sandbox_api {

namespace json = boost::json;

E2bAnswer E2bError(int status, const std::string& message) {
  json::object body;
  body["code"] = status;
  body["message"] = message;
  return E2bAnswer{status, json::serialize(body), {}};
}

E2bAnswer E2bFromStatus(const absl::Status& s) {
  const int status = s.code() == absl::StatusCode::kDeadlineExceeded ? 503 : http::connect::HttpStatus(s.code());
  return E2bError(status, std::string(s.message()));
}

std::string E2bTime(absl::Time t) { return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone()); }

absl::StatusOr<json::object> E2bBody(const std::string& body) {
  if (absl::StripAsciiWhitespace(body).empty()) return json::object();
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  return std::move(v.as_object());
}

bool IsPlainTemplate(const std::string& template_id) {
  return template_id == "base" || template_id == "code-interpreter-v1" || template_id == "code-interpreter";
}

}  // namespace corral::sandbox_api
