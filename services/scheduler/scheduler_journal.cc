#include "services/scheduler/scheduler_journal.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "libs/core/logging.h"
#include "libs/core/status_macros.h"
#include "spdlog/spdlog.h"

namespace corral::scheduler {
namespace {

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS batches (
  batch_order INTEGER PRIMARY KEY AUTOINCREMENT,
  batch_id TEXT NOT NULL UNIQUE,
  spec BLOB NOT NULL,
  digest TEXT NOT NULL,
  create_ns INTEGER NOT NULL,
  cancelled INTEGER NOT NULL DEFAULT 0,
  input_closed INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS tasks (
  batch_id TEXT NOT NULL,
  group_index INTEGER NOT NULL,
  task BLOB NOT NULL,
  PRIMARY KEY (batch_id, group_index)
);
CREATE TABLE IF NOT EXISTS runs (
  episode_id TEXT PRIMARY KEY,
  attempt INTEGER NOT NULL,
  runs INTEGER NOT NULL,
  running INTEGER NOT NULL DEFAULT 1,
  host TEXT NOT NULL DEFAULT '',
  sandbox_id TEXT NOT NULL DEFAULT '',
  env_id TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS results (
  seq INTEGER PRIMARY KEY,
  episode_id TEXT NOT NULL UNIQUE,
  status INTEGER NOT NULL,
  reward TEXT NOT NULL,
  redundant INTEGER NOT NULL,
  acked INTEGER NOT NULL DEFAULT 0,
  result BLOB,
  acked_ns INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS leases (
  lease_id TEXT PRIMARY KEY,
  lease BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS templates (
  template_id TEXT PRIMARY KEY,
  record BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS template_files (
  owner TEXT NOT NULL,
  hash TEXT NOT NULL,
  content BLOB NOT NULL,
  time_ns INTEGER NOT NULL,
  PRIMARY KEY (owner, hash)
);
CREATE TABLE IF NOT EXISTS clock_anchor (
  id INTEGER PRIMARY KEY CHECK (id = 0),
  boot_id TEXT NOT NULL,
  at_zero_ns INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS policy (
  id INTEGER PRIMARY KEY CHECK (id = 0),
  version INTEGER NOT NULL,
  paused INTEGER NOT NULL,
  mode INTEGER NOT NULL,
  sequence INTEGER NOT NULL
);
)sql";

// Adds `column` (`definition`) to `table` unless it is there.
absl::Status AddColumn(sqlite3* db, const std::string& table, const std::string& column,
                       const std::string& definition) {
  const std::string count =
      absl::StrCat("SELECT COUNT(*) FROM pragma_table_info('", table, "') WHERE name = '", column, "'");
  Statement columns(db, count.c_str());
  CORRAL_ASSIGN_OR_RETURN(bool row, columns.Step());
  if (row && columns.Int(0) > 0) return absl::OkStatus();
  const std::string alter = absl::StrCat("ALTER TABLE ", table, " ADD COLUMN ", column, " ", definition);
  return Statement(db, alter.c_str()).Run();
}

// Older journals lack acked_ns (before acknowledged results were retained), usage (before episodes were metered)
// and input_closed (before streams).
absl::Status Migrate(sqlite3* db) {
  CORRAL_RETURN_IF_ERROR(AddColumn(db, "results", "acked_ns", "INTEGER NOT NULL DEFAULT 0"));
  CORRAL_RETURN_IF_ERROR(AddColumn(db, "results", "usage", "BLOB"));
  return AddColumn(db, "batches", "input_closed", "INTEGER NOT NULL DEFAULT 0");
}

// A batch's tasks from group index `first` on.
absl::Status InsertTasks(sqlite3* db, const std::string& batch_id, size_t first,
                         const std::vector<std::string>& tasks) {
  Statement t(db, "INSERT INTO tasks (batch_id, group_index, task) VALUES (?, ?, ?)");
  for (size_t g = 0; g < tasks.size(); ++g) {
    CORRAL_RETURN_IF_ERROR(t.Bind(1, batch_id).Bind(2, static_cast<int64_t>(first + g)).BindBlob(3, tasks[g]).Run());
  }
  return absl::OkStatus();
}

std::vector<std::string> Serialized(const std::vector<std::shared_ptr<const v1::Task>>& tasks) {
  std::vector<std::string> out;
  out.reserve(tasks.size());
  for (const auto& t : tasks) out.push_back(t->SerializeAsString());
  return out;
}

void Log(absl::Status s, const char* what) {
  if (!s.ok()) spdlog::error("journal: {}: {}", what, s);
}

// An episode's run row: its attempt and run count (env ids stay unique across restarts), whether it is running;
// its placement is cleared.
absl::Status UpsertRun(sqlite3* db, const std::string& episode_id, uint32_t attempt, uint32_t runs, bool running) {
  return CachedStatement(db,
                         "INSERT INTO runs (episode_id, attempt, runs, running) VALUES (?, ?, ?, ?) "
                         "ON CONFLICT(episode_id) DO UPDATE SET attempt = excluded.attempt, runs = excluded.runs, "
                         "running = excluded.running, host = '', sandbox_id = '', env_id = ''")
      .Bind(1, episode_id)
      .Bind(2, static_cast<int64_t>(attempt))
      .Bind(3, static_cast<int64_t>(runs))
      .Bind(4, static_cast<int64_t>(running ? 1 : 0))
      .Run();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SchedulerJournal>> SchedulerJournal::Open(const std::string& path, bool fsync,
                                                                         absl::Duration result_retention) {
  CORRAL_ASSIGN_OR_RETURN(std::unique_ptr<Journal> j, Journal::Open(path, kSchema, fsync));
  CORRAL_RETURN_IF_ERROR(j->Apply(Migrate));
  return std::unique_ptr<SchedulerJournal>(new SchedulerJournal(std::move(j), result_retention));
}

absl::StatusOr<Snapshot> SchedulerJournal::Load() {
  Snapshot snap;
  CORRAL_RETURN_IF_ERROR(journal_->Read([&](sqlite3* db) -> absl::Status {
    std::map<std::string, size_t> index;
    Statement batches(db,
                      "SELECT batch_id, spec, digest, create_ns, cancelled, input_closed FROM batches "
                      "ORDER BY batch_order");
    while (true) {
      CORRAL_ASSIGN_OR_RETURN(bool row, batches.Step());
      if (!row) break;
      Snapshot::BatchRow b;
      if (!b.spec.ParseFromString(batches.Text(1))) return absl::DataLossError("a journaled batch spec is corrupt");
      b.digest = batches.Text(2);
      b.create_time = absl::FromUnixNanos(batches.Int(3));
      b.cancelled = batches.Int(4) != 0;
      b.input_closed = batches.Int(5) != 0;
      index[batches.Text(0)] = snap.batches.size();
      snap.batches.push_back(std::move(b));
    }
    Statement tasks(db, "SELECT batch_id, group_index, task FROM tasks ORDER BY batch_id, group_index");
    while (true) {
      CORRAL_ASSIGN_OR_RETURN(bool row, tasks.Step());
      if (!row) break;
      auto it = index.find(tasks.Text(0));
      if (it == index.end()) continue;
      auto task = std::make_shared<v1::Task>();
      if (!task->ParseFromString(tasks.Text(2))) return absl::DataLossError("a journaled task is corrupt");
      auto& list = snap.batches[it->second].tasks;
      if (static_cast<int64_t>(list.size()) != tasks.Int(1)) return absl::DataLossError("journaled tasks have gaps");
      list.push_back(std::move(task));
    }
    Statement runs(db, "SELECT episode_id, attempt, runs, running, host, sandbox_id, env_id FROM runs");
    while (true) {
      CORRAL_ASSIGN_OR_RETURN(bool row, runs.Step());
      if (!row) break;
      Snapshot::RunRow r;
      r.episode_id = runs.Text(0);
      r.attempt = static_cast<uint32_t>(runs.Int(1));
      r.runs = static_cast<uint32_t>(runs.Int(2));
      r.running = runs.Int(3) != 0;
      if (r.running) {
        r.host = runs.Text(4);
        r.sandbox_id = runs.Text(5);
        r.env_id = runs.Text(6);
      }
      snap.runs.push_back(std::move(r));
    }
    // Acknowledged results stay on disk for the inspector only: they are not read back into memory (their usage
    // is: the batch's totals).
    Statement results(db,
                      "SELECT seq, episode_id, status, reward, redundant, acked, CASE WHEN acked = 0 THEN result END, "
                      "usage FROM results ORDER BY seq");
    while (true) {
      CORRAL_ASSIGN_OR_RETURN(bool row, results.Step());
      if (!row) break;
      Snapshot::ResultRow r;
      r.seq = static_cast<uint64_t>(results.Int(0));
      r.episode_id = results.Text(1);
      r.status = static_cast<v1::EpisodeStatus>(results.Int(2));
      double reward;
      if (absl::SimpleAtod(results.Text(3), &reward)) r.reward = reward;
      r.redundant = results.Int(4) != 0;
      r.acked = results.Int(5) != 0;
      r.result = results.Text(6);
      r.usage = results.Text(7);
      snap.results.push_back(std::move(r));
    }
    return absl::OkStatus();
  }));
  return snap;
}

void SchedulerJournal::AddBatch(const v1::BatchSpec& spec, const std::string& digest, absl::Time create_time,
                                const std::vector<std::shared_ptr<const v1::Task>>& tasks,
                                std::function<void(absl::Status)> done) {
  auto spec_bytes = spec.SerializeAsString();
  journal_->Submit(
      [id = spec.batch_id(), spec_bytes = std::move(spec_bytes), digest, create_time,
       task_bytes = Serialized(tasks)](sqlite3* db) -> absl::Status {
        Statement b(db, "INSERT INTO batches (batch_id, spec, digest, create_ns) VALUES (?, ?, ?, ?)");
        CORRAL_RETURN_IF_ERROR(
            b.Bind(1, id).BindBlob(2, spec_bytes).Bind(3, digest).Bind(4, absl::ToUnixNanos(create_time)).Run());
        return InsertTasks(db, id, 0, task_bytes);
      },
      std::move(done));
}

void SchedulerJournal::TasksAppended(const std::string& batch_id, uint32_t first,
                                     const std::vector<std::shared_ptr<const v1::Task>>& tasks, bool close_input,
                                     std::function<void(absl::Status)> done) {
  journal_->Submit(
      [batch_id, first, close_input, task_bytes = Serialized(tasks)](sqlite3* db) -> absl::Status {
        CORRAL_RETURN_IF_ERROR(InsertTasks(db, batch_id, first, task_bytes));
        if (!close_input) return absl::OkStatus();
        return CachedStatement(db, "UPDATE batches SET input_closed = 1 WHERE batch_id = ?").Bind(1, batch_id).Run();
      },
      std::move(done));
}

void SchedulerJournal::RunStarted(const std::string& episode_id, uint32_t attempt, uint32_t runs) {
  journal_->Submit([=](sqlite3* db) { return UpsertRun(db, episode_id, attempt, runs, true); },
                   [](absl::Status s) { Log(s, "run start"); });
}

void SchedulerJournal::RunPlaced(const std::string& episode_id, const std::string& host, const std::string& sandbox_id,
                                 const std::string& env_id) {
  journal_->Submit(
      [=](sqlite3* db) {
        return CachedStatement(db, "UPDATE runs SET host = ?, sandbox_id = ?, env_id = ? WHERE episode_id = ?")
            .Bind(1, host)
            .Bind(2, sandbox_id)
            .Bind(3, env_id)
            .Bind(4, episode_id)
            .Run();
      },
      [](absl::Status s) { Log(s, "run placement"); });
}

void SchedulerJournal::RunEnded(const std::string& episode_id, uint32_t next_attempt) {
  journal_->Submit(
      [=](sqlite3* db) {
        return CachedStatement(db, "UPDATE runs SET running = 0, attempt = ? WHERE episode_id = ?")
            .Bind(1, static_cast<int64_t>(next_attempt))
            .Bind(2, episode_id)
            .Run();
      },
      [](absl::Status s) { Log(s, "run end"); });
}

void SchedulerJournal::ResultWithdrawn(uint64_t seq, const std::string& episode_id, uint32_t attempt, uint32_t runs) {
  journal_->Submit(
      [=](sqlite3* db) -> absl::Status {
        CORRAL_RETURN_IF_ERROR(
            CachedStatement(db, "DELETE FROM results WHERE seq = ?").Bind(1, static_cast<int64_t>(seq)).Run());
        return UpsertRun(db, episode_id, attempt, runs, false);  // not running: queued again on a restart
      },
      [](absl::Status s) { Log(s, "result withdrawal"); });
}

void SchedulerJournal::AddResult(uint64_t seq, const v1::EpisodeResult& result, bool redundant,
                                 std::function<void(absl::Status)> done) {
  journal_->Submit(
      [seq, id = result.ids().episode_id(), status = static_cast<int64_t>(result.status()),
       reward = result.has_reward() ? absl::StrCat(result.reward()) : std::string(), redundant,
       bytes = result.SerializeAsString(), usage = result.usage().SerializeAsString()](sqlite3* db) -> absl::Status {
        CORRAL_RETURN_IF_ERROR(
            CachedStatement(
                db,
                "INSERT OR REPLACE INTO results (seq, episode_id, status, reward, redundant, result, usage) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)")
                .Bind(1, static_cast<int64_t>(seq))
                .Bind(2, id)
                .Bind(3, status)
                .Bind(4, reward)
                .Bind(5, redundant ? 1 : 0)
                .BindBlob(6, bytes)
                .BindBlob(7, usage)
                .Run());
        return CachedStatement(db, "DELETE FROM runs WHERE episode_id = ?").Bind(1, id).Run();
      },
      std::move(done));
}

void SchedulerJournal::Acked(const std::vector<std::string>& episode_ids, std::function<void(absl::Status)> done) {
  const bool keep = result_retention_ > absl::ZeroDuration();
  journal_->Submit(
      [episode_ids, keep, now = absl::ToUnixNanos(absl::Now())](sqlite3* db) -> absl::Status {
        for (const auto& id : episode_ids) {
          CORRAL_RETURN_IF_ERROR(CachedStatement(db,
                                                 "UPDATE results SET acked = 1, acked_ns = ?, "
                                                 "result = CASE WHEN ? THEN result END WHERE episode_id = ?")
                                     .Bind(1, now)
                                     .Bind(2, int64_t{keep ? 1 : 0})
                                     .Bind(3, id)
                                     .Run());
        }
        return absl::OkStatus();
      },
      [done = std::move(done)](absl::Status s) {
        Log(s, "ack");
        done(s);
      });
}

void SchedulerJournal::BatchCancelled(const std::string& batch_id) {
  journal_->Submit(
      [batch_id](sqlite3* db) {
        return CachedStatement(db, "UPDATE batches SET cancelled = 1 WHERE batch_id = ?").Bind(1, batch_id).Run();
      },
      [](absl::Status s) { Log(s, "batch cancel"); });
}

void SchedulerJournal::SavePolicy(const PolicyState& state, std::function<void(absl::Status)> done) {
  journal_->Submit(
      [state](sqlite3* db) {
        return CachedStatement(db,
                               "INSERT OR REPLACE INTO policy (id, version, paused, mode, sequence) "
                               "VALUES (0, ?, ?, ?, ?)")
            .Bind(1, state.version)
            .Bind(2, state.paused ? 1 : 0)
            .Bind(3, static_cast<int64_t>(state.mode))
            .Bind(4, static_cast<int64_t>(state.sequence))
            .Run();
      },
      std::move(done));
}

absl::StatusOr<PolicyState> SchedulerJournal::LoadPolicy() {
  PolicyState state;
  CORRAL_RETURN_IF_ERROR(journal_->Read([&](sqlite3* db) -> absl::Status {
    Statement row(db, "SELECT version, paused, mode, sequence FROM policy WHERE id = 0");
    CORRAL_ASSIGN_OR_RETURN(bool found, row.Step());
    if (!found) return absl::OkStatus();
    state.version = row.Int(0);
    state.paused = row.Int(1) != 0;
    state.mode = v1::PauseMode_IsValid(static_cast<int>(row.Int(2))) ? static_cast<v1::PauseMode>(row.Int(2))
                                                                     : v1::PAUSE_MODE_DRAIN;
    state.sequence = static_cast<uint64_t>(row.Int(3));
    return absl::OkStatus();
  }));
  return state;
}

absl::StatusOr<absl::Duration> SchedulerJournal::AdoptClock(const ClockAnchor& current) {
  ClockAnchor base = current;
  CORRAL_RETURN_IF_ERROR(journal_->Apply([&](sqlite3* db) -> absl::Status {
    Statement row(db, "SELECT boot_id, at_zero_ns FROM clock_anchor WHERE id = 0");
    CORRAL_ASSIGN_OR_RETURN(bool found, row.Step());
    if (found && row.Text(0) == current.boot_id && !current.boot_id.empty()) {
      base = ClockAnchor{row.Text(0), absl::FromUnixNanos(row.Int(1))};
      return absl::OkStatus();
    }
    return Statement(db, "INSERT OR REPLACE INTO clock_anchor (id, boot_id, at_zero_ns) VALUES (0, ?, ?)")
        .Bind(1, current.boot_id)
        .Bind(2, absl::ToUnixNanos(current.at_zero))
        .Run();
  }));
  clock_shift_ = current.at_zero - base.at_zero;
  return clock_shift_;
}

namespace {

// A lease with its times moved by `by` (between the journal's time base and this process's time).
v1::SandboxLease Moved(v1::SandboxLease lease, absl::Duration by) {
  if (by == absl::ZeroDuration()) return lease;
  ToProto(FromProto(lease.create_time()) + by, lease.mutable_create_time());
  ToProto(FromProto(lease.expire_time()) + by, lease.mutable_expire_time());
  return lease;
}

}  // namespace

absl::StatusOr<int64_t> SchedulerJournal::DropAckedBefore(absl::Time before) {
  int64_t dropped = 0;
  const absl::Status s = journal_->Apply([&](sqlite3* db) -> absl::Status {
    CORRAL_RETURN_IF_ERROR(Statement(db,
                                     "UPDATE results SET result = NULL "
                                     "WHERE acked = 1 AND result IS NOT NULL AND acked_ns < ?")
                               .Bind(1, absl::ToUnixNanos(before))
                               .Run());
    dropped = sqlite3_changes(db);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return dropped;
}

absl::StatusOr<std::string> SchedulerJournal::AckedResult(const std::string& episode_id) {
  std::string bytes;
  bool found = false;
  const absl::Status s = journal_->Read([&](sqlite3* db) -> absl::Status {
    Statement st(db, "SELECT result FROM results WHERE episode_id = ? AND acked = 1 AND result IS NOT NULL");
    st.Bind(1, episode_id);
    CORRAL_ASSIGN_OR_RETURN(found, st.Step());
    if (found) bytes = st.Text(0);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (!found) {
    return absl::NotFoundError(absl::StrCat(
        "episode '", episode_id, "' has no retained result (acknowledged longer ago than result_retention)"));
  }
  return bytes;
}

void SchedulerJournal::SaveLease(const v1::SandboxLease& lease, std::function<void(absl::Status)> done) {
  journal_->Submit(
      [id = lease.lease_id(), bytes = Moved(lease, -clock_shift_).SerializeAsString()](sqlite3* db) {
        return CachedStatement(db, "INSERT OR REPLACE INTO leases (lease_id, lease) VALUES (?, ?)")
            .Bind(1, id)
            .BindBlob(2, bytes)
            .Run();
      },
      std::move(done));
}

void SchedulerJournal::DropLease(const std::string& lease_id) {
  journal_->Submit(
      [lease_id](sqlite3* db) {
        return CachedStatement(db, "DELETE FROM leases WHERE lease_id = ?").Bind(1, lease_id).Run();
      },
      [](absl::Status s) { Log(s, "lease removal"); });
}

absl::StatusOr<std::vector<v1::SandboxLease>> SchedulerJournal::LoadLeases() {
  std::vector<v1::SandboxLease> leases;
  CORRAL_RETURN_IF_ERROR(journal_->Read([&](sqlite3* db) -> absl::Status {
    Statement rows(db, "SELECT lease FROM leases ORDER BY lease_id");
    for (;;) {
      CORRAL_ASSIGN_OR_RETURN(bool found, rows.Step());
      if (!found) return absl::OkStatus();
      if (!leases.emplace_back().ParseFromString(rows.Text(0))) {
        return absl::DataLossError("a journaled sandbox lease is corrupt");
      }
      leases.back() = Moved(std::move(leases.back()), clock_shift_);
    }
  }));
  return leases;
}

void SchedulerJournal::ForgetRuns() {
  Log(journal_->Apply([](sqlite3* db) {
    Statement st(db, "UPDATE runs SET running = 0, host = '', sandbox_id = '', env_id = ''");
    return st.Run();
  }),
      "forget runs");
}

}  // namespace corral::scheduler
