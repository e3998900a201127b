// Asynchronous RL: the one rule policy versions follow everywhere (Proxy and Scheduler UpdatePolicy /
// ResumeGeneration) — they only move forward.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace corral {

// OK when `version` may follow `current`: the same version again (a retry) or a higher one. A lower one is
// FAILED_PRECONDITION naming both, a negative one INVALID_ARGUMENT.
inline absl::Status CheckPolicyVersion(int64_t version, int64_t current) {
  if (version < 0) return absl::InvalidArgumentError(absl::StrCat("policy version ", version, " is negative"));
  if (version < current) {
    return absl::FailedPreconditionError(absl::StrCat("policy version ", version, " is below the current version ",
                                                      current, ": versions only move forward"));
  }
  return absl::OkStatus();
}

}  // namespace corral
