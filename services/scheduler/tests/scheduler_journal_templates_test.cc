// The journal's templates and template files on a real SQLite file: what was saved is what a reopened journal
// loads (a restart's SandboxTemplates::Restore), a dropped one is gone, and a file's content is read back alone.
#include <future>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/scheduler/scheduler_journal.h"
#include "tests/support/subprocess.h"

namespace corral::scheduler {
namespace {

using ::testing::SizeIs;

absl::Status Wait(const std::function<void(std::function<void(absl::Status)>)>& write) {
  std::promise<absl::Status> done;
  write([&](absl::Status s) { done.set_value(s); });
  return done.get_future().get();
}

TEST(SchedulerJournalTemplatesTest, WhatIsSavedIsWhatAReopenedJournalLoads) {
  const std::string path = testing::MakeTestDir() + "/scheduler.db";
  {
    auto journal = SchedulerJournal::Open(path, false);
    ASSERT_THAT(journal, IsOk());
    v1::SandboxTemplate kept, dropped;
    kept.set_template_id("tpl-1");
    kept.set_owner("alice");
    kept.set_name("harbor-task");
    kept.add_builds()->set_status(v1::TEMPLATE_BUILD_STATUS_READY);
    dropped.set_template_id("tpl-2");
    ASSERT_THAT(Wait([&](auto done) { (*journal)->SaveTemplate(kept, done); }), IsOk());
    ASSERT_THAT(Wait([&](auto done) { (*journal)->SaveTemplate(dropped, done); }), IsOk());
    (*journal)->DropTemplate("tpl-2");
    v1::TemplateFile file;
    file.set_owner("alice");
    file.set_hash("abc");
    file.set_content(std::string("\x1f\x8b\0tar", 6));
    ASSERT_THAT(Wait([&](auto done) { (*journal)->SaveTemplateFile(file, absl::FromUnixSeconds(1000), done); }),
                IsOk());
    file.set_hash("gone");
    ASSERT_THAT(Wait([&](auto done) { (*journal)->SaveTemplateFile(file, absl::FromUnixSeconds(1001), done); }),
                IsOk());
    (*journal)->DropTemplateFile("alice", "gone");
  }
  auto journal = SchedulerJournal::Open(path, false);
  ASSERT_THAT(journal, IsOk());
  auto templates = (*journal)->LoadTemplates();
  ASSERT_THAT(templates, IsOk());
  ASSERT_THAT(*templates, SizeIs(1));
  EXPECT_EQ((*templates)[0].name(), "harbor-task");
  EXPECT_EQ((*templates)[0].builds(0).status(), v1::TEMPLATE_BUILD_STATUS_READY);
  auto files = (*journal)->LoadTemplateFiles();
  ASSERT_THAT(files, IsOk());
  ASSERT_THAT(*files, SizeIs(1));
  EXPECT_EQ((*files)[0].owner, "alice");
  EXPECT_EQ((*files)[0].hash, "abc");
  EXPECT_EQ((*files)[0].size, 6u);
  EXPECT_EQ((*files)[0].time, absl::FromUnixSeconds(1000));
  EXPECT_THAT((*journal)->LoadTemplateFile("alice", "abc"), IsOkAndHolds(std::string("\x1f\x8b\0tar", 6)));
  EXPECT_THAT((*journal)->LoadTemplateFile("bob", "abc"), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace corral::scheduler
