#include "services/scheduler/table/retry_backoff.h"

#include <algorithm>

namespace corral::scheduler {

absl::Duration RetryDelay(const RetryBackoff& policy, uint32_t attempt, uint64_t seed) {
  const uint32_t doublings = std::min<uint32_t>(attempt < 2 ? 0 : attempt - 2, 20);
  absl::Duration delay = std::min(policy.base * static_cast<double>(uint64_t{1} << doublings), policy.max);
  // splitmix64 of seed and attempt: a uniform fraction in [0, 1).
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (attempt + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) / static_cast<double>(uint64_t{1} << 53);
  const double jitter = std::clamp(policy.jitter, 0.0, 1.0);
  return std::min(delay * (1.0 + jitter * (2.0 * u - 1.0)), policy.max);
}

}  // namespace corral::scheduler
