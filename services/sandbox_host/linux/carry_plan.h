// What one carried process is let do, once, to become a process of its sandbox (transit_gate.h), and the plan as
// that process reads it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "libs/core/unique_fd.h"

namespace corral::sandbox {

// A fork-ready process's control pipe (fork N), kept through its own carry; then what the gate installs: the
// plan's text, the user, network and mount namespaces.
inline constexpr int kCarryControlFd = 3;
inline constexpr int kCarryPlanFd = 4;

struct CarryPlan {
  uid_t uid = 0;  // the ids it ends with (a copy: its child's; the parent's own process: its own)
  gid_t gid = 0;
  UniqueFd userns;  // a copy's user namespace (CreateCopyUserNamespace), or invalid: it stays in its own
  UniqueFd netns;   // the network namespace it joins, or invalid
  // The mount namespace it joins (CarryMountNamespace: its own view, with `mounts` over its old places), or
  // invalid: it keeps its own. `mounts` are what the check looks for there (each tree at its path).
  UniqueFd mntns;
  struct Mount {
    UniqueFd tree;  // a mount tree, attached in `mntns`
    std::string path;
  };
  std::vector<Mount> mounts;
  std::string cwd;                          // its working directory afterwards
  std::vector<UniqueFd> cgroup_procs;       // the cgroup.procs files it is moved to (one per hierarchy), or none
  UniqueFd stdin_fd, stdout_fd, stderr_fd;  // its 0, 1 and 2 afterwards, or all invalid: it keeps its own
  // The parent's own process, moving to the parent's next generation: it stays fork-ready (keeps its gated
  // capabilities and its control pipe, of which this is the host's end).
  bool fork_ready = false;
  UniqueFd control;
};

// The plan as the process reads it: one step per line, "end" last. Descriptor numbers as the gate installs them.
std::string CarryPlanText(const CarryPlan& plan);

}  // namespace corral::sandbox
