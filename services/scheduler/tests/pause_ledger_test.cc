#include "services/scheduler/episode/pause_ledger.h"

#include "gtest/gtest.h"

namespace corral::scheduler {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(1000);
absl::Time At(int s) { return t0 + absl::Seconds(s); }

TEST(PauseLedgerTest, CountsOnlyThePausedPartOfAWindow) {
  PauseLedger ledger;
  EXPECT_EQ(ledger.Between(At(0), At(100)), absl::ZeroDuration());
  ledger.Set(true, At(10));
  ledger.Set(true, At(15));  // already paused: the pause still began at 10
  EXPECT_TRUE(ledger.paused());
  EXPECT_EQ(ledger.Between(At(0), At(12)), absl::Seconds(2));  // still on: counts up to `to`
  ledger.Set(false, At(20));
  ledger.Set(false, At(25));  // not paused: nothing
  EXPECT_FALSE(ledger.paused());
  ledger.Set(true, At(30));
  ledger.Set(false, At(35));
  EXPECT_EQ(ledger.Between(At(0), At(100)), absl::Seconds(15));
  EXPECT_EQ(ledger.Between(At(12), At(32)), absl::Seconds(10));  // 8 of the first, 2 of the second
  EXPECT_EQ(ledger.Between(At(20), At(30)), absl::ZeroDuration());
  EXPECT_EQ(ledger.Between(At(40), At(50)), absl::ZeroDuration());
}

TEST(PauseLedgerTest, ForgetsOnlyTheOldestPauses) {
  PauseLedger ledger;
  for (int i = 0; i < 5000; ++i) {
    ledger.Set(true, At(2 * i));
    ledger.Set(false, At(2 * i + 1));
  }
  EXPECT_EQ(ledger.Between(At(9990), At(10000)), absl::Seconds(5));
  EXPECT_EQ(ledger.Between(At(0), At(10000)), absl::Seconds(4096));
}

}  // namespace
}  // namespace corral::scheduler
