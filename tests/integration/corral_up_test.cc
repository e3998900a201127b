// `corral up` starts the cluster from its embedded defaults, the demo runs against it, and everything stops.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "tests/support/subprocess.h"

namespace corral {
namespace {

using ::testing::HasSubstr;

TEST(CorralUp, StartsTheClusterRunsTheDemoAndStopsCleanly) {
  std::string dir = testing::MakeTestDir();
  auto up = testing::Subprocess::Start(
      {CORRAL_CLI, "up", "--dir", dir + "/.corral", "--any-port", "--demo", "--exit-after-demo"}, dir + "/up.log");
  ASSERT_THAT(up, IsOk());
  auto status = up->Wait(absl::Seconds(120));
  ASSERT_THAT(status, IsOk()) << up->Log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << up->Log();
  std::string log = up->Log();
  EXPECT_THAT(log, HasSubstr("demo: 6/6 served, at most 2 holder(s) at once, FIFO order"));
  if (geteuid() == 0) {
    EXPECT_THAT(log, HasSubstr("demo: sandboxes isolated and cleaned up"));
    EXPECT_THAT(log, HasSubstr("ok: 24/24 episodes finished, 24 with token ids, 24 acknowledged"));
    EXPECT_THAT(log, HasSubstr("print(int(input()) * 2) with stdin 21 -> 42, Success"));
  }
  EXPECT_THAT(log, HasSubstr("corral up: stopped"));
  // Its hints work when pasted: the CLI by the path it was started with, and how to keep a cluster running.
  const std::string cli = std::filesystem::relative(CORRAL_CLI).string();
  EXPECT_THAT(log, HasSubstr(cli + " run examples/datasets/word_problems.jsonl --group-size 4"));
  EXPECT_THAT(log, HasSubstr("scripts/up --stay"));
  std::ifstream scheduler_log(dir + "/.corral/scheduler.log");
  std::string scheduler_text((std::istreambuf_iterator<char>(scheduler_log)), std::istreambuf_iterator<char>());
  EXPECT_THAT(scheduler_text, HasSubstr("scheduler stopped"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/.corral/cluster.json"));
  EXPECT_EQ(std::filesystem::status(dir + "/.corral/secret").permissions() & std::filesystem::perms::group_all,
            std::filesystem::perms::none);
  // `corral up` waits for each service to exit; the ratelimiter drained on SIGTERM and logged its stop.
  std::ifstream service_log(dir + "/.corral/ratelimiter.log");
  std::string service_text((std::istreambuf_iterator<char>(service_log)), std::istreambuf_iterator<char>());
  EXPECT_THAT(service_text, HasSubstr("ratelimiter: stopped"));
}

}  // namespace
}  // namespace corral
