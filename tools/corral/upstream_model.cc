#include "tools/corral/upstream_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace corral::cli {

absl::StatusOr<ModelChoice> ChooseModel(const std::optional<std::vector<std::string>>& served, const std::string& why,
                                        const std::string& requested, const std::string& upstream) {
  if (!served.has_value()) {
    if (!requested.empty()) {
      return ModelChoice{requested,
                         absl::StrCat(requested, " (--model; ", upstream, " did not list its models: ", why, ")")};
    }
    return ModelChoice{"", absl::StrCat("none: ", upstream, " did not list its models (", why,
                                        "); tasks must name their model, or pass --model NAME")};
  }
  if (!requested.empty()) {
    if (!served->empty() && std::find(served->begin(), served->end(), requested) == served->end()) {
      return absl::InvalidArgumentError(absl::StrCat("--model ", requested, ": ", upstream,
                                                     " does not serve it; it serves: ", absl::StrJoin(*served, ", ")));
    }
    return ModelChoice{requested, absl::StrCat(requested, " (--model)")};
  }
  if (served->size() == 1) {
    return ModelChoice{served->front(), absl::StrCat(served->front(), " (the one model ", upstream, " serves)")};
  }
  if (served->empty()) {
    return ModelChoice{"", absl::StrCat("none: ", upstream,
                                        " lists no model; tasks must name their model, or pass "
                                        "--model NAME")};
  }
  return ModelChoice{
      "", absl::StrCat("none chosen: ", upstream, " serves ", served->size(), " models (", absl::StrJoin(*served, ", "),
                       "); pass --model NAME, or name the model in "
                       "each task")};
}

}  // namespace corral::cli
