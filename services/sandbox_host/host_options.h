// What a sandbox host is configured with (HostOptions: its root, capacity, uid pool, defaults and ceilings) and
// what its kernel lets it enforce (HostFeatures, found once at start-up).
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "services/sandbox_host/linux/cgroup.h"
#include "services/sandbox_host/linux/landlock.h"
#include "services/sandbox_host/linux/spawn.h"
#include "services/sandbox_host/template_store.h"

namespace corral::sandbox {

struct HostOptions {
  std::string root = "/var/lib/corral/sandboxes";  // homes live in <root>/homes/<id>
  int64_t capacity = 64;
  int64_t max_create_count = 10000;
  uid_t uid_first = 20000;
  uid_t uid_last = 65000;
  absl::flat_hash_set<uid_t> busy_uids;  // never handed out: still running processes at start (Leftovers)
  NetworkPolicy default_network = NetworkPolicy::kNone;
  CgroupLimits default_cgroup{.memory_bytes = 2ULL << 30, .max_pids = 512, .cpu_weight = 100};
  CgroupLimits cgroup_ceiling{.memory_bytes = 64ULL << 30, .max_pids = 32768, .cpu_weight = 10000};
  Rlimits default_rlimits{
      .nproc = 512, .address_space_bytes = 0, .nofile = 1024, .file_size_bytes = 1LL << 30, .cpu_seconds = 0};
  Rlimits rlimit_ceiling{.nproc = 32768,
                         .address_space_bytes = 1LL << 40,
                         .nofile = 65536,
                         .file_size_bytes = 1LL << 40,
                         .cpu_seconds = 86400};
  int64_t default_disk_bytes = 1LL << 30;  // what an image sandbox may write (SandboxSpec.disk_bytes)
  int64_t max_disk_bytes = 64LL << 30;
  size_t max_env_bytes = 64 * 1024;
  absl::Duration default_idle_timeout = absl::Minutes(10);
  absl::Duration max_idle_timeout = absl::Hours(24);
  absl::Duration default_exec_timeout = absl::Minutes(10);  // Exec / ExecInteractive without a timeout
  absl::Duration max_exec_timeout = absl::Hours(24);
  absl::Duration default_setup_timeout = absl::Minutes(30);  // a whole template build
  TemplateLimits templates;
  // Where `corral harness install` put this host's harnesses: CORRAL_HARNESS_ROOT in every sandbox's environment,
  // so an agent finds them where the host says they are ("" = not set: the harnesses' default root).
  std::string harness_root;
  // Read each sandbox's cgroup every second for its meter (memory over time, samples for metrics over time);
  // off: only reads (GetSandbox, a delete) meter it.
  bool usage_readings = true;
};

// What the host can enforce, found once at startup.
struct HostFeatures {
  int landlock_abi = 0;
  bool mount_namespaces = false;
  bool images = false;  // user namespaces and idmapped overlay layers (CanUseImages)
  // ForkSandbox (plain and image sandboxes): mount namespaces, idmapped layers and a ForkLayers store.
  bool forks = false;
  const CgroupManager* cgroups = nullptr;
};

}  // namespace corral::sandbox
