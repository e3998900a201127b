// The pool of uids sandboxes run as (default 20000–65000). A uid goes back into the pool only after its
// sandbox's teardown is verified (no process left running as it); one that still has processes is
// quarantined and re-checked later. Running out is "host full", not an error. uids the image already uses
// (/etc/passwd) are never handed out.
#pragma once

#include <sys/types.h>

#include <deque>
#include <functional>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace corral::sandbox {

// Thread-safe.
class UidPool {
 public:
  // [first, last], minus `reserved`. Freed uids are reused oldest-first, so a just-freed uid is the last to
  // come back.
  UidPool(uid_t first, uid_t last, const absl::flat_hash_set<uid_t>& reserved);

  // A free uid, or nullopt when all are in use or quarantined.
  std::optional<uid_t> Acquire();
  // Gives a uid back after teardown. `clean`: verified that no process runs as it any more; otherwise it is
  // quarantined until SweepQuarantine finds it clean.
  void Release(uid_t uid, bool clean);
  // Re-checks quarantined uids; those `is_clean` says are clean become free. Returns how many remain.
  size_t SweepQuarantine(const std::function<bool(uid_t)>& is_clean);

  size_t free_count() const;
  size_t in_use() const;
  size_t quarantined() const;

 private:
  mutable absl::Mutex mu_;
  std::deque<uid_t> free_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uid_t> in_use_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uid_t> quarantine_ ABSL_GUARDED_BY(mu_);
};

// uids listed in a passwd-format file (third field of each line). NOT_FOUND if the file cannot be read;
// malformed lines are skipped.
absl::StatusOr<absl::flat_hash_set<uid_t>> ReadPasswdUids(const std::string& path = "/etc/passwd");

}  // namespace corral::sandbox
