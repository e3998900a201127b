#include "services/sandbox_host/linux/containment.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace corral::sandbox {
namespace {

bool Has(const std::vector<std::string>& v, const char* x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::string Bytes(int64_t n) {
  if (n >= (1LL << 30) && n % (1LL << 30) == 0) return absl::StrCat(n >> 30, " GiB");
  if (n >= (1LL << 20) && n % (1LL << 20) == 0) return absl::StrCat(n >> 20, " MiB");
  if (n >= (1LL << 10) && n % (1LL << 10) == 0) return absl::StrCat(n >> 10, " KiB");
  return absl::StrCat(n, " bytes");
}

}  // namespace

Containment PlanContainment(CgroupMode mode, const std::vector<std::string>& controllers, const CgroupLimits& cgroup,
                            const Rlimits& rlimits, int64_t disk_quota_bytes) {
  Containment c;
  c.cgroup = controllers.empty() ? CgroupMode::kNone : mode;
  c.controllers = controllers;
  c.rlimits = rlimits;
  std::vector<std::string> parts;
  const bool memory = Has(controllers, "memory"), pids = Has(controllers, "pids"), cpu = Has(controllers, "cpu");
  if (cgroup.memory_bytes > 0) {
    if (memory) {
      parts.push_back(absl::StrCat("memory ", Bytes(static_cast<int64_t>(cgroup.memory_bytes)), " (cgroup)"));
    } else {
      // Per process, not per sandbox: the best an unprivileged fallback can do; processes are capped below.
      c.memory_rlimit_bytes = static_cast<int64_t>(cgroup.memory_bytes);
      c.rlimits.data_bytes = c.memory_rlimit_bytes;
      parts.push_back(absl::StrCat("memory ", Bytes(c.memory_rlimit_bytes), " per process (RLIMIT_DATA)"));
    }
  }
  if (pids) {
    parts.push_back(absl::StrCat(cgroup.max_pids, " processes (cgroup)"));
  } else if (cgroup.max_pids > 0 || rlimits.nproc > 0) {
    const int64_t cap = cgroup.max_pids == 0 ? rlimits.nproc
                        : rlimits.nproc == 0 ? int64_t{cgroup.max_pids}
                                             : std::min<int64_t>(rlimits.nproc, cgroup.max_pids);
    c.process_rlimit = cap;
    c.rlimits.nproc = cap;
    parts.push_back(absl::StrCat(cap, " processes (RLIMIT_NPROC)"));
  }
  if (cpu) parts.push_back(absl::StrCat("cpu weight ", cgroup.cpu_weight, " (cgroup)"));
  if (rlimits.address_space_bytes > 0) {
    parts.push_back(absl::StrCat("address space ", Bytes(rlimits.address_space_bytes), " (RLIMIT_AS)"));
  }
  if (rlimits.file_size_bytes > 0)
    parts.push_back(absl::StrCat("files up to ", Bytes(rlimits.file_size_bytes), " (RLIMIT_FSIZE)"));
  if (rlimits.cpu_seconds > 0) parts.push_back(absl::StrCat(rlimits.cpu_seconds, " s of cpu per process (RLIMIT_CPU)"));
  parts.push_back(disk_quota_bytes > 0 ? absl::StrCat("writes up to ", Bytes(disk_quota_bytes), " (tmpfs upper layer)")
                                       : std::string("no disk quota"));
  const std::string head = c.cgroup == CgroupMode::kNone
                               ? "no cgroup, rlimits only"
                               : absl::StrCat(c.cgroup == CgroupMode::kV2 ? "cgroup v2" : "cgroup v1");
  c.summary = absl::StrCat(head, ": ", absl::StrJoin(parts, ", "));
  return c;
}

std::string DescribeHostContainment(const CgroupManager& cgroups) {
  const auto& have = cgroups.controllers();
  std::vector<std::string> fallbacks;
  if (!Has(have, "memory")) fallbacks.push_back("memory per process by RLIMIT_DATA");
  if (!Has(have, "pids")) fallbacks.push_back("processes by RLIMIT_NPROC per sandbox uid");
  if (!Has(have, "cpu")) fallbacks.push_back("no cpu weight");
  std::string words = cgroups.mode() == CgroupMode::kNone ? "no writable cgroup, rlimits only"
                                                          : absl::StrCat("cgroup ", cgroups.Describe());
  if (!fallbacks.empty()) absl::StrAppend(&words, "; ", absl::StrJoin(fallbacks, ", "));
  absl::StrAppend(&words,
                  "; file size by RLIMIT_FSIZE; no per-home disk quota (an image sandbox's writes: a tmpfs of its "
                  "disk_bytes)");
  return words;
}

}  // namespace corral::sandbox
