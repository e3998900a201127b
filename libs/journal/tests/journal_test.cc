#include "libs/journal/journal.h"

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

TEST(JournalTest, AnUnopenablePathIsUnavailable) {
  EXPECT_THAT(Journal::Open("/nonexistent-dir/x/j.db", kSchema), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace corral
