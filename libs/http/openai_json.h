// OpenAI-shaped JSON the HTTP servers answer with (the proxy, the scripted model, the server's own refusals).
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "boost/json/fwd.hpp"

namespace corral::http {

// A JSON error body in OpenAI's shape: {"error": {"message", "type", "param": null, "code"}} (code null if empty).
std::string ErrorJson(absl::string_view message, absl::string_view type, absl::string_view code = "");
// A member read leniently, as OpenAI-shaped JSON is: its string, "" when absent (null pointer) or of another type.
std::string StringOf(const boost::json::value* v);

// An OpenAI model list: {"object": "list", "data": [{"id", "object": "model", "owned_by"}]}.
std::string ModelListJson(const std::vector<std::string>& ids, absl::string_view owned_by);
// The ids of such a list (GET /v1/models of vLLM, SGLang, …); empty for anything else.
std::vector<std::string> ModelIds(absl::string_view body);

}  // namespace corral::http
