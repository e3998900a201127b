// Results keep their trajectory in the CALLS form (everything the proxy recorded); StreamResults hands it out in
// the form the trainer asks for. The TRAJECTORY form is rebuilt by replaying the calls into the proxy's own
// prefix-aggregating store, so both services export it with the same code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "corral/v1/common.pb.h"

namespace corral::scheduler {

// `calls` in the CALLS form -> `format` (UNSPECIFIED means TRAJECTORY). A CALLS request returns it unchanged.
v1::Trajectory ConvertTrajectory(const v1::Trajectory& calls, v1::TrajectoryFormat format);

// A branch's trajectory (Task.branch), in the CALLS form: every call of `prefix` (its ancestors'), then the first
// `n` calls of `calls` (its own session's, CALLS form) numbered after them. The identity (env id, episode, times)
// is `calls`'s; the calls keep their own call ids.
v1::Trajectory JoinCalls(const v1::Trajectory& prefix, const v1::Trajectory& calls, size_t n = SIZE_MAX);

}  // namespace corral::scheduler
