// How long an episode waits before the retry of an infrastructure failure: a pure policy. The delay doubles per
// attempt up to a cap and is jittered, so a batch whose episodes all failed at once (a service restarting) does
// not come back at once, and so the attempts span a restart rather than burn within seconds.
#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace corral::scheduler {

struct RetryBackoff {
  // Before the second attempt. With the default three attempts the retries span at least 6.75 s (jitter
  // included): a service's restart, and one of the proxy's health intervals (5 s by default).
  absl::Duration base = absl::Seconds(3);
  absl::Duration max = absl::Minutes(1);  // no delay is longer
  double jitter = 0.25;                   // each delay is spread over [1 - jitter, 1 + jitter] of its value
};

// Within one attempt, a call to a service that is restarting (UNAVAILABLE) is made again after these waits, for
// as long as the call's own deadline allows.
inline constexpr RetryBackoff kCallRetry{absl::Milliseconds(100), absl::Seconds(2), 0.25};

// The wait before attempt `attempt` (2 for the first retry): base * 2^(attempt-2), at most `max`, jittered by a
// value drawn from `seed` (an episode's, so a re-run of the same batch waits the same).
absl::Duration RetryDelay(const RetryBackoff& policy, uint32_t attempt, uint64_t seed);

}  // namespace corral::scheduler
