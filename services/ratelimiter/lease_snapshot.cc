#include "services/ratelimiter/lease_snapshot.h"

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "libs/core/logging.h"
#include "libs/core/status_macros.h"
#include "libs/journal/record_fields.h"
#include "services/ratelimiter/lease_id.h"
#include "spdlog/spdlog.h"

namespace corral::ratelimiter {
namespace {

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS leases (id TEXT PRIMARY KEY, ttl_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
)sql";
constexpr int64_t kLoggedErrorsMax = 20;  // then only the metric counts them

// A change is one record: a kind byte, a 64-bit value (the TTL in ms, the heartbeat's Unix ms; 0 for an end)
// and the lease id (empty for a heartbeat).
enum class Kind : char { kHeld = 'H', kEnded = 'E', kAlive = 'A' };

std::string Record(Kind kind, int64_t value, absl::string_view lease_id) {
  std::string out;
  out.reserve(1 + 8 + 8 + lease_id.size());
  out.push_back(static_cast<char>(kind));
  PutRecordU64(out, static_cast<uint64_t>(value));
  PutRecordField(out, lease_id);
  return out;
}

// Idempotent: replaying the log in order over a file that already holds some of its changes gives the same file.
absl::Status ApplyRecord(absl::string_view record, sqlite3* db) {
  if (record.empty()) return absl::DataLossError("an empty lease snapshot record");
  RecordReader f(record.substr(1));
  const int64_t value = static_cast<int64_t>(f.U64());
  const absl::string_view id = f.Field();
  if (!f.ok() || !f.empty()) return absl::DataLossError("a malformed lease snapshot record");
  switch (static_cast<Kind>(record[0])) {
    case Kind::kHeld: {
      // The largest fencing token ever granted outlives its lease: a restart grants larger ones still.
      absl::StatusOr<LeaseClaim> claim = ReadStoredLeaseId(std::string(id));
      if (claim.ok() && claim->fencing_token > 0) {
        CORRAL_RETURN_IF_ERROR(CachedStatement(db,
                                               "INSERT INTO meta (name, value) VALUES ('fencing_high_water', ?1) "
                                               "ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)")
                                   .Bind(1, static_cast<int64_t>(claim->fencing_token))
                                   .Run());
      }
      return CachedStatement(db, "INSERT OR REPLACE INTO leases (id, ttl_ms) VALUES (?1, ?2)")
          .Bind(1, id)
          .Bind(2, value)
          .Run();
    }
    case Kind::kEnded: return CachedStatement(db, "DELETE FROM leases WHERE id = ?1").Bind(1, id).Run();
    case Kind::kAlive:
      return CachedStatement(db, "INSERT OR REPLACE INTO meta (name, value) VALUES ('last_alive_ms', ?1)")
          .Bind(1, value)
          .Run();
  }
  return absl::DataLossError("a lease snapshot record of unknown kind");
}

}  // namespace

absl::StatusOr<std::unique_ptr<LeaseSnapshot>> LeaseSnapshot::Open(const std::string& path,
                                                                   prometheus::Counter* write_errors) {
  // Two limiters on one file would each believe they own every lease in it. The lock is a file of its own:
  // closing any descriptor of the SQLite file would drop SQLite's own POSIX locks.
  const std::string lock_path = path + ".lock";
  UniqueFd lock(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid()) {
    return absl::UnavailableError(absl::StrCat("lease snapshot: cannot open ", lock_path, ": ", strerror(errno)));
  }
  if (flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease snapshot ", path,
                     " is in use by another process (another corral-ratelimiter on the same "
                     "state_path?); give each limiter its own state_path"));
  }
  // What must survive is a crash of the process, not of the machine: no fsync; the record log covers a kill -9.
  auto journal = Journal::Open(path, kSchema, /*fsync=*/false, ApplyRecord);
  if (!journal.ok()) {
    return absl::Status(journal.status().code(), absl::StrCat("lease snapshot: ", journal.status().message()));
  }
  std::unique_ptr<LeaseSnapshot> snapshot(new LeaseSnapshot(*std::move(journal), path, write_errors));
  snapshot->lock_ = std::move(lock);
  snapshot->journal_->OnWriteFailed(
      [s = snapshot.get()](const absl::Status& status) { s->Failed(status, "apply a change to the file"); });
  return snapshot;
}

