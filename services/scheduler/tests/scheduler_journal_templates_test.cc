// The journal's templates and template files on a real SQLite file: what was saved is what a reopened journal
// loads (a restart's SandboxTemplates::Restore), a dropped one is gone, and a file's content is read back alone.
// Its leases' times across restarts whose clocks began at wall times stepped apart.
#include <future>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"
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

// Each process's clock is the wall time when it started moved on by the monotonic clock, so two processes of one
// boot whose starts a step of the wall clock separates read the same instant differently. A lease's expiry
// journaled by one is read by the next at the same instant, on the same boot; on another boot, as written.
TEST(SchedulerJournalTemplatesTest, ALeasesTimesAreReadAtTheSameInstantByTheNextProcessOfTheBoot) {
  const std::string path = testing::MakeTestDir() + "/scheduler.db";
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  const absl::Time expiry = t0 + absl::Minutes(5);
  auto reopen = [&](const ClockAnchor& anchor, absl::Duration shift) {
    auto journal = SchedulerJournal::Open(path, false);
    EXPECT_THAT(journal, IsOk());
    EXPECT_THAT((*journal)->AdoptClock(anchor), IsOkAndHolds(shift));
    return *std::move(journal);
  };
  auto expiry_read = [](SchedulerJournal& journal) {
    auto leases = journal.LoadLeases();
    EXPECT_THAT(leases, IsOk());
    EXPECT_THAT(*leases, SizeIs(1));
    return FromProto((*leases)[0].expire_time());
  };
  {
    auto first = reopen({"boot-a", t0}, absl::ZeroDuration());
    v1::SandboxLease lease;
    lease.set_lease_id("ls-1");
    ToProto(expiry, lease.mutable_expire_time());
    ASSERT_THAT(Wait([&](auto done) { first->SaveLease(lease, done); }), IsOk());
  }
  {
    // Started after a step an hour forward: its clock reads an hour more at every instant.
    auto second = reopen({"boot-a", t0 + absl::Hours(1)}, absl::Hours(1));
    EXPECT_EQ(expiry_read(*second), expiry + absl::Hours(1));
    v1::SandboxLease renewed;  // renewed by it: written in its own time
    renewed.set_lease_id("ls-1");
    ToProto(expiry + absl::Hours(1) + absl::Minutes(5), renewed.mutable_expire_time());
    ASSERT_THAT(Wait([&](auto done) { second->SaveLease(renewed, done); }), IsOk());
  }
  // Then two hours back: an hour less than the first at every instant.
  EXPECT_EQ(expiry_read(*reopen({"boot-a", t0 - absl::Hours(1)}, -absl::Hours(1))),
            expiry + absl::Minutes(5) - absl::Hours(1));
  // Another boot: only the wall clock relates the two, and its anchor is the base from then on.
  EXPECT_EQ(expiry_read(*reopen({"boot-b", t0 + absl::Hours(7)}, absl::ZeroDuration())), expiry + absl::Minutes(5));
  EXPECT_EQ(expiry_read(*reopen({"boot-b", t0 + absl::Hours(8)}, absl::Hours(1))),
            expiry + absl::Minutes(5) + absl::Hours(1));
}

}  // namespace
}  // namespace corral::scheduler
