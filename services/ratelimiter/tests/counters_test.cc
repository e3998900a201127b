#include "services/ratelimiter/counters.h"

#include "gtest/gtest.h"

namespace corral::ratelimiter {
namespace {

TEST(SemaphoreTest, FitsUpToTheCapacityAndGivesBack) {
  Semaphore s;
  EXPECT_TRUE(s.Fits(3, 3));
  s.Take(2);
  EXPECT_TRUE(s.Fits(1, 3));
  EXPECT_FALSE(s.Fits(2, 3));
  s.Give(2);
  EXPECT_EQ(s.in_use(), 0);
}

}  // namespace
}  // namespace corral::ratelimiter
