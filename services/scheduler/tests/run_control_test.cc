#include "services/scheduler/table/run_control.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace corral::scheduler {
namespace {

TEST(RunControlTest, StopRunsEachHookOnceAndARegisterAfterTheStopRunsAtOnce) {
  RunControl control;
  int a = 0, b = 0;
  const uint64_t id = control.Register([&] { ++a; });
  async::ScopedInterrupt scoped(&control, [&] { ++b; });
  EXPECT_TRUE(control.Stop(StopReason::kCancelled, "test"));
  EXPECT_FALSE(control.Stop(StopReason::kCancelled, "again"));  // the first reason wins
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
  control.Unregister(id);
  int late = 0;
  control.Register([&] { ++late; });
  EXPECT_EQ(late, 1);
  EXPECT_EQ(control.message(), "test");
}

// The race a cancel used to lose: the stopping thread has taken a hook that points into a scope (rpc::CallScope's
// ClientContext) just as the run leaves that scope. Unregister must not return while the hook still runs.
TEST(RunControlTest, UnregisterWaitsForAHookThatIsRunning) {
  RunControl control;
  absl::Notification hook_entered, release_hook;
  std::atomic<bool> hook_done = false;
  const uint64_t id = control.Register([&] {
    hook_entered.Notify();
    release_hook.WaitForNotification();
    hook_done = true;
  });
  std::thread stopper([&] { control.Stop(StopReason::kCancelled, "test"); });
  hook_entered.WaitForNotification();
  absl::Notification unregistered;
  std::thread leaver([&] {
    control.Unregister(id);
    EXPECT_TRUE(hook_done);  // by the time the scope is gone, its hook has finished
    unregistered.Notify();
  });
  // A wrong Unregister returns while the hook is held: waiting for that must time out.
  EXPECT_FALSE(unregistered.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  release_hook.Notify();
  leaver.join();
  stopper.join();
  EXPECT_TRUE(unregistered.HasBeenNotified());
}

TEST(RunControlTest, AHookThatUnregistersItselfDoesNotDeadlock) {
  RunControl control;
  uint64_t id = 0;
  bool ran = false;
  id = control.Register([&] {
    control.Unregister(id);
    ran = true;
  });
  EXPECT_TRUE(control.Stop(StopReason::kCancelled, "test"));
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace corral::scheduler
