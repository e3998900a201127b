// Links into the rollout inspector (the scheduler's web page): what `corral ui` prints and `corral run` ends with.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace corral::cli {

// `base` ("http://HOST:PORT") + the page of `batch` or `episode` (or the batch list). When the host is not
// loopback the inspector wants the cluster token: it is minted from `secret_file` into ?token= (INVALID_ARGUMENT
// when there is no secret to mint it from).
absl::StatusOr<std::string> InspectorLink(const std::string& base, const std::string& secret_file,
                                          const std::string& batch, const std::string& episode);

}  // namespace corral::cli
