// The Connect protocol's framing as the `e2b` SDK speaks it to envd (JSON codec, connectrpc.com/docs/protocol):
// a unary call is a JSON body and a JSON answer, or an error as {"code": "<snake_case code>", "message"} with the
// code's HTTP status; a server stream is a request of one enveloped message and an answer of enveloped messages
// (1 flag byte, 4-byte big-endian length, JSON) that must end with an end-of-stream envelope (flag 0x02).
// Plain functions, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace corral::http::connect {

inline constexpr uint8_t kEndStream = 0x02;

// One enveloped message.
std::string Envelope(absl::string_view json, uint8_t flags = 0);
// The end of a stream: {} when `status` is OK, else {"error": {"code", "message"}}.
std::string EndOfStream(const absl::Status& status);
// Every envelope of `body` (flags, message) in order; INVALID_ARGUMENT when one is cut short.
absl::StatusOr<std::vector<std::pair<uint8_t, std::string>>> ReadEnvelopes(absl::string_view body);
// The one message of a streaming request's body; INVALID_ARGUMENT when it is not exactly one uncompressed
// envelope.
absl::StatusOr<std::string> OnlyMessage(absl::string_view body);

// "not_found", "invalid_argument", ... for a status code.
const char* Code(absl::StatusCode code);
// A unary error's HTTP status (not_found 404, invalid_argument 400, unauthenticated 401, ...).
int HttpStatus(absl::StatusCode code);
// {"code", "message"}.
std::string ErrorJson(const absl::Status& status);

}  // namespace corral::http::connect
