#include "libs/http/connect_codec.h"

#include "absl/strings/str_cat.h"
#include "boost/json.hpp"

namespace corral::http::connect {

std::string Envelope(absl::string_view json, uint8_t flags) {
  std::string out;
  out.reserve(5 + json.size());
  out.push_back(static_cast<char>(flags));
  const uint32_t n = static_cast<uint32_t>(json.size());
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((n >> shift) & 0xff));
  out.append(json.data(), json.size());
  return out;
}

std::string ErrorJson(const absl::Status& status) {
  boost::json::object error;
  error["code"] = Code(status.code());
  error["message"] = std::string(status.message());
  return boost::json::serialize(error);
}

std::string EndOfStream(const absl::Status& status) {
  if (status.ok()) return Envelope("{}", kEndStream);
  return Envelope(absl::StrCat(R"({"error":)", ErrorJson(status), "}"), kEndStream);
}

absl::StatusOr<std::vector<std::pair<uint8_t, std::string>>> ReadEnvelopes(absl::string_view body) {
  std::vector<std::pair<uint8_t, std::string>> out;
  while (!body.empty()) {
    if (body.size() < 5) return absl::InvalidArgumentError("an envelope cut short in its header");
    const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(body[i])); };
    const uint32_t n = (byte(1) << 24) | (byte(2) << 16) | (byte(3) << 8) | byte(4);
    if (body.size() - 5 < n) return absl::InvalidArgumentError("an envelope cut short in its message");
    out.emplace_back(static_cast<uint8_t>(byte(0)), std::string(body.substr(5, n)));
    body.remove_prefix(5 + n);
  }
  return out;
}

absl::StatusOr<std::string> OnlyMessage(absl::string_view body) {
  auto envelopes = ReadEnvelopes(body);
  if (!envelopes.ok() || envelopes->size() != 1) {
    return absl::InvalidArgumentError("a streaming request holds exactly one enveloped message");
  }
  if ((*envelopes)[0].first != 0) {
    return absl::InvalidArgumentError("compressed or end-of-stream request envelopes are not accepted");
  }
  return std::move((*envelopes)[0].second);
}

const char* Code(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return "ok";
    case absl::StatusCode::kCancelled: return "canceled";
    case absl::StatusCode::kInvalidArgument: return "invalid_argument";
    case absl::StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    case absl::StatusCode::kNotFound: return "not_found";
    case absl::StatusCode::kAlreadyExists: return "already_exists";
    case absl::StatusCode::kPermissionDenied: return "permission_denied";
    case absl::StatusCode::kResourceExhausted: return "resource_exhausted";
    case absl::StatusCode::kFailedPrecondition: return "failed_precondition";
    case absl::StatusCode::kAborted: return "aborted";
    case absl::StatusCode::kOutOfRange: return "out_of_range";
    case absl::StatusCode::kUnimplemented: return "unimplemented";
    case absl::StatusCode::kInternal: return "internal";
    case absl::StatusCode::kUnavailable: return "unavailable";
    case absl::StatusCode::kDataLoss: return "data_loss";
    case absl::StatusCode::kUnauthenticated: return "unauthenticated";
    default: return "unknown";
  }
}

int HttpStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted: return 409;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kUnauthenticated: return 401;
    default: return 500;
  }
}

}  // namespace corral::http::connect
