// multipart/form-data bodies (RFC 7578), as the e2b SDK uploads files: each part's form name, file name and
// bytes. Plain functions, no I/O; garbage is INVALID_ARGUMENT, never a crash.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace corral::sandbox_api {

struct FormPart {
  std::string name;      // Content-Disposition's name
  std::string filename;  // its filename ("" when none)
  std::string data;
};

// The boundary of a `multipart/form-data; boundary=...` content type; INVALID_ARGUMENT when there is none.
absl::StatusOr<std::string> MultipartBoundary(absl::string_view content_type);
// Every part of `body`, in order.
absl::StatusOr<std::vector<FormPart>> ParseMultipart(absl::string_view body, absl::string_view boundary);

}  // namespace corral::sandbox_api
