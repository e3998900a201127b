#include "libs/journal/journal.h"

#include <future>
#include <map>

#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "spdlog/spdlog.h"

namespace corral {
namespace {

absl::StatusOr<sqlite3*> OpenDb(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open journal ", path, ": ", message));
  }
  sqlite3_busy_timeout(db, 5000);
  return db;
}

}  // namespace

absl::Status ExecSql(sqlite3* db, const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error != nullptr ? error : "unknown error";
    sqlite3_free(error);
    return absl::InternalError(absl::StrCat("sqlite: ", message, " (in: ", sql.substr(0, 80), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<sqlite3*> OpenSqlite(const std::string& path, const std::string& schema, bool fsync) {
  auto db = OpenDb(path);
  if (!db.ok()) return db.status();
  for (const char* pragma : {"PRAGMA journal_mode=WAL", fsync ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL",
                             "PRAGMA foreign_keys=ON"}) {
    if (auto s = ExecSql(*db, pragma); !s.ok()) {
      sqlite3_close(*db);
      return s;
    }
  }
  if (auto s = ExecSql(*db, schema); !s.ok()) {
    sqlite3_close(*db);
    return s;
  }
  return db;
}

Statement& CachedStatement(sqlite3* db, const char* sql) {
  // Per thread: the writer thread owns its connection's statements, finalized when the thread exits (before the
  // connection closes).
  thread_local std::map<std::pair<sqlite3*, std::string>, std::unique_ptr<Statement>> cache;
  auto& slot = cache[{db, sql}];
  if (slot == nullptr || !slot->prepared()) slot = std::make_unique<Statement>(db, sql);  // retry a failed prepare
  slot->Reset();
  return *slot;
}

Statement::Statement(sqlite3* db, const char* sql) : db_(db) { sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::Bind(int index, int64_t value) {
  if (stmt_ != nullptr) sqlite3_bind_int64(stmt_, index, value);
  return *this;
}
Statement& Statement::Bind(int index, absl::string_view text) {
  if (stmt_ != nullptr) sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  return *this;
}
Statement& Statement::BindBlob(int index, absl::string_view bytes) {
  if (stmt_ != nullptr) sqlite3_bind_blob(stmt_, index, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
  return *this;
}

absl::StatusOr<bool> Statement::Step() {
  if (stmt_ == nullptr) return absl::InternalError(absl::StrCat("sqlite: ", sqlite3_errmsg(db_)));
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return absl::InternalError(absl::StrCat("sqlite: ", sqlite3_errmsg(db_)));
}

absl::Status Statement::Run() {
  absl::StatusOr<bool> row;
  do {
    row = Step();
  } while (row.ok() && *row);
  Reset();
  return row.status();
}

int64_t Statement::Int(int column) const { return stmt_ == nullptr ? 0 : sqlite3_column_int64(stmt_, column); }

std::string Statement::Text(int column) const {
  const void* data = stmt_ == nullptr ? nullptr : sqlite3_column_blob(stmt_, column);
  return data == nullptr
             ? ""
             : std::string(static_cast<const char*>(data), static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

void Statement::Reset() {
  if (stmt_ == nullptr) return;  // the prepare failed; Step reports it
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& path, const std::string& schema, bool fsync,
                                                       Applier apply, int64_t segment_bytes) {
  std::unique_ptr<Journal> j(new Journal());
  auto writer = OpenSqlite(path, schema, fsync);
  if (!writer.ok()) return writer.status();
  j->writer_ = *writer;
  auto reader = OpenDb(path);
  if (!reader.ok()) return reader.status();
  j->reader_ = *reader;
  j->apply_ = std::move(apply);
  std::vector<SegmentLog::Segment> left_over;
  std::unique_ptr<SegmentLog> log;
  if (j->apply_) {
    CORRAL_ASSIGN_OR_RETURN(log, SegmentLog::Open(path + "-log", segment_bytes, &left_over));
  }
  j->thread_ = std::thread([raw = j.get()] { raw->Loop(); });
  if (log != nullptr) {
    if (absl::Status replayed = j->Replay(std::move(left_over)); !replayed.ok()) {
      log->Remove(log->current());
      return replayed;
    }
    if (fsync) {
      log->Remove(log->current());  // every change is committed before it is answered: no log
    } else {
      std::lock_guard<std::mutex> lock(j->mu_);
      j->log_ = std::move(log);
    }
  }
  return j;
}

absl::Status Journal::Replay(std::vector<SegmentLog::Segment> segments) {
  size_t records = 0;
  for (const auto& segment : segments) {
    absl::Status failed;  // the segment's first failed write; set on the writer thread, read after the barrier
    for (const std::string& record : segment.records) {
      Submit([this, &record](sqlite3* db) { return apply_(record, db); },
             [&failed](absl::Status s) {
               if (failed.ok()) failed = std::move(s);
             });
    }
    absl::Status committed = Apply([](sqlite3*) { return absl::OkStatus(); });
    if (committed.ok()) committed = failed;
    if (!committed.ok()) {
      return absl::Status(committed.code(), absl::StrCat("replaying journal segment ", segment.path, ": ",
                                                         committed.message(), " (it is kept for the next start)"));
    }
    records += segment.records.size();
  }
  for (const auto& segment : segments) ::unlink(segment.path.c_str());
  if (!segments.empty()) spdlog::info("journal: replayed {} records from {} log segments", records, segments.size());
  return absl::OkStatus();
}

Journal::~Journal() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Everything queued is committed now: the last segment is no longer needed unless a write failed.
  if (log_ != nullptr && !log_damaged_) log_->Remove(log_->current());
  sqlite3_close(reader_);
  sqlite3_close_v2(writer_);  // its cached statements were finalized when the writer thread exited
}

std::optional<absl::Status> Journal::Append(std::string record, Done done) {
  std::optional<absl::Status> answer;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::Status logged;
    std::vector<int64_t> sealed;
    if (log_ != nullptr) {
      logged = log_->Append(record);
      sealed = log_->TakeSealed();
      answer = logged;
      if (logged.ok() && queue_.size() >= kMaxBacklog) {
        // Backpressure: the caller waits for the writer. What is logged stands (a failed apply is replayed at
        // the next start), so the wait ends OK either way.
        answer.reset();
        done = [done = std::move(done)](const absl::Status&) { done(absl::OkStatus()); };
      }
    }
    // A logged write has nobody waiting: wake the writer for the first of a batch (it then gathers more) or a
    // full one, not for each write (a futex wake and a context switch on the other core per call).
    wake = !answer.has_value() || queue_.empty() || queue_.size() + 1 >= kGatherWrites;
    urgent_ = urgent_ || !answer.has_value();
    if (logged.ok()) {
      queue_.emplace_back([this, record = std::move(record)](sqlite3* db) { return apply_(record, db); },
                          answer.has_value() ? nullptr : std::move(done));
    }
    for (int64_t n : sealed) {  // after every record the segment holds
      queue_.emplace_back([](sqlite3*) { return absl::OkStatus(); },
                          [this, n](const absl::Status& s) { SegmentCommitted(n, s); });
    }
  }
  if (wake) cv_.notify_one();
  return answer;
}

void Journal::SegmentCommitted(int64_t number, const absl::Status& status) {
  if (status.ok() && !log_damaged_) {
    log_->Remove(number);
    return;
  }
  spdlog::warn("journal: segment {} is kept, a write in it did not commit; it is replayed at the next start",
               log_->PathOf(number));
}

void Journal::Submit(Write write, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(write), std::move(done));
    urgent_ = true;
  }
  cv_.notify_one();
}

absl::Status Journal::Apply(Write write) {
  std::promise<absl::Status> promise;
  auto future = promise.get_future();
  Submit(std::move(write), [&promise](absl::Status s) { promise.set_value(std::move(s)); });
  return future.get();
}

absl::Status Journal::Read(const std::function<absl::Status(sqlite3* db)>& read) {
  std::lock_guard<std::mutex> lock(read_mu_);
  return read(reader_);
}

int64_t Journal::commits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return commits_;
}

int64_t Journal::writes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writes_;
}

void Journal::Loop() {
  while (true) {
    std::deque<std::pair<Write, Done>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty() && stopping_) return;
      // Only logged writes queued (answered already): let a batch gather before committing it.
      cv_.wait_for(lock, kGatherTime, [this] { return stopping_ || urgent_ || queue_.size() >= kGatherWrites; });
      urgent_ = false;
      batch.swap(queue_);  // everything queued meanwhile: one transaction, one fsync
    }
    std::vector<absl::Status> results(batch.size());
    absl::Status tx = CachedStatement(writer_, "BEGIN IMMEDIATE").Run();
    for (size_t i = 0; i < batch.size() && tx.ok(); ++i) {
      if (sqlite3_get_autocommit(writer_) != 0) {
        // A failed write (disk full, I/O error) made SQLite roll the whole transaction back: nothing of this
        // batch is committed, and the remaining writes must not run outside a transaction.
        tx = absl::InternalError(absl::StrCat("sqlite: the transaction was rolled back: ", sqlite3_errmsg(writer_)));
        break;
      }
      if (batch.size() > 1) CachedStatement(writer_, "SAVEPOINT w").Run().IgnoreError();
      results[i] = batch[i].first(writer_);
      // A failed write is rolled back alone; the others of the batch still commit.
      if (batch.size() > 1) {
        if (!results[i].ok()) CachedStatement(writer_, "ROLLBACK TO w").Run().IgnoreError();
        CachedStatement(writer_, "RELEASE w").Run().IgnoreError();
      }
    }
    if (tx.ok() && sqlite3_get_autocommit(writer_) != 0) {
      tx = absl::InternalError(absl::StrCat("sqlite: the transaction was rolled back: ", sqlite3_errmsg(writer_)));
    } else if (tx.ok() && batch.size() == 1 && !results[0].ok()) {
      CachedStatement(writer_, "ROLLBACK").Run().IgnoreError();  // a lone failed write leaves nothing behind
      tx = absl::OkStatus();
    } else if (tx.ok()) {
      tx = CachedStatement(writer_, "COMMIT").Run();
    }
    if (!tx.ok()) ExecSql(writer_, "ROLLBACK").IgnoreError();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++commits_;
      writes_ += static_cast<int64_t>(batch.size());
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      const absl::Status& status = tx.ok() ? results[i] : tx;
      if (!status.ok()) {
        log_damaged_ = true;  // matters only with a record log: the segments holding it stay for a replay
        if (on_write_failed_) on_write_failed_(status);
      }
      if (batch[i].second) batch[i].second(status);
    }
  }
}

}  // namespace corral
