// Links into the rollout inspector (the scheduler's web page): what `corral ui` prints and `corral run` ends with.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace corral::cli {

// `base` ("http://HOST:PORT") + the page of `batch` or `episode` (or the batch list). The inspector wants the
// cluster token on every interface: it is minted from `secret_file` into ?token= (the page keeps it for the tab
// and drops it from the address bar). Without a secret (an --insecure cluster) the link has no token.
absl::StatusOr<std::string> InspectorLink(const std::string& base, const std::string& secret_file,
                                          const std::string& batch, const std::string& episode);

}  // namespace corral::cli
