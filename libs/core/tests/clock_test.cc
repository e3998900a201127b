#include "libs/core/clock.h"

#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"

namespace corral {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(FakeClock, AdvanceFiresDueTimersInDeadlineOrderAtTheirOwnTime) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  std::vector<std::pair<int, absl::Duration>> fired;
  auto record = [&](int id) { return [&, id] { fired.emplace_back(id, clock.Now() - start); }; };
  clock.RunAfter(absl::Seconds(3), record(3));
  clock.RunAfter(absl::Seconds(1), record(1));
  clock.RunAfter(absl::Seconds(2), record(2));
  clock.RunAfter(absl::Seconds(10), record(10));

  clock.Advance(absl::Milliseconds(999));
  EXPECT_THAT(fired, IsEmpty());
  clock.Advance(absl::Seconds(2));
  EXPECT_THAT(fired, ElementsAre(std::pair(1, absl::Seconds(1)), std::pair(2, absl::Seconds(2))));
  EXPECT_EQ(clock.Now() - start, absl::Milliseconds(2999));
  EXPECT_EQ(clock.pending_timers(), 2u);
}

TEST(FakeClock, SameDeadlineRunsInCreationOrder) {
  FakeClock clock;
  std::vector<int> fired;
  for (int i = 0; i < 5; ++i) clock.RunAfter(absl::Seconds(1), [&fired, i] { fired.push_back(i); });
  clock.Advance(absl::Seconds(1));
  EXPECT_THAT(fired, ElementsAre(0, 1, 2, 3, 4));
}

TEST(FakeClock, CancelledTimerNeverRunsAndCancelReportsWhetherItWasPending) {
  FakeClock clock;
  int runs = 0;
  Clock::TimerId id = clock.RunAfter(absl::Seconds(1), [&] { ++runs; });
  EXPECT_TRUE(clock.Cancel(id));
  EXPECT_FALSE(clock.Cancel(id));
  clock.Advance(absl::Seconds(5));
  EXPECT_EQ(runs, 0);
  Clock::TimerId fired = clock.RunAfter(absl::Seconds(1), [&] { ++runs; });
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(clock.Cancel(fired));
}

TEST(FakeClock, TimerScheduledByCallbackRunsInSameAdvanceWhenDue) {
  FakeClock clock;
  std::vector<int> fired;
  clock.RunAfter(absl::Seconds(1), [&] {
    fired.push_back(1);
    clock.RunAfter(absl::Seconds(1), [&] { fired.push_back(2); });
    clock.RunAfter(absl::Seconds(5), [&] { fired.push_back(3); });
  });
  clock.Advance(absl::Seconds(3));
  EXPECT_THAT(fired, ElementsAre(1, 2));
  clock.Advance(absl::Seconds(3));
  EXPECT_THAT(fired, ElementsAre(1, 2, 3));
}

TEST(FakeClock, TimerInThePastRunsOnNextAdvanceWithoutMovingTimeBackwards) {
  FakeClock clock;
  const absl::Time now = clock.Now();
  absl::Time seen;
  clock.RunAt(now - absl::Hours(1), [&] { seen = clock.Now(); });
  clock.RunDue();
  EXPECT_EQ(seen, now);
}

TEST(RealClock, RunsTimersAndHonoursCancel) {
  RealClock clock;
  absl::Notification done;
  int cancelled_runs = 0;
  Clock::TimerId late = clock.RunAfter(absl::Hours(1), [&] { ++cancelled_runs; });
  clock.RunAfter(absl::Milliseconds(1), [&] { done.Notify(); });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(clock.Cancel(late));
  EXPECT_EQ(cancelled_runs, 0);
}

TEST(RealClock, EarlierTimerAddedLaterStillRunsFirst) {
  RealClock clock;
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification done;
  clock.RunAfter(absl::Milliseconds(300), [&] {
    absl::MutexLock l(&mu);
    order.push_back(2);
    done.Notify();
  });
  clock.RunAfter(absl::Milliseconds(1), [&] {
    absl::MutexLock l(&mu);
    order.push_back(1);
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::MutexLock l(&mu);
  EXPECT_THAT(order, ElementsAre(1, 2));
}

// Deadlines in process time reach gRPC as what is left of them, and come back the same way.
TEST(RealClock, EveryClockOfAProcessReadsOneTimeAndDeadlinesCrossToTheSystemClockByWhatIsLeft) {
  RealClock a, b;
  const absl::Time first = a.Now();
  const absl::Time second = b.Now();
  const absl::Time third = ProcessNow();
  EXPECT_LE(first, second);
  EXPECT_LE(second, third);
  const auto left = [](std::chrono::system_clock::time_point t) {
    return absl::FromChrono(t - std::chrono::system_clock::now());
  };
  const absl::Duration ten = left(ToSystemDeadline(ProcessNow() + absl::Seconds(10)));
  EXPECT_GT(ten, absl::Seconds(9));
  EXPECT_LE(ten, absl::Seconds(10));
  EXPECT_LE(left(ToSystemDeadline(ProcessNow() - absl::Hours(1))), absl::ZeroDuration());  // past: due now
  EXPECT_EQ(ToSystemDeadline(absl::InfiniteFuture()), std::chrono::system_clock::time_point::max());
  const absl::Time in_five = FromSystemDeadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const absl::Duration five = in_five - ProcessNow();
  EXPECT_GT(five, absl::Seconds(4));
  EXPECT_LE(five, absl::Seconds(5));
  EXPECT_EQ(FromSystemDeadline(std::chrono::system_clock::time_point::max()), absl::InfiniteFuture());
  // The anchor places process time on the monotonic clock.
  const ClockAnchor anchor = ProcessAnchor();
  EXPECT_FALSE(anchor.boot_id.empty());
  const absl::Duration off =
      anchor.at_zero + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch()) - ProcessNow();
  EXPECT_LT(absl::AbsDuration(off), absl::Seconds(1));
}

// A sleep ends when the injected clock passes its time (a fake clock's Advance, not real time), or at Wake;
// a Wake is sticky; and nothing of a sleep is left behind on the clock.
TEST(WakeableSleep, EndsOnTheInjectedClockOrAtWakeAndWakeIsSticky) {
  FakeClock clock;
  WakeableSleep sleep;
  std::optional<bool> woken;
  std::thread sleeper([&] { woken = sleep.SleepFor(clock, absl::Hours(1)); });
  while (clock.pending_timers() == 0) absl::SleepFor(absl::Milliseconds(1));  // the sleep's timer is set
  clock.Advance(absl::Minutes(59));
  EXPECT_EQ(clock.pending_timers(), 1u) << "not due yet";
  clock.Advance(absl::Minutes(1));
  sleeper.join();
  EXPECT_EQ(woken, false) << "its time passed";

  std::thread woken_early([&] { woken = sleep.SleepFor(clock, absl::Hours(1)); });
  while (clock.pending_timers() == 0) absl::SleepFor(absl::Milliseconds(1));
  sleep.Wake();
  woken_early.join();
  EXPECT_EQ(woken, true);
  EXPECT_EQ(clock.pending_timers(), 0u) << "a woken sleep cancels its timer";
  EXPECT_TRUE(sleep.woken());
  EXPECT_TRUE(sleep.SleepFor(clock, absl::Hours(1))) << "after a Wake, a sleep returns at once";
  EXPECT_EQ(clock.pending_timers(), 0u);
}

}  // namespace
}  // namespace corral
