// The scheduler's state: batches, their episodes, the queue, and results until acknowledged. Plain C++ (no
// gRPC, no I/O): it decides, and tells its EpisodeLog what must become durable. Every result is journaled before
// a stream may send it (results become visible when the log confirms the write). Thread-safe (one mutex).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "corral/v1/scheduler.pb.h"
#include "libs/core/clock.h"
#include "services/scheduler/table/batch_state.h"
#include "services/scheduler/table/branch_plan.h"
#include "services/scheduler/table/episode_table_types.h"
#include "services/scheduler/table/retry_backoff.h"
#include "services/scheduler/table/run_control.h"
#include "services/scheduler/table/submission.h"

namespace corral::scheduler {

class EpisodeTable {
 public:
  // Infra failures are retried after RetryDelay(`retry_backoff`, …): doubling per attempt, capped, jittered.
  EpisodeTable(Clock* clock, EpisodeLog* log, SubmitLimits limits, int64_t max_pending, RetryBackoff retry_backoff = {},
               TableHooks hooks = {});

  // Restores state from a journal snapshot: ended episodes keep their results, everything else is queued
  // (episodes that were running go back to the queue with their attempt number); then applies the journaled
  // `policy_version` (SetPolicyVersion). Quiet: the hooks hear nothing of what it replays.
  void Restore(const Snapshot& snapshot, int64_t policy_version = 0);

  // Submit: the batch as validated (spec with defaults, effective tasks). Returns the existing batch when the
  // digest matches (idempotent), ALREADY_EXISTS when it does not, RESOURCE_EXHAUSTED beyond max_pending.
  // `done` is called once the batch is durable (or with the journal's error; then it was not added).
  void Submit(v1::BatchSpec spec, const std::string& digest, std::vector<std::shared_ptr<const v1::Task>> tasks,
              std::function<void(absl::StatusOr<v1::Batch>)> done);

  // Streaming mode: appends `tasks` (effective, checked) to a stream's task list and/or closes its input. `done`
  // once the journal has them (then they may open), with the batch; errors change nothing (FAILED_PRECONDITION
  // when not a stream, closed, cancelled or an append is in flight; ALREADY_EXISTS for a task id it has;
  // RESOURCE_EXHAUSTED beyond max_batch_tasks).
  void Append(const std::string& batch_id, std::vector<std::shared_ptr<const v1::Task>> tasks, bool close_input,
              std::function<void(absl::StatusOr<v1::Batch>)> done);

  // With `task_stats`, Batch.task_stats too.
  absl::StatusOr<v1::Batch> GetBatch(const std::string& batch_id, bool task_stats = false) const;
  // Newest first.
  absl::StatusOr<v1::ListBatchesResponse> ListBatches(const v1::ListBatchesRequest& request) const;

  // The next queued episode to run (priority, then submission order), among those `eligible` accepts (the
  // dispatcher passes what it can place now). Marks it running and journals the start.
  std::optional<EpisodeTicket> StartNext(const std::function<bool(const v1::Task&)>& eligible);
  bool HasQueued() const;
  // The running episode was placed on `host` (sandbox_id may be empty for single_turn).
  void Placed(const v1::EpisodeIds& ids, const std::string& host, const std::string& sandbox_id,
              const std::string& env_id);
  // The running attempt ended with `result` (status set). Infra failures with attempts left go back to the
  // queue (kRetried); a run stopped for requeue goes back without an attempt (kRequeued); a redundant extra is
  // dropped; anything else is recorded and delivered. Returns runs to stop (redundant extras of a completed
  // group) through `stop`.
  FinishOutcome Finish(const EpisodeTicket& ticket, v1::EpisodeResult result);

  // Cancel by episode, group or batch id. Queued episodes end CANCELLED at once; running ones are stopped (their
  // driver reports the CANCELLED result). Returns how many were queued or running.
  absl::StatusOr<uint32_t> Cancel(const v1::CancelRequest& request);
  // Ends queued episodes whose batch deadline passed (TIMEOUT, phase DEADLINE) and stops running ones.
  void ExpireDeadlines();

  // ---- asynchronous RL ----
  // The policy version the inference servers now serve (UpdatePolicy; the journaled one at start). Opens
  // admission (BatchSpec.step_groups) and withdraws undelivered results that became too stale (max_staleness):
  // those episodes run again.
  void SetPolicyVersion(int64_t version);

  // Ack: all or nothing. NOT_FOUND for an unknown id, FAILED_PRECONDITION for an episode without a result.
  // Applied at once (no stream sends them again); `durable` runs once the journal holds the acknowledgement
  // (at once when nothing was newly acknowledged), with the count; never when the Ack is refused.
  absl::StatusOr<uint32_t> Ack(const std::vector<std::string>& episode_ids,
                               std::function<void(absl::Status, uint32_t)> durable = nullptr);

