// What every E2B API call here is made of: the request as the HTTP front hands it over, the answer, the options
// both the control plane and the in-sandbox API read, and the shapes of the SDK's errors and times.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "boost/json/object.hpp"
#include "boost/json/string_view.hpp"
#include "libs/core/price_table.h"

namespace corral::sandbox_api {

struct E2bRequest {
  std::string method;  // "GET", "POST", "DELETE"
  std::string path;
  std::map<std::string, std::string> query;  // decoded once
  std::string api_key;                       // X-API-KEY
  std::string base_url;  // how the client reached this replica ("http://HOST", or X-Forwarded-Proto's scheme)
  std::string body;
};

struct E2bAnswer {
  int status = 200;
  std::string body;  // JSON, or empty (204)
  std::vector<std::pair<std::string, std::string>> headers;
};

struct E2bOptions {
  absl::Duration default_timeout = absl::Minutes(5);  // the SDK's and E2B's default
  absl::Duration max_timeout = absl::Hours(24);
  std::string envd_version = "0.6.4";  // every feature of the SDK's commands, files and watch
  std::string home = "/home/user";     // the E2B user's home: a task path of every sandbox
  // A metadata key that names the image of a sandbox made from the default template ("" : none).
  std::string image_metadata_key;
  // What a sandbox's usage costs (GET /sandboxes/{id}/usage); empty: no cost.
  PriceTable prices;
  // envd's processes on a sandbox on the host's filesystem start fork-ready (a fork carries them into its
  // children; what they run cannot make user namespaces), or as any sandbox process (a fork refuses while one runs).
  bool fork_ready = true;
};

// The SDK's error body: `code` is the HTTP status (it tells "not found" from the body, not the status line).
E2bAnswer E2bError(int status, const std::string& message);
// The usual status for a code (http::connect::HttpStatus), except that a wait that ran out is a 503: the SDK's
// ServiceBusyError, "please retry".
E2bAnswer E2bFromStatus(const absl::Status& s);
// The body as a JSON object ({} when empty); INVALID_ARGUMENT otherwise.
absl::StatusOr<boost::json::object> E2bBody(const std::string& body);
// RFC 3339 in UTC with milliseconds, as E2B writes times.
std::string E2bTime(absl::Time t);
inline boost::json::string_view JsonText(absl::string_view s) { return boost::json::string_view(s.data(), s.size()); }

// True for a template that is a plain sandbox ("base", the code interpreter's "code-interpreter-v1"), not an
// image.
bool IsPlainTemplate(const std::string& template_id);

}  // namespace corral::sandbox_api
