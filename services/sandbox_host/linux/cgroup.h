// A cgroup per sandbox (memory limit, pids limit, cpu weight), created beneath the host process's own cgroup:
// cgroup v2 where the host's cgroup is delegated to it, the v1 memory/pids/cpu hierarchies otherwise. Removed
// on teardown, once the sandbox's processes are gone. The host's own cgroup is found through the mount table,
// so it is found inside a container too (a container sharing the host's cgroup namespace sees its own cgroup
// mounted at /sys/fs/cgroup/<controller>, not at the path /proc/self/cgroup names).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "libs/core/unique_fd.h"

namespace corral::sandbox {

enum class CgroupMode { kNone, kV1, kV2 };

// One cgroup filesystem of /proc/self/mountinfo: which cgroup its root is, where it is mounted, its type
// ("cgroup" or "cgroup2") and super options (the v1 controllers).
struct CgroupMount {
  std::string root, mount_point, fstype;
  std::vector<std::string> options;
};
std::vector<CgroupMount> ParseCgroupMounts(const std::string& mountinfo);

// One line of /proc/self/cgroup: hierarchy id ("0" for v2), its controllers, and this process's cgroup in it.
struct OwnCgroup {
  std::string hierarchy;
  std::vector<std::string> controllers;
  std::string path;
};
std::vector<OwnCgroup> ParseOwnCgroups(const std::string& proc_self_cgroup);

// Where this process's cgroup of v1 `controller` ("" for the v2 hierarchy) is in this mount namespace: the mount
// showing it plus the path below that mount's root. Empty when no mount shows it.
std::string OwnCgroupDir(const std::vector<CgroupMount>& mounts, const std::vector<OwnCgroup>& own,
                         const std::string& controller);

struct CgroupLimits {
  uint64_t memory_bytes = 0;  // 0 = unlimited
  uint32_t max_pids = 0;      // 0 = unlimited
  uint32_t cpu_weight = 100;  // v2 scale 1..10000 (v1: cpu.shares = weight * 1024 / 100)
};

// What a sandbox's cgroup has counted; -1 where it does not count it (no such controller, or no cgroup).
struct CgroupUsage {
  int64_t cpu_usec = -1, cpu_user_usec = -1, cpu_system_usec = -1;  // since its creation
  int64_t memory_bytes = -1;                                        // now (its tmpfs pages included)
  int64_t memory_peak_bytes = -1;                                   // the most at once since its creation
  int64_t memory_limit_bytes = -1;                                  // 0: no limit
  int64_t pids = -1;                                                // now
  int64_t io_write_bytes = -1;  // written to block devices since its creation (the v2 io controller only)
};
// The text of a cgroup's files as v2 names them, "" for a missing one (io.stat: nullopt when missing, as an
// existing one is empty until the first I/O).
struct CgroupFiles {
  std::string cpu_stat, memory_current, memory_peak, memory_max, pids_current;
  std::optional<std::string> io_stat;
};
CgroupUsage ParseCgroupUsage(const CgroupFiles& files);

// One sandbox's cgroup (a directory per v1 controller, or one v2 directory). Move-only.
class SandboxCgroup {
 public:
  SandboxCgroup() = default;
  SandboxCgroup(SandboxCgroup&&) = default;
  SandboxCgroup& operator=(SandboxCgroup&&) = default;

  // Open cgroup.procs files: a spawned child writes "0" to each to join.
  std::vector<int> procs_fds() const;
  // A v2 cgroup (the freezer and the full usage need one).
  bool v2() const { return v2_; }
  CgroupUsage Usage() const;
  // Only the memory it holds now (one file: what the meter reads every second between full readings); -1 where
  // no memory controller counts it.
  int64_t MemoryBytes() const;
  // Freezes (or thaws) every process in it, and those that join later — cgroup.freeze (v2) or freezer.state
  // (v1) — and waits up to `timeout` for the kernel to report it done. FAILED_PRECONDITION without a freezer;
  // DEADLINE_EXCEEDED when the kernel did not finish in time.
  absl::Status Freeze(bool frozen, int timeout_ms = 5000) const;
  // Removes the directories (the cgroup must be empty). Idempotent.
  absl::Status Remove();
  const std::vector<std::string>& dirs() const { return dirs_; }

 private:
  friend class CgroupManager;
  // The files Usage reads, opened once by OpenUsageFiles: a reading is a pread each, no path resolved again.
  enum UsageFile { kCpu, kCpuTimes, kMemory, kMemoryPeak, kMemoryMax, kPids, kIo, kUsageFiles };
  void OpenUsageFiles();
  // The text of one of them; nullopt where the cgroup has no such file.
  std::optional<std::string> Read(UsageFile file) const;
  absl::Status FreezeV2(bool frozen, int timeout_ms) const;
  // The path of `name` in the first of its directories that has it; "" when none does.
  std::string FileIn(const char* name) const;
  bool v2_ = false;
  std::vector<std::string> dirs_;
  std::vector<UniqueFd> procs_;
  std::array<UniqueFd, kUsageFiles> usage_files_;
};

// Immutable after Detect; thread-safe.
class CgroupManager {
 public:
  // Finds what this host may use. Never fails: without cgroups the mode is kNone and sandboxes rely on rlimits.
  static CgroupManager Detect(const std::string& name = "corral");

  CgroupMode mode() const { return mode_; }
  // Where sandbox cgroups are created: one directory per v1 controller, or the one v2 directory.
  const std::vector<std::string>& parents() const { return parents_; }
  const std::vector<std::string>& controllers() const { return controllers_; }
  std::string Describe() const;

  // Creates the sandbox's cgroup and applies `limits`. FAILED_PRECONDITION naming the file that could not be
  // written; nothing is left behind on error.
  absl::StatusOr<SandboxCgroup> Create(const std::string& sandbox_id, const CgroupLimits& limits) const;

 private:
  CgroupMode mode_ = CgroupMode::kNone;
  std::vector<std::string> controllers_;
  std::vector<std::string> parents_;  // per controller (v1) or one (v2): where sandbox cgroups are created
};

}  // namespace corral::sandbox
