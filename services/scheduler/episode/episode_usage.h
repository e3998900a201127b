// What an episode cost, from what the scheduler holds anyway: the proxy's record of its calls (CALLS form) and the
// tools it ran. Pure.
#pragma once

#include <map>
#include <string>

#include "absl/time/time.h"
#include "corral/v1/scheduler.pb.h"

namespace corral::scheduler {

// The tools of one name an episode ran (Attempt::ToolRan).
struct ToolTally {
  uint32_t calls = 0;
  absl::Duration time;
};

// Calls [from, to) of `trajectory` (clamped to its calls): counts and tokens, in all and per role and model, and
// the time spent at the model (each call's received → done).
v1::ModelUsage ModelUsageOf(const v1::Trajectory& trajectory, int from, int to);

// `by_name` as ToolUsage, with `total` the tool time (PhaseTimings.tools).
v1::ToolUsage ToolUsageOf(const std::map<std::string, ToolTally>& by_name, absl::Duration total);

}  // namespace corral::scheduler