LeaseSnapshot::LeaseSnapshot(std::unique_ptr<Journal> journal, std::string path, prometheus::Counter* write_errors)
    : path_(std::move(path)), write_errors_(write_errors), journal_(std::move(journal)) {}

LeaseSnapshot::~LeaseSnapshot() = default;  // the journal applies what is logged, then closes

absl::StatusOr<LeaseSnapshot::Contents> LeaseSnapshot::Load() {
  Contents contents;
  absl::Status read = journal_->Read([&](sqlite3* db) -> absl::Status {
    Statement leases(db, "SELECT id, ttl_ms FROM leases");
    absl::StatusOr<bool> row;
    while ((row = leases.Step()).ok() && *row) {
      contents.leases.push_back({leases.Text(0), absl::Milliseconds(leases.Int(1))});
    }
    if (!row.ok()) return row.status();
    Statement alive(db, "SELECT value FROM meta WHERE name = 'last_alive_ms'");
    row = alive.Step();
    if (!row.ok()) return row.status();
    if (*row) contents.last_alive = absl::FromUnixMillis(alive.Int(0));
    Statement fencing(db, "SELECT value FROM meta WHERE name = 'fencing_high_water'");
    row = fencing.Step();
    if (!row.ok()) return row.status();
    if (*row) contents.fencing_high_water = static_cast<uint64_t>(fencing.Int(0));
    return absl::OkStatus();
  });
  if (!read.ok()) return absl::InternalError(absl::StrCat("cannot read lease snapshot ", path_, ": ", read.message()));
  return contents;
}

bool LeaseSnapshot::MissingWhereExpected(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path file(path);
  if (std::filesystem::exists(file, ec)) return false;
  const std::string log_prefix = file.filename().string() + "-log.";
  for (const auto& entry :
       std::filesystem::directory_iterator(file.parent_path().empty() ? "." : file.parent_path(), ec)) {
    if (absl::StartsWith(entry.path().filename().string(), log_prefix)) return true;
  }
  return false;
}

void LeaseSnapshot::Failed(const absl::Status& status, const char* what) {
  if (write_errors_ != nullptr) write_errors_->Increment();
  if (++logged_errors_ <= kLoggedErrorsMax) {
    spdlog::error("lease snapshot {}: cannot {}: {}", path_, what, status);
  }
}

absl::Status LeaseSnapshot::Append(std::string record, const char* what) {
  // Answered once logged. Far behind, the journal would have the caller wait for its commits (nullopt); the
  // limiter calls this under its lock and cannot wait, and the record is in the log either way, so it goes on.
  std::optional<absl::Status> logged = journal_->Append(std::move(record), [](const absl::Status&) {});
  if (!logged.has_value() || logged->ok()) return absl::OkStatus();
  Failed(*logged, what);
  return *logged;
}

absl::Status LeaseSnapshot::Held(const StoredLease& lease) {
  return Append(Record(Kind::kHeld, absl::ToInt64Milliseconds(lease.ttl), lease.id), "record a lease");
}

// Erased at once too: a released lease left in the file would hold its permits for a TTL after a restart (an
// erase that cannot be logged only costs that: the lease is counted until then, never granted twice).
void LeaseSnapshot::Ended(const std::string& lease_id) {
  (void)Append(Record(Kind::kEnded, 0, lease_id), "erase a lease");
}

void LeaseSnapshot::Alive(absl::Time now) {
  (void)Append(Record(Kind::kAlive, absl::ToUnixMillis(now), ""), "record the heartbeat");
}

}  // namespace corral::ratelimiter
