// How a sandbox's resources are held in: by its cgroup where the host has the controller, by rlimits where it
// does not (a container without a writable cgroup, a host without delegation). Pure: what the host found and
// what the sandbox asked for in, the limits to apply and the words to report out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "services/sandbox_host/linux/cgroup.h"
#include "services/sandbox_host/linux/spawn.h"

namespace corral::sandbox {

struct Containment {
  CgroupMode cgroup = CgroupMode::kNone;
  std::vector<std::string> controllers;  // those limiting this sandbox
  Rlimits rlimits;                       // the sandbox's rlimits with the fallbacks filled in
  int64_t memory_rlimit_bytes = 0;       // no memory controller: RLIMIT_DATA per process
  int64_t process_rlimit = 0;            // no pids controller: RLIMIT_NPROC of the sandbox's uid
  std::string summary;                   // in words, for people
};

// `controllers`: what the host's CgroupManager offers (empty: no cgroup at all). `disk_quota_bytes`: the size of
// an image sandbox's tmpfs upper layer (0: none).
Containment PlanContainment(CgroupMode mode, const std::vector<std::string>& controllers, const CgroupLimits& cgroup,
                            const Rlimits& rlimits, int64_t disk_quota_bytes = 0);

// What the host can give every sandbox, in words, for its start-up log and HostInfo.
std::string DescribeHostContainment(const CgroupManager& cgroups);

}  // namespace corral::sandbox
