#include "libs/async/sleep.h"

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/experimental/awaitable_operators.hpp"
#include "boost/asio/io_context.hpp"
#include "gtest/gtest.h"
#include "libs/async/spawn.h"
#include "libs/core/testing/fake_clock.h"

namespace corral::async {
namespace {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;  // NOLINT: || on awaitables

TEST(SleepUntilTest, WakesOnlyWhenTheFakeClockReachesTheTime) {
  FakeClock clock;
  asio::io_context io;
  bool woke = false;
  const absl::Time when = clock.Now() + absl::Seconds(30);
  Spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await SleepUntil(clock, when);
        woke = true;
      }(),
      "sleeper");
  io.poll();
  clock.Advance(absl::Seconds(29));
  io.poll();
  EXPECT_FALSE(woke);
  clock.Advance(absl::Seconds(1));
  io.poll();
  EXPECT_TRUE(woke);
  EXPECT_EQ(clock.pending_timers(), 0u);
}

TEST(SleepUntilTest, APastTimeReturnsAtOnceWithoutATimer) {
  FakeClock clock;
  asio::io_context io;
  bool woke = false;
  Spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await SleepUntil(clock, clock.Now() - absl::Seconds(1));
        co_await SleepFor(clock, absl::ZeroDuration());
        woke = true;
      }(),
      "sleeper");
  io.poll();
  EXPECT_TRUE(woke);
  EXPECT_EQ(clock.pending_timers(), 0u);
}

TEST(SleepUntilTest, TheLoserOfARaceIsCancelledAndItsTimerRemoved) {
  FakeClock clock;
  asio::io_context io;
  int winner = -1;
  Spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto r = co_await (SleepFor(clock, absl::Hours(1)) || SleepFor(clock, absl::Seconds(5)));
        winner = static_cast<int>(r.index());
      }(),
      "race");
  io.poll();
  EXPECT_EQ(clock.pending_timers(), 2u);
  clock.Advance(absl::Seconds(5));
  io.poll();
  EXPECT_EQ(winner, 1);
  EXPECT_EQ(clock.pending_timers(), 0u);  // the hour-long sleep was cancelled, not left to fire
  io.restart();
  EXPECT_EQ(io.poll(), 0u);  // and nothing is left to run
}

TEST(SleepUntilTest, KeepsTheContextAliveWhileWaitingOnAnotherThreadsClock) {
  RealClock clock;
  asio::io_context io;
  bool woke = false;
  Spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await SleepFor(clock, absl::Milliseconds(20));
        woke = true;
      }(),
      "sleeper");
  io.run();  // returns only once the sleep completed: the pending wait counts as work
  EXPECT_TRUE(woke);
}

TEST(SleepForTest, RealTimerSleepsAtLeastTheDuration) {
  asio::io_context io;
  absl::Time woke;
  const absl::Time start = absl::Now();
  Spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await async::SleepFor(absl::Milliseconds(10));  // qualified: absl::SleepFor is found by ADL
        woke = absl::Now();
      }(),
      "sleeper");
  io.run();
  EXPECT_GE(woke - start, absl::Milliseconds(10));
}

}  // namespace
}  // namespace corral::async
