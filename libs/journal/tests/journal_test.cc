#include "libs/journal/journal.h"

#include <future>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "tests/support/subprocess.h"

namespace corral {
namespace {

constexpr char kSchema[] = "CREATE TABLE IF NOT EXISTS kv (k INTEGER PRIMARY KEY, v TEXT NOT NULL);";

absl::Status Put(sqlite3* db, int64_t k, const std::string& v) {
  Statement st(db, "INSERT INTO kv (k, v) VALUES (?, ?)");
  return st.Bind(1, k).Bind(2, v).Run();
}

int64_t Count(Journal& j) {
  int64_t n = -1;
  EXPECT_THAT(j.Read([&](sqlite3* db) -> absl::Status {
    Statement st(db, "SELECT COUNT(*) FROM kv");
    auto row = st.Step();
    if (!row.ok()) return row.status();
    n = st.Int(0);
    return absl::OkStatus();
  }),
              IsOk());
  return n;
}

TEST(JournalTest, ConcurrentWritersAreGroupCommittedAndSurviveReopening) {
  const std::string path = testing::MakeTestDir() + "/j.db";
  {
    auto j = Journal::Open(path, kSchema);
    ASSERT_THAT(j, IsOk());
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i) {
          EXPECT_THAT((*j)->Apply([=](sqlite3* db) { return Put(db, t * 1000 + i, "x"); }), IsOk());
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(Count(**j), 400);
    EXPECT_EQ((*j)->writes(), 400);
    EXPECT_LT((*j)->commits(), 400);  // writers waiting together shared a commit
  }
  auto reopened = Journal::Open(path, kSchema);
  ASSERT_THAT(reopened, IsOk());
  EXPECT_EQ(Count(**reopened), 400);
}

TEST(JournalTest, InlineCommitsAreMadeByTheSubmittingThreadsAndStillGroupCommitted) {
  const std::string path = testing::MakeTestDir() + "/j.db";
  {
    auto j = Journal::Open(path, kSchema, /*fsync=*/false, /*inline_commits=*/true);
    ASSERT_THAT(j, IsOk());
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i) {
          EXPECT_THAT((*j)->Apply([=](sqlite3* db) { return Put(db, t * 1000 + i, "x"); }), IsOk());
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(Count(**j), 400);
    EXPECT_EQ((*j)->writes(), 400);
    EXPECT_LT((*j)->commits(), 400);  // threads that found another committing were committed with it
    // A write submitted from inside a `done` joins the committing thread's next batch.
    std::promise<absl::Status> nested;
    (*j)->Submit([](sqlite3* db) { return Put(db, 9001, "outer"); }, [&](absl::Status) {
      (*j)->Submit([](sqlite3* db) { return Put(db, 9002, "inner"); }, [&](absl::Status s) { nested.set_value(s); });
    });
    EXPECT_THAT(nested.get_future().get(), IsOk());
    EXPECT_EQ(Count(**j), 402);
  }
  auto reopened = Journal::Open(path, kSchema);
  ASSERT_THAT(reopened, IsOk());
  EXPECT_EQ(Count(**reopened), 402);
}

TEST(JournalTest, AFailingWriteIsRolledBackAloneAndReported) {
  auto j = Journal::Open(testing::MakeTestDir() + "/j.db", kSchema);
  ASSERT_THAT(j, IsOk());
  std::atomic<int> observed_failures{0};
  (*j)->OnWriteFailed([&](const absl::Status& s) {
    if (absl::IsInternal(s)) ++observed_failures;
  });
  ASSERT_THAT((*j)->Apply([](sqlite3* db) { return Put(db, 1, "a"); }), IsOk());
  std::vector<absl::Status> results(3);
  std::atomic<int> done{0};
  for (int i = 0; i < 3; ++i) {
    // The middle one violates the primary key (k = 1 exists).
    (*j)->Submit([i](sqlite3* db) { return Put(db, i == 1 ? 1 : 10 + i, "b"); },
                 [&, i](absl::Status s) {
                   results[static_cast<size_t>(i)] = s;
                   ++done;
                 });
  }
  while (done < 3) std::this_thread::yield();
  EXPECT_THAT(results[0], IsOk());
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(results[2], IsOk());
  EXPECT_EQ(Count(**j), 3);
  EXPECT_EQ(observed_failures, 1);  // what the services count in corral_<service>_journal_errors_total
}

TEST(JournalTest, HeldExclusivelyItKeepsCommittingAndLocksEveryoneElseOut) {
  const std::string path = testing::MakeTestDir() + "/j.db";
  {
    auto j = Journal::Open(path, kSchema);
    ASSERT_THAT(j, IsOk());
    ASSERT_THAT((*j)->Apply([](sqlite3* db) { return Put(db, 1, "before"); }), IsOk());
    EXPECT_EQ(Count(**j), 1);
    ASSERT_THAT((*j)->HoldExclusively(), IsOk());
    ASSERT_THAT((*j)->Apply([](sqlite3* db) { return Put(db, 2, "after"); }), IsOk());
    EXPECT_THAT((*j)->Read([](sqlite3*) { return absl::OkStatus(); }), StatusIs(absl::StatusCode::kFailedPrecondition));
    // Another journal on the same file (another process, in production) cannot even open it.
    sqlite3* other = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
    sqlite3_busy_timeout(other, 10);
    EXPECT_THAT(ExecSql(other, "SELECT COUNT(*) FROM kv"), StatusIs(absl::StatusCode::kInternal, ::testing::HasSubstr("locked")));
    sqlite3_close(other);
  }
  auto reopened = Journal::Open(path, kSchema);  // the lock ended with the journal; both writes are there
  ASSERT_THAT(reopened, IsOk());
  EXPECT_EQ(Count(**reopened), 2);
}

TEST(JournalTest, AnUnopenablePathIsUnavailable) {
  EXPECT_THAT(Journal::Open("/nonexistent-dir/x/j.db", kSchema), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace corral
