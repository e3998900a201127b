// Dynamic sampling: whether a GRPO group's rewards pass the batch's GroupFilter. Plain functions.
#pragma once

#include <string>
#include <vector>

#include "corral/v1/scheduler.pb.h"

namespace corral::scheduler {

// True when `filter` sets any bound.
bool HasBounds(const v1::GroupFilter& filter);

// Empty when `rewards` (those of the group's FINISHED episodes) pass every bound of `filter`; otherwise why not,
// for the FILTERED results' failure_message ("group filtered: rewards all equal (1)"). A group without a reward
// fails any set bound.
std::string FilterGroup(const v1::GroupFilter& filter, const std::vector<double>& rewards);

}  // namespace corral::scheduler
