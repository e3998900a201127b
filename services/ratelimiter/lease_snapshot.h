// The ratelimiter's durable record of held leases (`state_path`): one SQLite file in WAL mode. Every concurrency
// grant is written before its holder hears of it and every end is erased at once, so a limiter restarted on the
// same file knows what is held and grants again at once — no learning mode. Writes are synchronous on the limiter's thread and
// cost microseconds (WAL, exclusive lock, no fsync), so a kill -9 loses nothing; a crash of the operating system
// may lose the last writes (then restart with `learning_mode` and a fresh file to be safe).
#pragma once

#include <sqlite3.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "libs/journal/journal.h"
#include "prometheus/counter.h"
#include "services/ratelimiter/limiter.h"

namespace corral::ratelimiter {

class LeaseSnapshot : public LeaseStore {
 public:
  struct Contents {
    std::vector<StoredLease> leases;
    absl::Time last_alive = absl::InfinitePast();  // the previous limiter's last heartbeat
  };

  // Opens (creating) the file. `write_errors` (optional) counts failed writes; each is also logged.
  static absl::StatusOr<std::unique_ptr<LeaseSnapshot>> Open(const std::string& path,
                                                             prometheus::Counter* write_errors = nullptr);
  ~LeaseSnapshot() override;
  LeaseSnapshot(const LeaseSnapshot&) = delete;
  LeaseSnapshot& operator=(const LeaseSnapshot&) = delete;

  // What the previous limiter left: INTERNAL when the file cannot be read.
  absl::StatusOr<Contents> Load();

  void Held(const StoredLease& lease) override;
  void Ended(const std::string& lease_id) override;
  void Alive(absl::Time now) override;

 private:
  LeaseSnapshot(sqlite3* db, std::string path, prometheus::Counter* write_errors);
  void Check(const absl::Status& status, const char* what);

  sqlite3* const db_;
  const std::string path_;
  prometheus::Counter* const write_errors_;
  Statement put_, erase_, alive_;
  int64_t logged_errors_ = 0;
};

}  // namespace corral::ratelimiter
