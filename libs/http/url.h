// Request targets: "/path?key=value&…" split into a path and decoded query parameters.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace corral::http {

struct Target {
  std::string path;                          // percent-decoded
  std::map<std::string, std::string> query;  // decoded ('+' is a space); a repeated key keeps its last value
};

// Any http:// or https:// URL, as a registry or a token service names one: the scheme's port when none is
// given; the target is the path and query, "/" at least.
struct Url {
  bool tls = false;
  std::string host;  // an IPv6 address without its brackets
  int port = 0;
  bool explicit_port = false;     // the URL named its port
  std::string target;             // origin-form: "/path?query"
  std::string authority() const;  // "host:port" ("[v6]:port")
  std::string ToString() const;
};
// INVALID_ARGUMENT naming the text for another scheme, or no usable host and port. The one URL parser (RFC 3986,
// by Boost.URL): the others below are restrictions of it.
absl::StatusOr<Url> ParseUrl(absl::string_view text);

// An "http://HOST:PORT[/path]" address, as upstreams and base URLs are given.
struct HttpUrl {
  std::string host;  // an IPv6 address without its brackets
  int port = 0;
  std::string path;               // "" or "/…", without a trailing '/'
  std::string authority() const;  // "host:port" ("[v6]:port")
};

// INVALID_ARGUMENT naming `what` and the text for anything else (https, no port, a port out of range).
absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url, absl::string_view what = "URL");

// INVALID_ARGUMENT for a target that is not origin-form ("/…") or holds a malformed %-escape.
absl::StatusOr<Target> ParseTarget(absl::string_view target);
// Decodes %XX escapes (and '+' as a space when `plus_is_space`); INVALID_ARGUMENT when one is malformed.
absl::StatusOr<std::string> PercentDecode(absl::string_view s, bool plus_is_space);

}  // namespace corral::http
