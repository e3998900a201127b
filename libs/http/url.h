// Request targets: "/path?key=value&…" split into a path and decoded query parameters.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace corral::http {

struct Target {
  std::string path;                           // percent-decoded
  std::map<std::string, std::string> query;   // decoded ('+' is a space); a repeated key keeps its last value
};

// INVALID_ARGUMENT for a target that is not origin-form ("/…") or holds a malformed %-escape.
absl::StatusOr<Target> ParseTarget(absl::string_view target);
// Decodes %XX escapes (and '+' as a space when `plus_is_space`); INVALID_ARGUMENT when one is malformed.
absl::StatusOr<std::string> PercentDecode(absl::string_view s, bool plus_is_space);

}  // namespace corral::http
