#include "services/scheduler/episode/pause_ledger.h"

#include <algorithm>

namespace corral::scheduler {

void PauseLedger::Set(bool paused, absl::Time at) {
  absl::MutexLock lock(&mu_);
  if (paused) {
    if (!since_) since_ = at;
    return;
  }
  if (!since_) return;
  ended_.emplace_back(*since_, std::max(at, *since_));
  since_.reset();
  if (ended_.size() > kKept) ended_.pop_front();
}

bool PauseLedger::paused() const {
  absl::MutexLock lock(&mu_);
  return since_.has_value();
}

absl::Duration PauseLedger::Between(absl::Time from, absl::Time to) const {
  auto overlap = [&](absl::Time start, absl::Time end) {
    return std::max(absl::ZeroDuration(), std::min(end, to) - std::max(start, from));
  };
  absl::MutexLock lock(&mu_);
  absl::Duration total = since_ ? overlap(*since_, to) : absl::ZeroDuration();
  for (auto it = ended_.rbegin(); it != ended_.rend() && it->second > from; ++it)
    total += overlap(it->first, it->second);
  return total;
}

}  // namespace corral::scheduler
