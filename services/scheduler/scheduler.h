// The scheduler's middle layer, between the gRPC adapter and the core: Submit (validate, derive, journal), the
// dispatcher (starts queued episodes while there is room: max_concurrent_episodes and free sandbox slots), the
// ticker (batch deadlines, gauges), drains, and the reaction to a lost host. Episodes are coroutines on the
// io_context's threads. Thread-safe: RPC handlers call it from gRPC threads.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/steady_timer.hpp"
#include "corral/v1/scheduler.pb.h"
#include "services/scheduler/doorbell.h"
#include "services/scheduler/episode/env_board.h"
#include "services/scheduler/episode/episode_driver.h"
#include "services/scheduler/metrics.h"
#include "services/scheduler/remote/host_registry.h"
#include "services/scheduler/remote/warm_pool.h"
#include "services/scheduler/table/episode_table.h"

namespace corral::scheduler {

struct SchedulerOptions {
  int64_t max_concurrent_episodes = 1024;
  absl::Duration drain_grace = absl::Seconds(60);
  SubmitLimits limits;
};

// Sandbox slots the warm pool may take now: free capacity not counted on by starting or queued episodes.
int64_t WarmRoom(const HostRegistry& hosts, const Occupancy& occupancy, const EpisodeTable& table);
// A host stopped answering: its episodes end as infra failures (and are retried elsewhere).
void StopRunsOnLostHost(EpisodeTable& table, const std::string& address);

class Scheduler {
 public:
  // The dispatcher waits on `doorbell` (rung by whatever makes room: see doorbell.h).
  // Trainer-driven environment episodes open through `envs` (none can without).
  Scheduler(boost::asio::io_context& io, Clock* clock, SchedulerOptions options, EpisodeTable* table,
            HostRegistry* hosts, EpisodeDriver* driver, Doorbell* doorbell, SchedulerMetrics* metrics,
            WarmPool* pool = nullptr, EnvBoard* envs = nullptr);

  // Starts the dispatcher, the ticker and the host registry's polling on the io_context.
  void Start();
  // Stops dispatching and polling (running episodes continue until the io_context stops).
  void Stop();

  // Submit: validates everything (errors name the task id and field), then journals the batch.
  void Submit(v1::BatchSpec spec, std::vector<v1::Task> tasks, std::function<void(absl::StatusOr<v1::Batch>)> done);
  // Streaming mode: the tasks checked as Submit checks them (the stream's overrides applied), then appended.
  void AppendTasks(const v1::AppendTasksRequest& request, std::function<void(absl::StatusOr<v1::Batch>)> done);
  // OpenEnvironment: a batch of one trainer-driven environment episode (TrainerDrivenBatchOf), submitted as
  // Submit submits. `opened` runs exactly once — with the response once the episode's environment is reset, or
  // with the error that refused or ended it first — unless the caller withdraws it (EnvBoard::Forget returns
  // true; then the caller cancels the episode). Returns the episode's id, or "" when refused at once.
  std::string OpenEnvironment(const v1::OpenEnvironmentRequest& request, EnvBoard::OpenDone opened);
  // Drain the scheduler (empty host) or one host; `done` runs once nothing runs in scope.
  void Drain(const v1::DrainRequest& request, std::function<void(absl::StatusOr<v1::DrainResponse>)> done);
  bool draining() const { return draining_.load(); }

 private:
  // Submit's checks and journaling; only OpenEnvironment's batch may hold a trainer-driven task.
  void SubmitBatch(v1::BatchSpec spec, std::vector<v1::Task> tasks, bool trainer_driven,
                   std::function<void(absl::StatusOr<v1::Batch>)> done);
  // The tasks as they run (the spec's overrides applied, each checked against its runner, and a branching one
  // against the spec's group_size and redundancy); ids must be unique. A trainer-driven environment task is
  // refused unless `trainer_driven` (OpenEnvironment's).
  absl::StatusOr<std::vector<std::shared_ptr<const v1::Task>>> Effective(const std::vector<v1::Task>& tasks,
                                                                         const v1::BatchSpec& spec,
                                                                         bool trainer_driven = false) const;
  // FAILED_PRECONDITION when `task` names an agent harness that no sandbox host that answered has installed.
  absl::Status CheckHarnessInstalled(const v1::Task& task) const;
  // Starts queued episodes while there is room, at each ring of the doorbell (at least every 500 ms).
  boost::asio::awaitable<void> Dispatch();
  void DispatchPass();
  // Once a second: deadlines, progress messages, gauges.
  boost::asio::awaitable<void> Tick();
  void TickPass();
  boost::asio::awaitable<void> RunDrain(std::string address, absl::Duration grace,
                                        std::function<void(absl::StatusOr<v1::DrainResponse>)> done);

  boost::asio::io_context& io_;
  Clock* const clock_;
  const SchedulerOptions options_;
  EpisodeTable* const table_;
  HostRegistry* const hosts_;
  EpisodeDriver* const driver_;
  SchedulerMetrics* const metrics_;
  WarmPool* const pool_;
  EnvBoard* const envs_;
  Doorbell* const doorbell_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> next_batch_{0};
};

}  // namespace corral::scheduler
