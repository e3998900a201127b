// When generation was paused (PauseGeneration .. ResumeGeneration), so that paused time does not count against
// episode and agent-phase timeouts: an agent cannot generate while the proxies hold its calls. Thread-safe.
#pragma once

#include <deque>
#include <optional>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace corral::scheduler {

class PauseLedger {
 public:
  // A pause began or ended at `at` (repeats are ignored: pausing a paused cluster changes nothing).
  void Set(bool paused, absl::Time at);
  bool paused() const;
  // Paused time within [from, to]; a pause still on counts up to `to`.
  absl::Duration Between(absl::Time from, absl::Time to) const;

 private:
  // Ended pauses, oldest first; the oldest are forgotten beyond kKept (no episode lives that long).
  static constexpr size_t kKept = 4096;
  mutable absl::Mutex mu_;
  std::deque<std::pair<absl::Time, absl::Time>> ended_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> since_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral::scheduler
