#include "libs/core/worker_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace corral {
namespace {

TEST(WorkerPoolTest, OneThreadRunsJobsInOrderAndTheDestructorFinishesWhatIsQueued) {
  std::vector<int> order;
  {
    WorkerPool pool(1);
    absl::Notification release;
    pool.Post([&] { release.WaitForNotification(); });  // holds the thread while the rest queue up
    for (int i = 0; i < 5; ++i) pool.Post([&order, i] { order.push_back(i); });
    release.Notify();
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(WorkerPoolTest, RunOnWithoutAPoolRunsRightHere) {
  bool ran = false;
  RunOn(nullptr, [&] { ran = true; });
  EXPECT_TRUE(ran);
  std::atomic<int> count = 0;
  {
    WorkerPool pool(3);
    for (int i = 0; i < 100; ++i) RunOn(&pool, [&] { ++count; });
  }
  EXPECT_EQ(count.load(), 100);
}

TEST(WorkerPoolTest, StopFinishesWhatIsQueuedAndAJobPostedAfterwardsRunsOnTheCaller) {
  WorkerPool pool(2);
  std::atomic<int> count = 0;
  for (int i = 0; i < 10; ++i) pool.Post([&] { ++count; });
  pool.Stop();
  EXPECT_EQ(count.load(), 10);
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  pool.Post([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, caller);
  pool.Stop();  // again: nothing to join
}

}  // namespace
}  // namespace corral
