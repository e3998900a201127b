// Starting a sandbox process: fork, then in the child (async-signal-safe only) join the sandbox's namespaces
// and cgroups, set rlimits, drop to the sandbox's uid/gid with no supplementary groups, set
// PR_SET_NO_NEW_PRIVS, enforce Landlock, and exec with a scrubbed environment. Everything that allocates is
// prepared in the host before the fork.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "libs/core/unique_fd.h"

namespace corral::sandbox {

// Resource limits of one process (and, for NPROC, of the sandbox's uid). 0 = not set.
struct Rlimits {
  int64_t nproc = 0;
  int64_t address_space_bytes = 0;
  int64_t nofile = 0;
  int64_t file_size_bytes = 0;
  int64_t cpu_seconds = 0;
  int64_t data_bytes = 0;   // RLIMIT_DATA: set from the memory limit when no memory cgroup holds the sandbox
  bool core_dumps = false;  // false: RLIMIT_CORE 0
};

// INVALID_ARGUMENT naming the limit when a requested value is negative or above its ceiling (so absurd values
// such as 2^63 never reach the kernel).
absl::Status ValidateRlimits(const Rlimits& requested, const Rlimits& ceilings);

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0]: absolute, or searched in the PATH given in `env`
  std::vector<std::string> env;   // complete environment, "KEY=VALUE"
  std::string cwd;                // the working directory as the process sees it (after joining mountns_fd)
  uid_t uid = 0;                  // inside userns_fd when it is set
  gid_t gid = 0;
  Rlimits limits;
  int landlock_fd = -1;               // ruleset to enforce, or -1
  int mountns_fd = -1;                // mount namespace to join, or -1
  int netns_fd = -1;                  // network namespace to join, or -1
  int userns_fd = -1;                 // user namespace to join (after dropping groups, before uid/gid), or -1
  int root_fd = -1;                   // the root argv[0] is looked up in (an image's), or -1: the host's
  std::vector<int> cgroup_procs_fds;  // cgroup.procs files to join (opened for writing by the host)
  bool pipe_stdin = false;            // otherwise stdin is /dev/null
  // Fork-ready (fork_gate.h): joins this family user namespace (instead of userns_fd), keeps the gated
  // capabilities and runs under the gate, whose listener comes back in Spawned::gate.
  int family_userns_fd = -1;
  int control_fd = -1;  // fork-ready: its control pipe's read end, given as descriptor 3 (kCarryControlFd)
};

struct Spawned {
  pid_t pid = -1;
  UniqueFd stdin_fd;   // write end, when pipe_stdin
  UniqueFd stdout_fd;  // read ends, non-blocking
  UniqueFd stderr_fd;
  UniqueFd gate;  // a fork-ready process's gate listener (transit_gate.h)
  // Set when the command could not be executed (ENOENT, EACCES…): the child already exited with 127/126,
  // like a shell; the caller reports that rather than an RPC error.
  int exec_errno = 0;
};

// INTERNAL when the host cannot fork or a privilege step fails in the child (the message names the step).
// The child leads its own session and process group (pid == pgid), so a timeout can kill the whole group.
absl::StatusOr<Spawned> Spawn(const SpawnSpec& spec);

}  // namespace corral::sandbox
