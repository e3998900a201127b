#include "services/ratelimiter/lease_snapshot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/ratelimiter/config.h"
#include "tests/support/subprocess.h"

namespace corral::ratelimiter {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(LeaseSnapshotTest, KeepsHeldLeasesAndTheHeartbeatAcrossReopening) {
  const std::string path = testing::MakeTestDir() + "/leases.db";
  {
    auto snapshot = LeaseSnapshot::Open(path);
    ASSERT_THAT(snapshot, IsOk());
    ASSERT_THAT((*snapshot)->Load(), IsOkAndHolds(Field(&LeaseSnapshot::Contents::leases, IsEmpty())));
    ASSERT_THAT((*snapshot)->Held({"lease-a", absl::Seconds(30)}), IsOk());
    ASSERT_THAT((*snapshot)->Held({"lease-b", absl::Seconds(5)}), IsOk());
    ASSERT_THAT((*snapshot)->Held({"lease-a", absl::Seconds(60)}), IsOk());  // re-claimed with another TTL: one row
    (*snapshot)->Ended("lease-b");
    (*snapshot)->Ended("never-held");
    (*snapshot)->Alive(absl::FromUnixMillis(1'700'000'000'123));
  }  // closed without anything else, as a kill -9 would leave it
  auto reopened = LeaseSnapshot::Open(path);
  ASSERT_THAT(reopened, IsOk());
  auto contents = (*reopened)->Load();
  ASSERT_THAT(contents, IsOk());
  ASSERT_THAT(contents->leases, ElementsAre(Field(&StoredLease::id, "lease-a")));
  EXPECT_EQ(contents->leases[0].ttl, absl::Seconds(60));
  EXPECT_EQ(contents->last_alive, absl::FromUnixMillis(1'700'000'000'123));
}

TEST(LeaseSnapshotTest, EveryWriteSurvivesTheProcessDyingWithoutClosingTheFile) {
  const std::string path = testing::MakeTestDir() + "/leases.db";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a limiter that writes and then dies as a kill -9 would leave it: no close, no checkpoint
    auto snapshot = LeaseSnapshot::Open(path);
    if (!snapshot.ok()) _exit(2);
    if (!(*snapshot)->Held({"lease-a", absl::Seconds(30)}).ok()) _exit(3);
    if (!(*snapshot)->Held({"lease-b", absl::Seconds(30)}).ok()) _exit(3);
    (*snapshot)->Ended("lease-a");
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto reopened = LeaseSnapshot::Open(path);
  ASSERT_THAT(reopened, IsOk());
  auto contents = (*reopened)->Load();
  ASSERT_THAT(contents, IsOk());
  EXPECT_THAT(contents->leases, ElementsAre(Field(&StoredLease::id, "lease-b")));
  EXPECT_EQ(contents->last_alive, absl::InfinitePast());  // no heartbeat was ever written
}

TEST(LeaseSnapshotTest, ADamagedChangeLogIsDataLossNamingItsFileNotASilentlyShorterSnapshot) {
  const std::string path = testing::MakeTestDir() + "/leases.db";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // three changes logged, then killed before a clean close could apply them and drop the log
    auto snapshot = LeaseSnapshot::Open(path);
    if (!snapshot.ok()) _exit(2);
    for (const char* id : {"lease-a", "lease-b", "lease-c"}) {
      if (!(*snapshot)->Held({id, absl::Seconds(30)}).ok()) _exit(3);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  {  // a byte of the first record flipped: the records after it cannot be trusted to follow it
    std::fstream log(path + "-log.1", std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(log.good());
    log.seekg(12);
    const char byte = static_cast<char>(log.get());
    log.seekp(12);
    log.put(static_cast<char>(byte ^ 0x5a));
  }
  EXPECT_THAT(LeaseSnapshot::Open(path), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("leases.db-log.1")));
}

TEST(LeaseSnapshotTest, AFileThatIsNotASnapshotIsAClearError) {
  const std::string path = testing::MakeTestDir() + "/leases.db";
  std::ofstream(path) << "this is not a database, just some text long enough to fill a header page....";
  EXPECT_THAT(LeaseSnapshot::Open(path), StatusIs(absl::StatusCode::kInternal, HasSubstr("lease snapshot")));
  EXPECT_THAT(LeaseSnapshot::Open("/nonexistent-dir/leases.db"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("/nonexistent-dir/leases.db")));
}

TEST(LeaseSnapshotTest, ASecondOpenOfTheSameFileIsRefusedWhileTheFirstHoldsIt) {
  const std::string path = testing::MakeTestDir() + "/leases.db";
  auto first = LeaseSnapshot::Open(path);
  ASSERT_THAT(first, IsOk());
  EXPECT_THAT(LeaseSnapshot::Open(path),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("in use by another process")));
  first->reset();
  EXPECT_THAT(LeaseSnapshot::Open(path), IsOk());
}

TEST(StatePathTest, UnsetGoesBesideTheConfigFileAndNoneMeansNoSnapshot) {
  const std::string dir = testing::MakeTestDir();
  Config config;
  config.server.config_file = dir + "/limiter.yaml";
  EXPECT_EQ(ResolveStatePath(config).path, dir + "/limiter.leases.db");
  config.state_path = "/elsewhere/leases.db";
  EXPECT_EQ(ResolveStatePath(config).path, "/elsewhere/leases.db");
  config.state_path = "none";
  EXPECT_EQ(ResolveStatePath(config).path, "");
  config.state_path.clear();
  config.server.config_file.clear();
  config.server.grpc_listen = "127.0.0.1:0";  // no config and no fixed port: nothing to tell two limiters apart
  EXPECT_EQ(ResolveStatePath(config).path, "");
}

TEST(LeaseSnapshotTest, ASnapshotIsExpectedWhenItsChangeLogOutlivedItsFile) {
  const std::string path = testing::MakeTestDir() + "/leases.db";
  EXPECT_FALSE(LeaseSnapshot::MissingWhereExpected(path));  // a first start
  std::ofstream(path + "-log.3") << "x";
  EXPECT_TRUE(LeaseSnapshot::MissingWhereExpected(path));
  std::ofstream(path) << "";
  EXPECT_FALSE(LeaseSnapshot::MissingWhereExpected(path));  // there: read (or refused as damaged) by Open
}

}  // namespace
}  // namespace corral::ratelimiter
