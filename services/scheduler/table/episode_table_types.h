// What the episode table (episode_table.h) exchanges with the rest of the scheduler: the log it makes durable
// through and the snapshot it restarts from, the tickets it hands the driver, the observer and hooks that hear
// of its changes, and the rows its result streams and inspector read. Plain data and interfaces.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "corral/v1/scheduler.pb.h"
#include "services/scheduler/table/branch_plan.h"
#include "services/scheduler/table/run_control.h"

namespace corral::scheduler {

// What must become durable, in order. Implemented over SQLite (SchedulerJournal) and in memory in tests.
// The table calls it while holding its lock: a `done` callback must run later (on the journal's writer thread),
// never inside the call.
class EpisodeLog {
 public:
  virtual ~EpisodeLog() = default;
  // `done` runs once the batch (spec and tasks) is durable, or failed to be.
  virtual void AddBatch(const v1::BatchSpec& spec, const std::string& digest, absl::Time create_time,
                        const std::vector<std::shared_ptr<const v1::Task>>& tasks,
                        std::function<void(absl::Status)> done) = 0;
  // An attempt started (or was placed): what a restarted scheduler must clean up.
  virtual void RunStarted(const std::string& episode_id, uint32_t attempt, uint32_t runs) = 0;
  virtual void RunPlaced(const std::string& episode_id, const std::string& host, const std::string& sandbox_id,
                         const std::string& env_id) = 0;
  // The episode went back to the queue without a result (drain, retry).
  virtual void RunEnded(const std::string& episode_id, uint32_t next_attempt) = 0;
  // A final result; `done` once durable. The same seq again replaces the result (a group decision rewrites its
  // results FILTERED, or redundant for a surplus group).
  virtual void AddResult(uint64_t seq, const v1::EpisodeResult& result, bool redundant,
                         std::function<void(absl::Status)> done) = 0;
  // An undelivered result was withdrawn (too stale): the episode is queued again, at `attempt` after `runs` runs.
  virtual void ResultWithdrawn(uint64_t seq, const std::string& episode_id, uint32_t attempt, uint32_t runs) = 0;
  // Acknowledgements; `done` once durable (Ack replies only then: an acknowledged result never comes back).
  virtual void Acked(const std::vector<std::string>& episode_ids, std::function<void(absl::Status)> done) = 0;
  virtual void BatchCancelled(const std::string& batch_id) = 0;
  // A stream's tasks from group index `first` on, and/or its input closed; `done` once durable.
  virtual void TasksAppended(const std::string& batch_id, uint32_t first,
                             const std::vector<std::shared_ptr<const v1::Task>>& tasks, bool close_input,
                             std::function<void(absl::Status)> done) = 0;
};

// What a restarted scheduler reads back from its journal.
struct Snapshot {
  struct BatchRow {
    v1::BatchSpec spec;
    std::string digest;
    absl::Time create_time;
    bool cancelled = false;
    bool input_closed = false;  // a stream's input was closed
    std::vector<std::shared_ptr<const v1::Task>> tasks;
  };
  struct ResultRow {
    uint64_t seq = 0;
    std::string episode_id;
    v1::EpisodeStatus status = v1::EPISODE_STATUS_UNSPECIFIED;
    std::optional<double> reward;
    bool redundant = false;
    bool acked = false;
    std::string result;  // serialized EpisodeResult; empty once acked
    std::string usage;   // serialized EpisodeUsage (kept once acked: the batch's totals)
  };
  struct RunRow {
    std::string episode_id;
    uint32_t attempt = 1;
    uint32_t runs = 0;
    bool running = false;  // the attempt was running when the journal last heard of it
    std::string host, sandbox_id, env_id;
  };
  std::vector<BatchRow> batches;  // in submission order
  std::vector<ResultRow> results;
  std::vector<RunRow> runs;
};

// One episode ready to run, handed to the driver.
struct EpisodeTicket {
  v1::EpisodeIds ids;  // attempt set
  std::shared_ptr<const v1::Task> task;
  std::shared_ptr<RunControl> control;
  std::string env_id;  // "<episode_id>:r<runs>": unique per run
  absl::Time queued_since;
  std::optional<absl::Time> batch_deadline;
  uint32_t max_attempts = 1;
  std::optional<BranchPlan> branch_plan;  // Task.branch: the group's tree
  std::string tenant;                     // BatchSpec.tenant: whose usage it is
};

// What the table reports as it happens, for metrics. Called under the table's lock: must not call back into it.
class TableObserver {
 public:
  virtual ~TableObserver() = default;
  // A group was decided: "passed", "filtered", "dropped" or "surplus" (a group re-run for staleness counts again).
  virtual void GroupDecided(const char* outcome) = 0;
  // An episode runs again because its result was too stale.
  virtual void StaleRerun() = 0;
  // A result was first sent to a trainer, `staleness` policy versions behind the current one (its first version).
  virtual void Delivered(int64_t staleness) = 0;
};

// Who hears of the table's changes. Neither hears what Restore replays.
struct TableHooks {
  // Called outside the lock after results become deliverable or batches end: wakes the result streams.
  std::function<void()> on_change;
  // Metrics; called under the lock.
  TableObserver* observer = nullptr;
  // A trainer-driven environment episode's result (EnvServerSpec.trainer_driven) is journaled: its trainer may
  // take it (CloseEnvironment). Called outside the lock, once per result, however the episode ended (a run, a
  // cancel while queued, the batch deadline).
  std::function<void(const v1::EpisodeResult&)> on_driven_result;
};

// What Finish decided.
enum class FinishOutcome { kRecorded, kRetried, kRequeued, kDropped };

// A result a stream may send (EpisodeTable::Deliverable): its position, the serialized EpisodeResult.
struct TableDelivery {
  uint64_t position = 0;
  std::string result;  // serialized EpisodeResult
  std::string episode_id;
};
struct TableDeliveryPage {
  std::vector<TableDelivery> items;  // in delivery order
  // The lowest position > after, not in `sent` and not among `items`, that has or may get a result to send
  // (held, uncommitted, or left for the next page); UINT64_MAX when none. Every position below it is sent
  // once `items` are.
  uint64_t blocked_at = UINT64_MAX;
};

// One episode as the rollout inspector lists it (EpisodeTable::Episodes).
struct TableEpisodeRow {
  std::string episode_id;
  std::shared_ptr<const v1::Task> task;
  uint32_t group_index = 0, index_in_group = 0, attempt = 1;
  const char* state = "queued";  // "queued", "running", "ended", "unstarted" (a group target_groups left)
  v1::EpisodeStatus status = v1::EPISODE_STATUS_UNSPECIFIED;
  std::optional<double> reward;
  bool redundant = false;  // ended after its group completed: never delivered
  bool acked = false;
  std::string host;
};

}  // namespace corral::scheduler