  // ---- branching (Task.branch; episode_table_branches.cc) ----
  // The running episode `parent` splits at branch `level`: its children, parked since their group opened, start
  // now (marked running, journaled) as final runs, and so does the parent's run from here on (a retry could not
  // rebuild their shared state). Returns the children's tickets, in sibling order; those already ended (cancelled,
  // the batch's deadline) are left out. Empty when `parent` is not running that run.
  std::vector<EpisodeTicket> Branch(const EpisodeTicket& parent, size_t level);

  // Drain support: the running episodes (optionally only on `host`), to stop for requeue.
  std::vector<std::shared_ptr<RunControl>> Running(const std::string& host) const;
  size_t RunningCount(const std::string& host) const;
  size_t QueuedCount() const;
  // Queued episodes that will need a sandbox (what the warm pool must not take capacity from).
  size_t QueuedNeedingSandbox() const;

  // ---- result streams ----
  // Committed, unacknowledged results at positions > after and not in `sent` (of `batch_id`, or all when empty),
  // oldest policy version first, then by position; about `limit` (whole groups are not split). A result's
  // position is its seq; with whole_groups, the position where its group was decided (results come group by
  // group). Results of a batch that holds them (BatchSpec.group_filter, target_groups, GROUP_FAILURE_POLICY_DROP)
  // wait for their group's decision.
  using Delivery = TableDelivery;
  using DeliveryPage = TableDeliveryPage;
  DeliveryPage Deliverable(const std::string& batch_id, uint64_t after, const std::set<uint64_t>& sent,
                           bool whole_groups, size_t limit) const;
  void MarkDelivered(const std::string& episode_id);
  // True once `batch_id` has ended and every result with position <= `sent_upto` covers all its results.
  bool StreamComplete(const std::string& batch_id, uint64_t sent_upto, bool whole_groups) const;
  bool BatchExists(const std::string& batch_id) const;
  // The highest position issued so far (cursors above it were not issued by this scheduler).
  uint64_t LastPosition() const;
  // Counts of one batch, or of every batch combined (batch_id ""), for progress messages; `version` changes
  // whenever anything that would show in them does.
  v1::Batch Progress(const std::string& batch_id, uint64_t* version) const;

  // ---- the rollout inspector (read-only) ----
  using EpisodeRow = TableEpisodeRow;
  // Every episode of the batch, group by group; NOT_FOUND for an unknown batch.
  absl::StatusOr<std::vector<EpisodeRow>> Episodes(const std::string& batch_id) const;
  // The serialized result of an episode whose result is committed and not yet acknowledged; NOT_FOUND for an
  // unknown episode, FAILED_PRECONDITION while it has none, OUT_OF_RANGE once it was acknowledged (the journal
  // keeps acknowledged results for result_retention).
  absl::StatusOr<std::string> UnackedResult(const std::string& episode_id) const;

  // Wakes the result streams without a change (their periodic progress messages).
  void Poke() const { Changed(); }
  // Committed results not yet acknowledged.
  size_t AwaitingAck() const;

 private:
  using Batch = BatchState;
  using Episode = BatchState::Episode;
  using Group = BatchState::Group;
  using State = EpisodeState;
  struct QueueKey {
    int64_t neg_priority;
    uint64_t order;
    uint32_t group, index;
    auto operator<=>(const QueueKey&) const = default;
  };

