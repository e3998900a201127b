// The scheduler's journal over SQLite (libs/journal, WAL, group commit): batches with their tasks, the attempts
// running (so a restarted scheduler can clean up their sandboxes and sessions), results, and sandbox leases. An
// acknowledged result keeps its row (so it is never delivered again and counts stay right) and, for `result_retention`,
// its payload too, which only the rollout inspector reads (a restart does not load it into memory). Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "corral/v1/common.pb.h"
#include "libs/journal/journal.h"
#include "services/scheduler/lease/sandbox_leases.h"
#include "services/scheduler/lease/sandbox_templates.h"
#include "services/scheduler/table/episode_table.h"

namespace corral::scheduler {

// Asynchronous RL: the policy version the trainer's inference servers serve and whether generation is paused
// (policy_control.h), with the sequence number of the change that made it so.
struct PolicyState {
  int64_t version = 0;
  bool paused = false;
  v1::PauseMode mode = v1::PAUSE_MODE_DRAIN;
  uint64_t sequence = 0;
};

class SchedulerJournal final : public EpisodeLog, public LeaseLog, public TemplateLog {
 public:
  // result_retention zero: an acknowledged result's payload is dropped with the acknowledgement.
  static absl::StatusOr<std::unique_ptr<SchedulerJournal>> Open(const std::string& path, bool fsync,
                                                                absl::Duration result_retention = absl::ZeroDuration());

  // Everything journaled, for EpisodeTable::Restore and cleanup. DATA_LOSS when a row cannot be parsed.
  absl::StatusOr<Snapshot> Load();

  void AddBatch(const v1::BatchSpec& spec, const std::string& digest, absl::Time create_time,
                const std::vector<std::shared_ptr<const v1::Task>>& tasks,
                std::function<void(absl::Status)> done) override;
  void RunStarted(const std::string& episode_id, uint32_t attempt, uint32_t runs) override;
  void RunPlaced(const std::string& episode_id, const std::string& host, const std::string& sandbox_id,
                 const std::string& env_id) override;
  void RunEnded(const std::string& episode_id, uint32_t next_attempt) override;
  void ResultWithdrawn(uint64_t seq, const std::string& episode_id, uint32_t attempt, uint32_t runs) override;
  void AddResult(uint64_t seq, const v1::EpisodeResult& result, bool redundant,
                 std::function<void(absl::Status)> done) override;
  void Acked(const std::vector<std::string>& episode_ids, std::function<void(absl::Status)> done) override;
  void BatchCancelled(const std::string& batch_id) override;
  void TasksAppended(const std::string& batch_id, uint32_t first,
                     const std::vector<std::shared_ptr<const v1::Task>>& tasks, bool close_input,
                     std::function<void(absl::Status)> done) override;

  // Drops the payloads of results acknowledged before `before`; returns how many.
  absl::StatusOr<int64_t> DropAckedBefore(absl::Time before);
  // The serialized result of an acknowledged episode whose payload is retained; NOT_FOUND otherwise.
  absl::StatusOr<std::string> AckedResult(const std::string& episode_id);

  void SavePolicy(const PolicyState& state, std::function<void(absl::Status)> done);
  absl::StatusOr<PolicyState> LoadPolicy();
  // Sets the journal's time base (before any lease is loaded or saved): the clock anchor of the first process
  // that wrote it on this boot, kept, so that a lease's times are journaled in that base and read back in this
  // process's time exactly, whatever the wall clock did. On another boot, or with none kept, this process's
  // anchor becomes the base. Returns what this process adds to the base's times.
  absl::StatusOr<absl::Duration> AdoptClock(const ClockAnchor& current);

  void SaveLease(const v1::SandboxLease& lease, std::function<void(absl::Status)> done) override;
  void DropLease(const std::string& lease_id) override;
  // The leases journaled (SandboxLeases::Restore), ordered by id. DATA_LOSS when a row cannot be parsed.
  absl::StatusOr<std::vector<v1::SandboxLease>> LoadLeases();

  void SaveTemplate(const v1::SandboxTemplate& t, std::function<void(absl::Status)> done) override;
  void DropTemplate(const std::string& template_id) override;
  void SaveTemplateFile(const v1::TemplateFile& file, absl::Time time, std::function<void(absl::Status)> done) override;
  void DropTemplateFile(const std::string& owner, const std::string& hash) override;
  absl::StatusOr<std::string> LoadTemplateFile(const std::string& owner, const std::string& hash) override;
  // For SandboxTemplates::Restore. DATA_LOSS when a row cannot be parsed.
  absl::StatusOr<std::vector<v1::SandboxTemplate>> LoadTemplates();
  absl::StatusOr<std::vector<TemplateFileEntry>> LoadTemplateFiles();

  // Forgets the run rows of episodes a restart has cleaned up.
  void ForgetRuns();
  Journal* journal() { return journal_.get(); }

 private:
  SchedulerJournal(std::unique_ptr<Journal> journal, absl::Duration result_retention)
      : journal_(std::move(journal)), result_retention_(result_retention) {}
  std::unique_ptr<Journal> journal_;
  const absl::Duration result_retention_;
  absl::Duration clock_shift_;  // AdoptClock: this process's time minus the journal's time base
};

}  // namespace corral::scheduler
