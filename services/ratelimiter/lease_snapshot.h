// The ratelimiter's durable record of held leases (`state_path`): a Journal (libs/journal) with its record log.
// Every concurrency grant is logged before its holder hears of it and every end at once, so a limiter restarted on
// the same file knows what is held and grants again at once — no learning mode. A change is one record appended
// to the log with one write() on the limiter's thread; the journal's writer thread applies the records to the
// SQLite file in batches, and a restart replays what it had not applied. A kill -9 loses nothing; a crash of the
// operating system may lose the last writes (then restart with `learning_mode` and a fresh file to be safe).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "libs/core/unique_fd.h"
#include "libs/journal/journal.h"
#include "prometheus/counter.h"
#include "services/ratelimiter/limiter.h"

namespace corral::ratelimiter {

class LeaseSnapshot : public LeaseStore {
 public:
  struct Contents {
    std::vector<StoredLease> leases;
    absl::Time last_alive = absl::InfinitePast();  // the previous limiter's last heartbeat
    uint64_t fencing_high_water = 0;               // the largest fencing token ever granted on this file
  };

  // Opens (creating) the file and locks it (`<path>.lock`): FAILED_PRECONDITION while another process holds it.
  // `write_errors` (optional) counts failed writes; each is also logged.
  static absl::StatusOr<std::unique_ptr<LeaseSnapshot>> Open(const std::string& path,
                                                             prometheus::Counter* write_errors = nullptr);
  ~LeaseSnapshot() override;
  LeaseSnapshot(const LeaseSnapshot&) = delete;
  LeaseSnapshot& operator=(const LeaseSnapshot&) = delete;

  // What the previous limiter left: INTERNAL when the file cannot be read.
  absl::StatusOr<Contents> Load();

  // True when a snapshot was expected at `path` but is gone: the file is missing while its change log
  // (`<path>-log.N`) is there. Replaying only the log would under-count what is held, so the limiter learns.
  static bool MissingWhereExpected(const std::string& path);

  absl::Status Held(const StoredLease& lease) override;
  void Ended(const std::string& lease_id) override;
  void Alive(absl::Time now) override;

 private:
  LeaseSnapshot(std::unique_ptr<Journal> journal, std::string path, prometheus::Counter* write_errors);
  // Logs one change; a failure is counted, logged and returned (the change is then unknown to a restart).
  absl::Status Append(std::string record, const char* what);
  void Failed(const absl::Status& status, const char* what);

  const std::string path_;
  prometheus::Counter* const write_errors_;
  std::atomic<int64_t> logged_errors_ = 0;  // from the limiter's thread and the journal's writer
  UniqueFd lock_;                           // flock'ed for as long as this snapshot is open
  // Last, so it is destroyed first: while it drains its queue its writer may still report failures (Failed).
  const std::unique_ptr<Journal> journal_;
};

}  // namespace corral::ratelimiter
