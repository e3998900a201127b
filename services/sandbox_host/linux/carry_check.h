// The check a carried process passes before it runs on (transit_gate.h): read from /proc while it is stopped in
// its last gated call.
#pragma once

#include <sys/types.h>

#include "absl/status/status.h"
#include "services/sandbox_host/linux/carry_plan.h"

namespace corral::sandbox {

// OK when `pid` is what `plan` makes of it: the plan's uid and gid (real, effective, saved, filesystem), no
// supplementary group, no capability, no_new_privs, a seccomp filter, no tracer, one thread; a copy: leading a
// session and process group of its own; the plan's user, network and mount namespaces; descriptors 0, 1 and 2 only (the
// plan's streams when it gives them); no shared memory mapping; each tree mounted at its path; its working directory on
// one of the trees (when there are any). PERMISSION_DENIED naming the first thing that differs.
absl::Status CheckCarried(pid_t pid, const CarryPlan& plan);

}  // namespace corral::sandbox
