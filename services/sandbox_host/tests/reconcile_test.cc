// The host root's lock: one host per root, and the root of a killed host is taken over once the processes it
// was starting let go of its descriptors.
#include "services/sandbox_host/reconcile.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace corral::sandbox {
namespace {

using ::testing::HasSubstr;

class HostRootLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(::testing::TempDir(), "/host-root-lock-", getpid());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override {
    if (holder_ > 0) kill(holder_, SIGKILL);
    std::filesystem::remove_all(root_);
  }

  // A host that took the root's lock and forked a process holding a copy of its descriptors for `holder_lives`
  // (as one it starts does until its execve ends), then was killed. Sets holder_.
  void KillAHostWithAHolder(absl::Duration holder_lives) {
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    const pid_t host = fork();
    ASSERT_GE(host, 0);
    if (host == 0) {
      auto lock = LockHostRoot(root_, absl::ZeroDuration());
      if (!lock.ok()) _exit(1);
      const pid_t holder = fork();
      if (holder == 0) {
        usleep(static_cast<useconds_t>(absl::ToInt64Microseconds(holder_lives)));
        _exit(0);
      }
      (void)!write(ready[1], &holder, sizeof(holder));
      pause();
      _exit(0);
    }
    close(ready[1]);
    ASSERT_EQ(read(ready[0], &holder_, sizeof(holder_)), static_cast<ssize_t>(sizeof(holder_)));
    close(ready[0]);
    kill(host, SIGKILL);
    waitpid(host, nullptr, 0);
  }

  std::string root_;
  pid_t holder_ = -1;
};

TEST_F(HostRootLockTest, AKilledHostsRootIsTakenOnceWhatItWasStartingLetsGo) {
  KillAHostWithAHolder(absl::Milliseconds(300));
  auto lock = LockHostRoot(root_, absl::Seconds(10));
  EXPECT_TRUE(lock.ok()) << lock.status();
}

TEST_F(HostRootLockTest, ARootHeldLongerThanTheWaitIsRefusedNamingWhoHoldsIt) {
  KillAHostWithAHolder(absl::Seconds(30));
  auto lock = LockHostRoot(root_, absl::Milliseconds(200));
  ASSERT_EQ(lock.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(lock.status().message());
  EXPECT_THAT(message, HasSubstr(absl::StrCat("open in pid ", holder_, " (")));
  EXPECT_THAT(message, HasSubstr("give each host its own root"));
}

}  // namespace
}  // namespace corral::sandbox
