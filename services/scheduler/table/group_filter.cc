#include "services/scheduler/table/group_filter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace corral::scheduler {

bool HasBounds(const v1::GroupFilter& f) {
  return f.drop_equal_rewards() || f.has_min_reward_std() || f.has_max_reward_std() || f.has_min_mean_reward() ||
         f.has_max_mean_reward() || f.has_min_reward_range();
}

std::string FilterGroup(const v1::GroupFilter& f, const std::vector<double>& rewards) {
  if (!HasBounds(f)) return "";
  if (rewards.empty()) return "group filtered: no episode of the group finished with a reward";
  const auto [lo, hi] = std::minmax_element(rewards.begin(), rewards.end());
  double mean = 0;
  for (double r : rewards) mean += r;
  mean /= static_cast<double>(rewards.size());
  double var = 0;
  for (double r : rewards) var += (r - mean) * (r - mean);
  const double std = std::sqrt(var / static_cast<double>(rewards.size()));
  const double range = *hi - *lo;
  if (f.drop_equal_rewards() && range == 0) return absl::StrCat("group filtered: rewards all equal (", *lo, ")");
  if (f.has_min_reward_std() && std < f.min_reward_std()) {
    return absl::StrCat("group filtered: reward std ", std, " < min_reward_std ", f.min_reward_std());
  }
  if (f.has_max_reward_std() && std > f.max_reward_std()) {
    return absl::StrCat("group filtered: reward std ", std, " > max_reward_std ", f.max_reward_std());
  }
  if (f.has_min_mean_reward() && mean < f.min_mean_reward()) {
    return absl::StrCat("group filtered: mean reward ", mean, " < min_mean_reward ", f.min_mean_reward());
  }
  if (f.has_max_mean_reward() && mean > f.max_mean_reward()) {
    return absl::StrCat("group filtered: mean reward ", mean, " > max_mean_reward ", f.max_mean_reward());
  }
  if (f.has_min_reward_range() && range < f.min_reward_range()) {
    return absl::StrCat("group filtered: reward range ", range, " < min_reward_range ", f.min_reward_range());
  }
  return "";
}

}  // namespace corral::scheduler
