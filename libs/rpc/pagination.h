// The page-size rule every List RPC shares (common.proto, "Pagination"): 0 -> 100, above 1000 -> 1000,
// negative -> INVALID_ARGUMENT.
#pragma once

#include <algorithm>
#include <cstdint>

#include "absl/status/statusor.h"

namespace corral {

inline absl::StatusOr<int> PageSize(int32_t requested) {
  if (requested < 0) return absl::InvalidArgumentError("page_size must not be negative");
  return requested == 0 ? 100 : std::min<int>(requested, 1000);
}

}  // namespace corral
