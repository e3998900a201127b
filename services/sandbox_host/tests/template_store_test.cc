#include "services/sandbox_host/template_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/linux/tree_copy.h"
#include "tests/support/subprocess.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;

// Collects Prepare outcomes from whichever thread delivers them.
struct Outcomes {
  absl::Mutex mu;
  std::vector<absl::StatusOr<TemplateInfo>> got ABSL_GUARDED_BY(mu);
  TemplateStore::Done Add() {
    return [this](absl::StatusOr<TemplateInfo> info) {
      absl::MutexLock lock(&mu);
      got.push_back(std::move(info));
    };
  }
  std::vector<absl::StatusOr<TemplateInfo>> WaitFor(size_t n) {
    absl::MutexLock lock(&mu);
    want = n;
    mu.Await(absl::Condition(this, &Outcomes::Enough));
    return got;
  }
  bool Enough() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return got.size() >= want; }
  size_t want ABSL_GUARDED_BY(mu) = 0;
};

TemplateStore::BuildFn WriteFile(std::string content, std::atomic<int>* builds, absl::Notification* release = nullptr) {
  return [content, builds, release](const std::string& dir, const std::atomic<bool>&) -> absl::StatusOr<CopyStats> {
    ++*builds;
    if (release != nullptr) release->WaitForNotification();
    std::ofstream(dir + "/file") << content;
    return CopyStats{.bytes = content.size(), .files = 1};
  };
}

class TemplateStoreTest : public ::testing::Test {
 protected:
  std::string dir_ = testing::MakeTestDir() + "/templates";
  FakeClock clock_;
};

