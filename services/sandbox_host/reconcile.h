// What a previous run of this host left behind when it was killed (SIGKILL, OOM, a crash): its sandboxes'
// processes, cgroups and homes (with image sandboxes' upper layers). A starting host removes them before it
// serves — a previous run's sandboxes are known by their homes under `<root>/homes`, as the root belongs to one
// host at a time (HostRootLock).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "libs/core/unique_fd.h"

namespace corral::sandbox {

// Holds `<root>/host.lock` for as long as it lives. FAILED_PRECONDITION, naming the processes that have it open,
// while another process holds it for longer than `wait`: two hosts on one root would take each other's
// sandboxes for leftovers.
absl::StatusOr<UniqueFd> LockHostRoot(const std::string& root, absl::Duration wait = absl::Seconds(5));

struct Leftovers {
  std::vector<std::string> sandboxes;  // ids whose homes were found
  size_t processes_killed = 0;
  size_t cgroups_removed = 0;
  size_t homes_removed = 0;
  size_t mounts_detached = 0;
  // uids of the pool that still run processes after the sweep (unkillable, or nobody's we can name): never
  // handed out during this run.
  absl::flat_hash_set<uid_t> busy_uids;
  std::vector<std::string> errors;  // what could not be removed, for the log
};

// Removes the leftovers of a previous run: every process of the pool's uids [uid_first, uid_last] that belongs
// to one of its sandboxes (its CORRAL_SANDBOX_ID or its cgroup names one whose home is still here) — by sweeping
// that uid —, mounts below the homes, the sandboxes' cgroups below `cgroup_parents`, and the homes.
Leftovers RemoveLeftovers(const std::string& root, uid_t uid_first, uid_t uid_last,
                          const std::vector<std::string>& cgroup_parents);

}  // namespace corral::sandbox
