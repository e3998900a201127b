// `corral up --upstream`: which model the cluster's tasks use when they name none, from what the upstream
// serves (GET /v1/models) and --model.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace corral::cli {

struct ModelChoice {
  std::string model;  // the default model for tasks that name none; empty: none (tasks must name theirs)
  std::string note;   // one line for the start-up output
};

// `served`: the upstream's models, nullopt when it could not be asked (`why`). `requested`: --model, may be
// empty. INVALID_ARGUMENT when --model names a model the upstream does not serve.
absl::StatusOr<ModelChoice> ChooseModel(const std::optional<std::vector<std::string>>& served, const std::string& why,
                                        const std::string& requested, const std::string& upstream);

}  // namespace corral::cli
