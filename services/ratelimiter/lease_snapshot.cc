#include "services/ratelimiter/lease_snapshot.h"

#include "absl/strings/str_cat.h"
#include "libs/core/logging.h"
#include "spdlog/spdlog.h"

namespace corral::ratelimiter {
namespace {

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS leases (id TEXT PRIMARY KEY, ttl_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
)sql";
constexpr int64_t kLoggedErrorsMax = 20;  // then only the metric counts them

}  // namespace

absl::StatusOr<std::unique_ptr<LeaseSnapshot>> LeaseSnapshot::Open(const std::string& path,
                                                                   prometheus::Counter* write_errors) {
  auto db = OpenSqlite(path, kSchema, /*fsync=*/false);
  if (!db.ok()) return absl::Status(db.status().code(), absl::StrCat("lease snapshot: ", db.status().message()));
  // Only this process uses the file, and what must survive is a crash of the process, not of the machine: no
  // fsync (not even at checkpoints) and no shared-memory locking per transaction.
  for (const char* pragma : {"PRAGMA synchronous=OFF", "PRAGMA locking_mode=EXCLUSIVE"}) {
    if (auto s = ExecSql(*db, pragma); !s.ok()) {
      sqlite3_close(*db);
      return absl::Status(s.code(), absl::StrCat("lease snapshot: ", s.message()));
    }
  }
  return std::unique_ptr<LeaseSnapshot>(new LeaseSnapshot(*db, path, write_errors));
}

LeaseSnapshot::LeaseSnapshot(sqlite3* db, std::string path, prometheus::Counter* write_errors)
    : db_(db),
      path_(std::move(path)),
      write_errors_(write_errors),
      put_(db, "INSERT OR REPLACE INTO leases (id, ttl_ms) VALUES (?1, ?2)"),
      erase_(db, "DELETE FROM leases WHERE id = ?1"),
      alive_(db, "INSERT OR REPLACE INTO meta (name, value) VALUES ('last_alive_ms', ?1)") {}

// close_v2: the connection really closes once the member statements are finalized, right after this body.
LeaseSnapshot::~LeaseSnapshot() { sqlite3_close_v2(db_); }

absl::StatusOr<LeaseSnapshot::Contents> LeaseSnapshot::Load() {
  Contents contents;
  Statement leases(db_, "SELECT id, ttl_ms FROM leases");
  absl::StatusOr<bool> row;
  while ((row = leases.Step()).ok() && *row) {
    contents.leases.push_back({leases.Text(0), absl::Milliseconds(leases.Int(1))});
  }
  if (!row.ok()) return absl::InternalError(absl::StrCat("cannot read lease snapshot ", path_, ": ", row.status().message()));
  Statement alive(db_, "SELECT value FROM meta WHERE name = 'last_alive_ms'");
  row = alive.Step();
  if (!row.ok()) return absl::InternalError(absl::StrCat("cannot read lease snapshot ", path_, ": ", row.status().message()));
  if (*row) contents.last_alive = absl::FromUnixMillis(alive.Int(0));
  return contents;
}

void LeaseSnapshot::Check(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  if (write_errors_ != nullptr) write_errors_->Increment();
  if (++logged_errors_ <= kLoggedErrorsMax) {
    spdlog::error("lease snapshot {}: cannot {}: {}; a restart will not know this change", path_, what, status);
  }
}

void LeaseSnapshot::Held(const StoredLease& lease) {
  Check(put_.Bind(1, lease.id).Bind(2, absl::ToInt64Milliseconds(lease.ttl)).Run(), "record a lease");
}

// Erased at once too: a released lease left in the file would hold its permits for a TTL after a restart.
void LeaseSnapshot::Ended(const std::string& lease_id) { Check(erase_.Bind(1, lease_id).Run(), "erase a lease"); }

void LeaseSnapshot::Alive(absl::Time now) {
  Check(alive_.Bind(1, absl::ToUnixMillis(now)).Run(), "record the heartbeat");
}

}  // namespace corral::ratelimiter