TEST_F(TemplateStoreTest, ConcurrentPreparesOfOneKeyBuildOnceAndAllGetTheOutcome) {
  TemplateStore store(dir_, {}, &clock_);
  std::atomic<int> builds{0};
  absl::Notification release;
  Outcomes outcomes;
  for (int i = 0; i < 3; ++i) store.Prepare("k1", "d1", WriteFile("abc", &builds, &release), outcomes.Add());
  // While it builds: listed as BUILDING, not yet cloneable, deletes refused.
  ASSERT_EQ(store.List().size(), 1u);
  EXPECT_EQ(store.List()[0].state, TemplateState::kBuilding);
  EXPECT_THAT(store.Acquire("k1"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store.Delete("k1"), StatusIs(absl::StatusCode::kFailedPrecondition));
  release.Notify();
  for (const auto& got : outcomes.WaitFor(3)) {
    ASSERT_THAT(got, IsOk());
    EXPECT_EQ(got->state, TemplateState::kReady);
    EXPECT_EQ(got->size_bytes, 3u);
  }
  EXPECT_EQ(builds, 1);
  // A later prepare with the same content returns at once, without building.
  Outcomes later;
  store.Prepare("k1", "d1", WriteFile("abc", &builds), later.Add());
  EXPECT_THAT(later.WaitFor(1)[0], IsOk());
  EXPECT_EQ(builds, 1);
}

TEST_F(TemplateStoreTest, SameKeyWithOtherContentIsAConflictWhileBuildingAndAfter) {
  TemplateStore store(dir_, {}, &clock_);
  std::atomic<int> builds{0};
  absl::Notification release;
  Outcomes first, conflict;
  store.Prepare("k1", "d1", WriteFile("a", &builds, &release), first.Add());
  store.Prepare("k1", "d2", WriteFile("b", &builds), conflict.Add());
  EXPECT_THAT(conflict.WaitFor(1)[0], StatusIs(absl::StatusCode::kAlreadyExists));
  release.Notify();
  EXPECT_THAT(first.WaitFor(1)[0], IsOk());
  Outcomes after;
  store.Prepare("k1", "d2", WriteFile("b", &builds), after.Add());
  EXPECT_THAT(after.WaitFor(1)[0], StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_EQ(builds, 1);
}

TEST_F(TemplateStoreTest, AFailedBuildKeepsNothingAndALaterPrepareBuildsAgain) {
  TemplateStore store(dir_, {}, &clock_);
  Outcomes failed;
  absl::Notification release;
  std::atomic<bool> waited{false};
  store.Prepare(
      "k1", "d1",
      [&](const std::string&, const std::atomic<bool>&) -> absl::StatusOr<CopyStats> {
        release.WaitForNotification();
        return absl::FailedPreconditionError("setup_commands[0] exited with code 1");
      },
      failed.Add());
  store.WhenReady("k1", [&](auto image) { waited = absl::IsNotFound(image.status()); });
  release.Notify();
  EXPECT_THAT(failed.WaitFor(1)[0], StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(store.List().empty());
  EXPECT_TRUE(waited);              // creates waiting on the build are told it is not there
  EXPECT_TRUE(fs::is_empty(dir_));  // the half-built directory is gone
  std::atomic<int> builds{0};
  Outcomes retried;
  store.Prepare("k1", "d1", WriteFile("x", &builds), retried.Add());
  EXPECT_THAT(retried.WaitFor(1)[0], IsOk());
  EXPECT_EQ(builds, 1);
}

TEST_F(TemplateStoreTest, LimitsOnCountAndBytesAreResourceExhausted) {
  TemplateStore store(dir_, TemplateLimits{.max_templates = 1, .max_bytes = 4}, &clock_);
  std::atomic<int> builds{0};
  Outcomes too_big;
  store.Prepare("big", "d", WriteFile("12345", &builds), too_big.Add());
  EXPECT_THAT(too_big.WaitFor(1)[0], StatusIs(absl::StatusCode::kResourceExhausted));
  Outcomes ok, too_many;
  store.Prepare("a", "d", WriteFile("12", &builds), ok.Add());
  EXPECT_THAT(ok.WaitFor(1)[0], IsOk());
  store.Prepare("b", "d", WriteFile("1", &builds), too_many.Add());
  EXPECT_THAT(too_many.WaitFor(1)[0], StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST_F(TemplateStoreTest, DeletedTemplateFilesGoWhenTheLastCloneLetsGo) {
  TemplateStore store(dir_, {}, &clock_);
  std::atomic<int> builds{0};
  Outcomes ok;
  store.Prepare("k1", "d1", WriteFile("abc", &builds), ok.Add());
  ASSERT_THAT(ok.WaitFor(1)[0], IsOk());
  auto image = store.Acquire("k1");
  ASSERT_THAT(image, IsOk());
  const std::string files = (*image)->dir;
  ASSERT_THAT(store.Delete("k1"), IsOk());
  EXPECT_THAT(store.Acquire("k1"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(fs::exists(files + "/file"));  // a clone in progress still reads it
  image->reset();
  EXPECT_FALSE(fs::exists(files));
}

TEST_F(TemplateStoreTest, DestructionCancelsABuildInProgress) {
  Outcomes outcome;
  {
    TemplateStore store(dir_, {}, &clock_);
    store.Prepare(
        "k1", "d1",
        [](const std::string&, const std::atomic<bool>& cancelled) -> absl::StatusOr<CopyStats> {
          cancelled.wait(false);  // until the store's Stop() sets and notifies it
          return absl::CancelledError("shutting down");
        },
        outcome.Add());
  }
  EXPECT_THAT(outcome.WaitFor(1)[0], StatusIs(absl::StatusCode::kCancelled));
}

TEST(CopyTreeTest, CopiesFilesDirsAndLinksNeverFollowingAndStripsSpecialBits) {
  const std::string base = testing::MakeTestDir(), src = base + "/src", dst = base + "/dst";
  fs::create_directories(dst);
  fs::create_directories(src + "/a/b");
  std::ofstream(src + "/a/b/tool") << "#!/bin/sh\n";
  chmod((src + "/a/b/tool").c_str(), 04755);
  fs::create_symlink("/etc/shadow", src + "/a/link");
  mkfifo((src + "/a/fifo").c_str(), 0600);
  fs::create_directories(src + "/.tmp");
  std::ofstream(src + "/.tmp/scratch") << "x";
  UniqueFd s(open(src.c_str(), O_RDONLY | O_DIRECTORY)), d(open(dst.c_str(), O_RDONLY | O_DIRECTORY));
  auto stats = CopyTree(s.get(), d.get(), 45678, 45678, {".tmp"});
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->bytes, 10u);
  EXPECT_EQ(stats->files, 4u);  // a, a/b, a/b/tool, a/link
  struct stat st {};
  ASSERT_EQ(lstat((dst + "/a/b/tool").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);  // setuid dropped
  EXPECT_EQ(st.st_uid, 45678u);
  ASSERT_EQ(lstat((dst + "/a/link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));  // a link, not a copy of what it names
  EXPECT_EQ(fs::read_symlink(dst + "/a/link"), "/etc/shadow");
  EXPECT_EQ(st.st_uid, 45678u);
  EXPECT_FALSE(fs::exists(dst + "/a/fifo"));
  EXPECT_FALSE(fs::exists(dst + "/.tmp"));
}

TEST(CopyTreeTest, RefusesTreesNestedDeeperThanTheLimit) {
  const std::string base = testing::MakeTestDir(), src = base + "/src", dst = base + "/dst";
  fs::create_directories(dst);
  fs::create_directories(src + "/1/2/3/4");
  UniqueFd s(open(src.c_str(), O_RDONLY | O_DIRECTORY)), d(open(dst.c_str(), O_RDONLY | O_DIRECTORY));
  EXPECT_THAT(CopyTree(s.get(), d.get(), 0, 0, {}, 2), StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace corral::sandbox
