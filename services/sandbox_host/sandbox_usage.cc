// What a sandbox has cost: its cgroup's counters and its meter (usage/usage_meter.h), its disk on request.
#include <sys/statfs.h>

#include "absl/strings/str_cat.h"
#include "libs/core/logging.h"
#include "services/sandbox_host/sandbox_manager.h"
#include "services/sandbox_host/storage/storage.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {
namespace {

struct Quota {
  int64_t bytes = -1, used = -1;
};

// An image sandbox with a disk quota: its tmpfs upper layer's size and use (the overlay reports its upper's).
Quota QuotaOf(const Sandbox& sb) {
  struct statfs fs {};
  if (!sb.in_image() || sb.protections.disk_quota_bytes <= 0 || !sb.home_fd.valid() ||
      fstatfs(sb.home_fd.get(), &fs) != 0) {
    return {};
  }
  return {static_cast<int64_t>(fs.f_blocks * fs.f_bsize),
          static_cast<int64_t>((fs.f_blocks - fs.f_bfree) * fs.f_bsize)};
}

}  // namespace

absl::StatusOr<SandboxUsage> SandboxManager::Usage(const Sandbox& sb, const UsageQuery& query) const {
  absl::MutexLock lock(&sb.uid_mu);  // its cgroup stays until a teardown, which marks it deleted first
  if (sb.deleted) return absl::NotFoundError(absl::StrCat("sandbox '", sb.id, "' was deleted"));
  return MeasureLocked(sb, query);
}

std::optional<absl::StatusOr<SandboxUsage>> SandboxManager::UsageNow(const Sandbox& sb, const UsageQuery& query) const {
  if (query.disk || !sb.uid_mu.TryLock()) return std::nullopt;
  absl::StatusOr<SandboxUsage> usage = absl::NotFoundError(absl::StrCat("sandbox '", sb.id, "' was deleted"));
  if (!sb.deleted) usage = MeasureLocked(sb, query);
  sb.uid_mu.Unlock();
  return usage;
}

SandboxUsage SandboxManager::MeasureLocked(const Sandbox& sb, const UsageQuery& query) const {
  const absl::Time now = clock_->Now();
  SandboxUsage u;
  const Quota quota = QuotaOf(sb);
  u.quota_bytes = quota.bytes;
  u.quota_used_bytes = quota.used;
  u.metered = sb.meter->Measure(now, sb.cgroup.Usage(), quota.used);
  u.wall = now - sb.create_time;
  if (query.disk) {
    absl::StatusOr<uint64_t> own = StorageOf(sb.storage).OwnBytes(sb);
    if (own.ok()) {
      u.own_disk_bytes = static_cast<int64_t>(*own);
    } else {
      spdlog::warn("sandbox {}: measuring its files: {}", sb.id, own.status());
    }
    u.shared_disk_bytes = sb.layers ? SharedLayerBytes(sb.layers) : 0;
  }
  if (query.samples) u.samples = sb.meter->Samples(query.from, query.to);
  return u;
}

void SandboxManager::SampleUsage(std::vector<std::weak_ptr<const Sandbox>> sandboxes) const {
  for (const std::weak_ptr<const Sandbox>& weak : sandboxes) {
    std::shared_ptr<const Sandbox> sb = weak.lock();  // held only while read: a fork waits for its holders
    if (sb == nullptr || sb->forking) continue;
    absl::MutexLock lock(&sb->uid_mu);
    if (sb->deleted) continue;
    const absl::Time now = clock_->Now();
    if (sb->meter->SampleDue(now)) {
      sb->meter->Observe(now, sb->cgroup.Usage(), QuotaOf(*sb).used);
    } else {  // memory over time needs memory alone; disk is read with it where it is a tmpfs (one statfs)
      CgroupUsage memory;
      memory.memory_bytes = sb->cgroup.MemoryBytes();
      sb->meter->Observe(now, memory, QuotaOf(*sb).used, /*partial=*/true);
    }
  }
}

}  // namespace corral::sandbox
