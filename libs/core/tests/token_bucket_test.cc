#include "libs/core/token_bucket.h"

#include "gtest/gtest.h"

namespace corral {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(TokenBucketTest, StartsFullRefillsAtTheRateAndNeverAboveTheBurst) {
  TokenBucket b(10, kT0);
  EXPECT_TRUE(b.Has(10));
  b.Spend(10);
  EXPECT_FALSE(b.Has(1));
  b.Refill(kT0 + absl::Milliseconds(500), /*rate=*/4, /*burst=*/10);
  EXPECT_DOUBLE_EQ(b.tokens(), 2);
  EXPECT_DOUBLE_EQ(b.TokensAt(kT0 + absl::Seconds(100), 4, 10), 10);  // capped, and not stored
  EXPECT_DOUBLE_EQ(b.tokens(), 2);
  b.Refill(kT0, 4, 10);  // time going backwards earns nothing
  EXPECT_DOUBLE_EQ(b.tokens(), 2);
}

TEST(TokenBucketTest, TimeUntilIsExactAndATimerFiringOnTimeFindsTheTokens) {
  TokenBucket b(5, kT0);
  b.Spend(5);
  const absl::Duration wait = b.TimeUntil(3, /*rate=*/7);
  EXPECT_EQ(wait, absl::Seconds(3.0 / 7));
  b.Refill(kT0 + wait, 7, 5);
  EXPECT_TRUE(b.Has(3));  // float rounding is absorbed by the epsilon
  EXPECT_EQ(b.TimeUntil(1, 7), absl::ZeroDuration());
}

TEST(TokenBucketTest, DebtIsRepaidByRefillAndASmallerBurstCapsTheSavings) {
  TokenBucket b(8, kT0);
  b.Spend(20);  // a grant above the burst, or a debit: 12 owed
  EXPECT_DOUBLE_EQ(b.tokens(), -12);
  EXPECT_EQ(b.TimeUntil(1, /*rate=*/2), absl::Seconds(6.5));
  b.Refill(kT0 + absl::Seconds(7), 2, 8);
  EXPECT_DOUBLE_EQ(b.tokens(), 2);
  b.Refund(100, 8);  // never above the burst
  EXPECT_DOUBLE_EQ(b.tokens(), 8);
  b.Ceil(-4);  // a hold
  EXPECT_DOUBLE_EQ(b.tokens(), -4);
  b.Floor(-1);
  EXPECT_DOUBLE_EQ(b.tokens(), -1);
  TokenBucket c(8, kT0);
  c.Cap(3);
  EXPECT_DOUBLE_EQ(c.tokens(), 3);
}

}  // namespace
}  // namespace corral
