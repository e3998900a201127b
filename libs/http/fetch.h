// A blocking HTTP/1.1 GET, plain or over TLS, for work that runs on its own thread (image pulls on the sandbox
// host's image workers): a fresh connection and event loop per call, the peer's certificate verified against
// the system's roots (and an optional CA file), the body handed to a sink piece by piece as it arrives.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "libs/http/url.h"

namespace corral::http {

struct FetchOptions {
  std::string ca_file;  // trusted besides the system's roots (a private registry's CA)
  std::string ca_hint;  // added to a failed certificate check's message: where the caller configures ca_file
  absl::Duration timeout = absl::Seconds(30);  // per step: connect, handshake, each write and read
  std::string user_agent = "corral";
  uint64_t max_bytes = UINT64_MAX;  // of a 2xx body
};

struct FetchReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lowercase names
  std::string error_body;                      // a non-2xx reply's body, its first 64 KiB
};

// GET `url` with `headers`. A 2xx body goes to `sink` (whose error ends the fetch and is returned); any other
// status is a reply too, its body in error_body. UNAVAILABLE (cannot resolve or connect, TLS refused, the
// connection broke), DEADLINE_EXCEEDED (a step timed out), RESOURCE_EXHAUSTED (over max_bytes),
// FAILED_PRECONDITION (the CA file cannot be read); messages start with "GET <url>".
absl::StatusOr<FetchReply> Fetch(const Url& url, const std::vector<std::pair<std::string, std::string>>& headers,
                                 const FetchOptions& options,
                                 const std::function<absl::Status(absl::string_view)>& sink);

}  // namespace corral::http
