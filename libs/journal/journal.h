// A SQLite database in WAL mode with group commit: writes are queued, a writer thread applies everything queued
// in one transaction, commits, then tells each writer it is done. Durability: a committed write survives the
// process being killed (it is in the WAL); with `fsync` (synchronous=FULL) it also survives the machine
// crashing, at the price of an fsync per commit.
// Used by services that must not lose what they acknowledged (the proxy's recorded calls).
//
// With a record log (Open with an `apply` function and without fsync), Append writes an encoded change to an
// append-only segment file (segment_log.h) and answers at once; the writer thread applies it to SQLite later, and
// a segment is deleted once everything in it is committed. No caller waits for a commit, so none waits for
// SQLite's checkpoints and their fsyncs. A restarted Journal first applies the records of the segments left over.
// Once a write fails to apply (disk full), no segment is deleted until the next start replays them (the failures
// go to OnWriteFailed, which the services count in a metric to alert on).
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "libs/journal/segment_log.h"

namespace corral {

// One SQLite connection in WAL mode with `schema` applied (the Journal's writer and reader connections, or a
// caller writing synchronously on its own thread). `fsync` as for Journal.
absl::StatusOr<sqlite3*> OpenSqlite(const std::string& path, const std::string& schema, bool fsync);
// Runs `sql` (one or more statements); INTERNAL naming the statement on failure.
absl::Status ExecSql(sqlite3* db, const std::string& sql);

// A prepared statement with positional binds. Not thread-safe.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, absl::string_view text);
  Statement& BindBlob(int index, absl::string_view bytes);
  // SQLITE_ROW → true (read columns), SQLITE_DONE → false; errors → INTERNAL.
  absl::StatusOr<bool> Step();
  absl::Status Run();  // steps to completion, then resets for reuse
  bool prepared() const { return stmt_ != nullptr; }
  int64_t Int(int column) const;
  std::string Text(int column) const;
  void Reset();

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

// A statement prepared once per connection and thread, reset for reuse (the writer's hot path: no re-parsing).
Statement& CachedStatement(sqlite3* db, const char* sql);

class Journal {
 public:
  using Write = std::function<absl::Status(sqlite3* db)>;
  using Done = std::function<void(absl::Status)>;
  // Applies one encoded change (an Append's record) to the database: live, and when replaying left-over segments
  // at Open, so it must be idempotent when replayed in order over a database that already holds the change.
  using Applier = std::function<absl::Status(absl::string_view record, sqlite3* db)>;

  // Opens (creating) `path`, applies `schema` (idempotent CREATE ... IF NOT EXISTS statements). With `apply`,
  // replays the segments `<path>-log.N` left over (DATA_LOSS for a damaged one), and without `fsync` keeps a record
  // log there for Append.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& path, const std::string& schema,
                                                       bool fsync = true, Applier apply = nullptr,
                                                       int64_t segment_bytes = 16 << 20);
  ~Journal();  // commits what is queued, then closes

  // Needs `apply`. With the record log: returns the outcome at once once `record` is in the log (durable against
  // the process being killed; on an error, such as a full disk, nothing is logged or applied), and `done` is not
  // called — unless the writer is more than kMaxBacklog writes behind: then std::nullopt, and `done` runs with OK
  // on the writer thread once the record's transaction is over (backpressure; the log stands either way). With
  // fsync: std::nullopt, and `done` runs once it is committed, with the commit's outcome.
  std::optional<absl::Status> Append(std::string record, Done done);
  static constexpr size_t kMaxBacklog = 4096;
  // The writer commits logged writes (nobody waiting) once this many are queued or this long after the first.
  static constexpr size_t kGatherWrites = 256;
  static constexpr std::chrono::milliseconds kGatherTime{2};
  // Queues `write`; `done` runs on the writer thread once the transaction holding it is committed (or failed).
  void Submit(Write write, Done done);
  // Submit and wait.
  absl::Status Apply(Write write);
  // Reads on the caller's thread (a separate connection; sees every committed write).
  absl::Status Read(const std::function<absl::Status(sqlite3* db)>& read);

  // Called on the writer thread for every write that fails (on its own or with its transaction: disk full, I/O
  // error), e.g. to count it in a metric. Set it before the first Submit.
  void OnWriteFailed(std::function<void(const absl::Status&)> observer) { on_write_failed_ = std::move(observer); }

  // Commits performed and writes they held (group commit at work: writes / commits > 1 under load).
  int64_t commits() const;
  int64_t writes() const;

 private:
  Journal() = default;
  void Loop();
  absl::Status Replay(std::vector<SegmentLog::Segment> segments);
  void SegmentCommitted(int64_t number, const absl::Status& status);
  sqlite3* writer_ = nullptr;
  sqlite3* reader_ = nullptr;
  std::mutex read_mu_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Write, Done>> queue_;
  bool stopping_ = false;
  bool urgent_ = false;  // something queued has a caller waiting for its commit
  int64_t commits_ = 0, writes_ = 0;
  std::function<void(const absl::Status&)> on_write_failed_;
  Applier apply_;
  std::unique_ptr<SegmentLog> log_;  // guarded by mu_ (appends keep the log's order and the queue's the same)
  bool log_damaged_ = false;         // written by the writer thread: a write failed, the segments stay for a replay
  std::thread thread_;
};

}  // namespace corral
