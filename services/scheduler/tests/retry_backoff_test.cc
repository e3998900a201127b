#include "services/scheduler/table/retry_backoff.h"

#include "gtest/gtest.h"

namespace corral::scheduler {
namespace {

TEST(RetryDelayTest, DoublesPerAttemptUpToTheCapWithoutJitter) {
  const RetryBackoff policy{absl::Seconds(2), absl::Seconds(10), 0.0};
  EXPECT_EQ(RetryDelay(policy, 2, 7), absl::Seconds(2));
  EXPECT_EQ(RetryDelay(policy, 3, 7), absl::Seconds(4));
  EXPECT_EQ(RetryDelay(policy, 4, 7), absl::Seconds(8));
  EXPECT_EQ(RetryDelay(policy, 5, 7), absl::Seconds(10));
  EXPECT_EQ(RetryDelay(policy, 90, 7), absl::Seconds(10));
}

TEST(RetryDelayTest, JitterSpreadsEpisodesThatFailedTogetherAndIsTheSameForTheSameSeed) {
  const RetryBackoff policy{absl::Seconds(2), absl::Minutes(1), 0.25};
  absl::Duration lowest = absl::InfiniteDuration(), highest = absl::ZeroDuration();
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    const absl::Duration d = RetryDelay(policy, 2, seed);
    EXPECT_GE(d, absl::Milliseconds(1500));
    EXPECT_LE(d, absl::Milliseconds(2500));
    lowest = std::min(lowest, d);
    highest = std::max(highest, d);
    EXPECT_EQ(d, RetryDelay(policy, 2, seed));
  }
  EXPECT_LT(lowest, absl::Milliseconds(1600));  // spread over the range, not bunched
  EXPECT_GT(highest, absl::Milliseconds(2400));
}

TEST(RetryDelayTest, ThreeAttemptsSpanAServiceRestartAndAProxyHealthIntervalByDefault) {
  const RetryBackoff policy;  // defaults
  absl::Duration shortest = absl::InfiniteDuration();
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    shortest = std::min(shortest, RetryDelay(policy, 2, seed) + RetryDelay(policy, 3, seed));
  }
  // A kill -9 and restart 1-3 s later is covered, and so is the proxy's default health interval (5 s): an
  // upstream marked unhealthy by one late answer is checked again before the last attempt.
  EXPECT_GE(shortest, absl::Milliseconds(6750));
  EXPECT_LT(shortest, absl::Milliseconds(7000));  // and the jitter does spread them
}

}  // namespace
}  // namespace corral::scheduler
