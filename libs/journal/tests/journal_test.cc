#include "libs/journal/journal.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "tests/support/subprocess.h"

namespace corral {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

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

// ---- the record log ----

// Records are "k=v"; "fail" makes the write fail. Idempotent in order, as Journal::Apply must be.
absl::Status ApplyKv(absl::string_view record, sqlite3* db) {
  if (record == "fail") return absl::InternalError("this record does not apply");
  const size_t eq = record.find('=');
  if (eq == absl::string_view::npos) return absl::DataLossError("not k=v");
  int64_t k = 0;
  if (!absl::SimpleAtoi(record.substr(0, eq), &k)) return absl::DataLossError("not k=v");
  Statement st(db, "INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)");
  return st.Bind(1, k).Bind(2, record.substr(eq + 1)).Run();
}

std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> found;
  const std::filesystem::path p(path);
  for (const auto& e : std::filesystem::directory_iterator(p.parent_path())) {
    const std::string name = e.path().filename().string();
    if (name.rfind(p.filename().string() + "-log.", 0) == 0) found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

absl::Status Barrier(Journal& j) {  // everything queued before is committed and answered
  return j.Apply([](sqlite3*) { return absl::OkStatus(); });
}

TEST(JournalLogTest, AppendsAreAnsweredAtOnceAndTheLogAloneRestoresThem) {
  const std::string dir = testing::MakeTestDir();
  {
    auto j = Journal::Open(dir + "/j.db", kSchema, /*fsync=*/false, ApplyKv);
    ASSERT_THAT(j, IsOk());
    for (int i = 0; i < 20; ++i) {
      auto answer = (*j)->Append(absl::StrCat(i, "=v", i), [](absl::Status) { FAIL() << "answered at once instead"; });
      ASSERT_TRUE(answer.has_value());
      EXPECT_THAT(*answer, IsOk());
    }
    // While the journal runs the log holds every answered record: copied next to a database that has none...
    std::filesystem::copy_file(dir + "/j.db-log.1", dir + "/fresh.db-log.5");
    ASSERT_THAT(Barrier(**j), IsOk());
    EXPECT_EQ(Count(**j), 20);
  }
  EXPECT_THAT(Segments(dir + "/j.db"), IsEmpty());  // a clean close leaves no log
  // ...it restores them all, and the replayed segment goes.
  auto fresh = Journal::Open(dir + "/fresh.db", kSchema, false, ApplyKv);
  ASSERT_THAT(fresh, IsOk());
  EXPECT_EQ(Count(**fresh), 20);
  EXPECT_THAT(Segments(dir + "/fresh.db"), ElementsAre("fresh.db-log.6"));  // the new one, after 5
}

TEST(JournalLogTest, SealedSegmentsGoOnceCommittedAndOnesWithAFailedWriteStayForTheNextStart) {
  const std::string path = testing::MakeTestDir() + "/j.db";
  auto j = Journal::Open(path, kSchema, false, ApplyKv, /*segment_bytes=*/64);
  ASSERT_THAT(j, IsOk());
  for (int i = 0; i < 10; ++i) ASSERT_THAT(*(*j)->Append(absl::StrCat(i, "=abcdefgh"), nullptr), IsOk());
  ASSERT_THAT(Barrier(**j), IsOk());
  // Frames of 18 bytes: four to a segment; 1 and 2 are sealed and committed, 3 is being written.
  EXPECT_THAT(Segments(path), ElementsAre("j.db-log.3"));
  EXPECT_EQ(Count(**j), 10);

  ASSERT_THAT(*(*j)->Append("fail", nullptr), IsOk());  // logged: its write fails later, on the writer thread
  for (int i = 10; i < 20; ++i) ASSERT_THAT(*(*j)->Append(absl::StrCat(i, "=abcdefgh"), nullptr), IsOk());
  ASSERT_THAT(Barrier(**j), IsOk());
  EXPECT_EQ(Count(**j), 20);  // the others still committed
  // Nothing from the failed write's segment on is deleted: 3 (8, 9, fail, 10), 4 and 5 (four each), 6 (19).
  EXPECT_THAT(Segments(path), ElementsAre("j.db-log.3", "j.db-log.4", "j.db-log.5", "j.db-log.6"));
  j->reset();
  // The next start replays them, the failing record fails again, and the journal does not open half replayed.
  EXPECT_THAT(Journal::Open(path, kSchema, false, ApplyKv, 64),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("replaying journal segment " + path + "-log.3: this record does not apply")));
  EXPECT_EQ(Segments(path).size(), 4u);
}

TEST(JournalLogTest, FarBehindTheWriterACallerWaitsForItAndTheLogStandsEvenIfTheApplyFails) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> entered;
  auto apply = [&](absl::string_view record, sqlite3* db) -> absl::Status {
    if (record == "block") {
      entered.set_value();
      released.wait();  // holds the writer while the queue fills
      return absl::OkStatus();
    }
    return ApplyKv(record, db);
  };
  auto j = Journal::Open(testing::MakeTestDir() + "/j.db", kSchema, false, apply);
  ASSERT_THAT(j, IsOk());
  ASSERT_THAT(*(*j)->Append("block", nullptr), IsOk());
  entered.get_future().wait();
  for (size_t i = 0; i < Journal::kMaxBacklog; ++i) ASSERT_THAT(*(*j)->Append(absl::StrCat(i, "=v"), nullptr), IsOk());
  std::promise<absl::Status> waited;
  EXPECT_FALSE((*j)->Append("fail", [&](absl::Status s) { waited.set_value(s); }).has_value());  // must wait
  release.set_value();
  EXPECT_THAT(waited.get_future().get(), IsOk());  // its apply failed, but it is logged: replayed at the next start
  EXPECT_EQ(Count(**j), static_cast<int64_t>(Journal::kMaxBacklog));
}

TEST(JournalLogTest, WithFsyncAppendsAreAnsweredOnceCommittedAndNoLogIsKept) {
  const std::string path = testing::MakeTestDir() + "/j.db";
  auto j = Journal::Open(path, kSchema, /*fsync=*/true, ApplyKv);
  ASSERT_THAT(j, IsOk());
  std::promise<absl::Status> committed;
  EXPECT_FALSE((*j)->Append("1=a", [&](absl::Status s) { committed.set_value(s); }).has_value());
  EXPECT_THAT(committed.get_future().get(), IsOk());
  EXPECT_EQ(Count(**j), 1);
  EXPECT_THAT(Segments(path), IsEmpty());
}

TEST(JournalLogTest, ADamagedSegmentIsDataLossAtOpen) {
  const std::string path = testing::MakeTestDir() + "/j.db";
  {
    std::vector<SegmentLog::Segment> left;
    auto log = SegmentLog::Open(path + "-log", 1 << 20, &left);
    ASSERT_THAT(log, IsOk());
    ASSERT_THAT((*log)->Append("1=a"), IsOk());
    ASSERT_THAT((*log)->Append("2=b"), IsOk());
  }
  std::fstream f(path + "-log.1", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(9);
  f.put('X');  // inside the first record, a whole one follows
  f.close();
  EXPECT_THAT(Journal::Open(path, kSchema, false, ApplyKv),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path + "-log.1 is damaged at offset 0")));
}

}  // namespace
}  // namespace corral
