// A sandbox's processes as a whole: paused (its cgroup frozen where they stand, their memory kept, until it is
// thawed), or all killed.
#include "absl/strings/str_cat.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "services/sandbox_host/sandbox_manager.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {

absl::StatusOr<std::shared_ptr<const Sandbox>> SandboxManager::SetPaused(const std::string& id, bool paused) {
  auto sb = Find(id);
  if (!sb.ok()) return sb.status();
  const Sandbox& s = **sb;
  absl::MutexLock lock(&s.uid_mu);  // not while a teardown or a kill sweep runs
  if (s.deleted) return absl::NotFoundError(absl::StrCat("sandbox '", id, "' was deleted"));
  if (s.forking) return absl::UnavailableError(absl::StrCat("sandbox '", id, "' is being forked; try again"));
  if (s.paused == paused) return sb;
  const absl::Time start = clock_->Now();
  if (absl::Status frozen = s.cgroup.Freeze(paused); !frozen.ok()) {
    if (paused) (void)s.cgroup.Freeze(false);  // half frozen is no state to leave it in
    return frozen;
  }
  s.paused = paused;
  s.Touch(clock_->Now());
  spdlog::info("sandbox {}: {} in {}", id, paused ? "paused" : "resumed", absl::FormatDuration(clock_->Now() - start));
  return sb;
}

absl::StatusOr<uint32_t> SandboxManager::KillAllProcesses(const std::string& id) {
  auto sb = Find(id);
  if (!sb.ok()) return sb.status();
  absl::MutexLock lock(&(*sb)->uid_mu);
  if ((*sb)->deleted) return absl::NotFoundError(absl::StrCat("sandbox '", id, "' was deleted"));
  if ((*sb)->paused) {  // a frozen process (cgroup v1) dies only once thawed; with none left, nothing is paused
    (void)(*sb)->cgroup.Freeze(false);
    (*sb)->paused = false;
  }
  size_t running = 0;
  if (!KillAllOf((*sb)->uid, 20, &running)) {
    return absl::InternalError(absl::StrCat("sandbox '", id, "': a process of uid ", (*sb)->uid,
                                            " survived every kill; do not trust this sandbox"));
  }
  return static_cast<uint32_t>(running);
}

}  // namespace corral::sandbox
