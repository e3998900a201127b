// The scheduler as the CLI talks to it: a stub with its bearer token, and the calls more than one subcommand
// makes (submit a batch in chunks, get, ack, cancel).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "corral/v1/scheduler.grpc.pb.h"
#include "tools/corral/connect_flags.h"

namespace corral::cli {

struct Scheduler {
  std::unique_ptr<v1::Scheduler::Stub> stub;
  std::string token;
  double timeout_s = 10;
  // Sets the bearer token and, unless `deadline` is false (streams), the RPC deadline.
  void Prepare(grpc::ClientContext& ctx, bool deadline = true) const;

  // Submits `tasks` under `spec` (Submit's client stream, in chunks well under gRPC's 4 MiB message limit).
  absl::StatusOr<v1::Batch> Submit(const v1::BatchSpec& spec, const std::vector<v1::Task>& tasks) const;
  absl::StatusOr<v1::Batch> GetBatch(const std::string& batch_id, bool task_stats = false) const;
  absl::Status Ack(const std::vector<std::string>& episode_ids) const;
  // Returns how many queued or running episodes were cancelled.
  absl::StatusOr<uint32_t> CancelBatch(const std::string& batch_id, const std::string& reason) const;
};

// What `corral run` and `corral batch submit` ask of a batch: the input (a JSONL dataset or Harbor task
// directories, with the agent those need) and the BatchSpec fields a person sets from the shell.
struct BatchFlags {
  std::string input, agent, runner, model, batch_id, tenant;
  std::string skip_file;  // task ids left out, one per line (corral audit --quarantine writes one)
  std::vector<std::string> agent_files;
  bool harbor_images = false;  // Harbor tasks run in their Dockerfile's FROM image (or task.toml's docker_image)
  uint32_t group_size = 1, redundancy = 0, max_attempts = 0;
  int64_t seed = -1;
  int priority = 0;

  v1::BatchSpec Spec() const;
};
// Adds the positional input and --agent, --agent-file, --harbor-images, --skip, --group-size, --redundancy, --runner,
// --model, --seed, --batch-id, --priority, --max-attempts and --tenant to `cmd`.
void AddBatchFlags(CLI::App* cmd, BatchFlags& flags);
// The tasks `flags` name (LoadTaskInput), less those listed in the skip file (NOT_FOUND when it cannot be read).
absl::StatusOr<std::vector<v1::Task>> LoadBatchTasks(const BatchFlags& flags);

// The scheduler named by `flags` (or the local `corral up` cluster's).
absl::StatusOr<Scheduler> ConnectScheduler(ConnectFlags& flags);

std::string StateName(v1::BatchState state);
// "single_turn" | "tool_loop" | "agent".
v1::Runner RunnerFromName(const std::string& name);

}  // namespace corral::cli