  void RestoreLocked(const Snapshot& snapshot);
  void RestoreResult(const Snapshot::ResultRow& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // an ended episode, again
  Batch* FindBatch(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Batch* FindBatch(const std::string& id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Enqueue(Batch& b, uint32_t g, uint32_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Dequeue(Batch& b, uint32_t g, uint32_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::EpisodeIds Ids(const Batch& b, uint32_t g, uint32_t i) const;
  // ---- branching (episode_table_branches.cc) ----
  // Episode i of group g waits for its parent's branch: queued (counted, cancellable) but not in the queue.
  void Park(Batch& b, uint32_t g, uint32_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a branching group's root and parks the rest (Open, Restore).
  void OpenBranching(Batch& b, uint32_t g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parked episodes whose parent has ended without splitting for them end too, as their parent did.
  void EndOrphans(Batch& b, uint32_t g, std::vector<std::shared_ptr<RunControl>>* stop)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a restart: a branching group that had split cannot run its branches again (their sandboxes are gone):
  // what had not ended ends FAILED (infra). One that had not split starts again from its root. True when it
  // handled group g.
  bool RestoreBranching(Batch& b, uint32_t g, std::vector<std::shared_ptr<RunControl>>* stop)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the episode with `result`: group accounting, redundancy, journal. Runs to stop are appended to `stop`.
  void Record(Batch& b, uint32_t g, uint32_t i, v1::EpisodeResult result,
              std::vector<std::shared_ptr<RunControl>>* stop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ---- groups (episode_table_groups.cc) ----
  // Opens group g: its episodes are queued.
  void Open(Batch& b, uint32_t g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Extends the batch's task list (a stream's AppendTasks, or its restore): the new groups are unopened.
  void AppendTasks(Batch& b, std::vector<std::shared_ptr<const v1::Task>> tasks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Dynamic sampling: opens groups until enough are in flight for target_groups at the pass rate seen so far; a
  // stream: until groups_in_flight are.
  void OpenMore(Batch& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Group g has group_size results (the last at `position`): drops its extras, applies the failure policy and
  // the filter (results FILTERED), makes it deliverable; a dynamic batch then opens more groups or cancels the
  // surplus.
  void Decide(Batch& b, uint32_t g, uint64_t position, std::vector<std::shared_ptr<RunControl>>* stop)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An episode no longer wanted: dropped if queued (redundant, never delivered), stopped if running. False when
  // it was neither (it has ended, or never opened).
  bool Unwant(Batch& b, uint32_t g, uint32_t i, std::vector<std::shared_ptr<RunControl>>* stop)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // target_groups passed: the open groups are surplus, their ended results redundant and their runs stopped.
  void CancelSurplus(Batch& b, std::vector<std::shared_ptr<RunControl>>* stop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replaces an ended result (another status, or redundant: no longer counted) and journals it again under the
  // same seq.
  void Rewrite(Batch& b, uint32_t g, uint32_t i, v1::EpisodeResult result, bool redundant)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The verdict on a group with group_size results: passed, FILTERED (results rewritten), or dropped.
  void Judge(Batch& b, uint32_t g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static std::optional<v1::EpisodeResult> Parsed(const Episode& e);
  // Takes back an undelivered, too stale result: uncounted, journal row deleted, the episode queued again.
  void Withdraw(Batch& b, uint32_t g, uint32_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A FINISHED result whose first policy version is older than max_staleness allows now.
  bool TooStale(const Batch& b, const v1::EpisodeResult& result) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Staleness admission: group g may start (already started, or (k + 1 + version - base) x step_groups allow).
  bool Admitted(const Batch& b, uint32_t g) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A group's state after a restart, from its results' statuses.
  void RestoreDecision(Batch& b, uint32_t g, uint64_t position) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A result for an episode that never ran (cancelled or expired while queued).
  v1::EpisodeResult QueuedResult(const Batch& b, uint32_t g, uint32_t i, v1::EpisodeStatus status,
                                 v1::EpisodePhase phase, const std::string& message) const;
  void Touch(Batch& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Batch Describe(const Batch& b) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Committed(const std::string& batch_id, uint32_t g, uint32_t i, uint64_t seq);
  // Journals the episode's current result (AddResult), counting the write in flight.
  void Journal(Batch& b, uint32_t g, uint32_t i, const v1::EpisodeResult& result, bool redundant)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Changed() const;
  // The observer, or null while Restore replays.
  TableObserver* observer() const { return restoring_ ? nullptr : hooks_.observer; }

  Clock* const clock_;
  EpisodeLog* const log_;
  const SubmitLimits limits_;
  const int64_t max_pending_;
  const RetryBackoff retry_backoff_;
  const TableHooks hooks_;
  std::atomic<bool> restoring_{false};  // Restore runs: the hooks are quiet

  mutable absl::Mutex mu_;
  std::map<std::string, Batch> batches_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> submitting_ ABSL_GUARDED_BY(mu_);  // batch ids whose journal write is in flight
  std::set<std::string> appending_ ABSL_GUARDED_BY(mu_);   // streams whose AppendTasks write is in flight
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t pending_ ABSL_GUARDED_BY(mu_) = 0;  // queued + running episodes
  size_t queued_sandbox_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<QueueKey, std::string> queue_ ABSL_GUARDED_BY(mu_);  // -> batch id
  // Committed, unacknowledged results by position (the group-completion position for whole-group readers is
  // kept per batch): seq -> (batch id, group, index).
  struct Where {
    std::string batch_id;
    uint32_t group, index;
  };
  std::map<uint64_t, Where> unacked_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Where> group_completions_ ABSL_GUARDED_BY(mu_);  // position -> the group that completed there
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t policy_version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace corral::scheduler
