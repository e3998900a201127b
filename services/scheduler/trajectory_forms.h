// Results keep their trajectory in the CALLS form (everything the proxy recorded); StreamResults hands it out in
// the form the trainer asks for. The TRAJECTORY form is rebuilt by replaying the calls into the proxy's own
// prefix-aggregating store, so both services export it with the same code.
#pragma once

#include "corral/v1/common.pb.h"

namespace corral::scheduler {

// `calls` in the CALLS form -> `format` (UNSPECIFIED means TRAJECTORY). A CALLS request returns it unchanged.
v1::Trajectory ConvertTrajectory(const v1::Trajectory& calls, v1::TrajectoryFormat format);

}  // namespace corral::scheduler
