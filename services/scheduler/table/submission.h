// What Submit checks and derives, as pure functions: a batch spec's validity, each task with the batch
// overrides applied and checked against its runner (errors name the task id and field), the batch digest that
// makes Submit idempotent, deterministic episode seeds, episode and group ids, and template keys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "corral/v1/scheduler.pb.h"

namespace corral::scheduler {

struct SubmitLimits {
  int64_t max_batch_tasks = 100000;
  int64_t max_group_size = 1024;
  int64_t default_max_attempts = 3;
  v1::Runner default_runner = v1::RUNNER_SINGLE_TURN;
};

// Client-chosen batch ids are shorter than the id charset allows, so episode and session ids built from them
// stay within 128 characters.
inline constexpr size_t kMaxBatchIdLength = 64;

// INVALID_ARGUMENT naming the field: bad batch_id, group size above the limit, bad labels, a deadline before
// `now`.
absl::Status ValidateSpec(const v1::BatchSpec& spec, absl::Time now, const SubmitLimits& limits);
// The asynchronous-RL fields (staleness, dynamic sampling, group failure policy); part of ValidateSpec.
absl::Status ValidateAsyncSpec(const v1::BatchSpec& spec);

// An environment's files, setup commands, variables, task paths and image: INVALID_ARGUMENT "environment.<field>
// ..." when one is malformed. Part of EffectiveTask; on its own for leased sandboxes.
absl::Status CheckEnvironment(const v1::EnvironmentSpec& env);

// The spec with defaults filled in (group_size, max_attempts, seed from `random_seed` when unset).
v1::BatchSpec WithDefaults(v1::BatchSpec spec, const SubmitLimits& limits, uint64_t random_seed);

// The task as it runs: `overrides` applied (message fields merged, repeated fields replaced when non-empty), the
// runner defaulted. INVALID_ARGUMENT "task '<id>': <field> ..." when it does not fit its runner.
absl::StatusOr<v1::Task> EffectiveTask(const v1::Task& task, const v1::TaskOverrides& overrides,
                                       v1::Runner default_runner);

// Hex SHA-256 over the spec as submitted and the tasks (deterministic serialization): equal content, equal digest.
std::string BatchDigest(const v1::BatchSpec& submitted, const std::vector<v1::Task>& tasks);

// Deterministic episode seed (SplitMix64 over the batch seed and the episode's position).
uint64_t EpisodeSeed(uint64_t batch_seed, uint32_t group_index, uint32_t index_in_group);

std::string GroupId(const std::string& batch_id, uint32_t group_index);
// The proxy session (env id) of one run of an episode: "<episode_id>:r<run>", unique per run.
std::string EnvId(const std::string& episode_id, uint32_t run);
std::string EpisodeId(const std::string& batch_id, uint32_t group_index, uint32_t index_in_group);
struct EpisodeRef {
  std::string batch_id;
  uint32_t group_index = 0;
  uint32_t index_in_group = 0;
};
// Parses "<batch>:g<group>[:e<index>]"; INVALID_ARGUMENT naming `field` otherwise.
absl::StatusOr<EpisodeRef> ParseEpisodeId(const std::string& id, const char* field = "episode_id");
absl::StatusOr<EpisodeRef> ParseGroupId(const std::string& id, const char* field = "group_id");

// "sha256-<hex>" over the environment's setup (files, commands, setup network policy); "" when it has none.
std::string TemplateKey(const v1::EnvironmentSpec& environment);

// "single_turn", "tool_loop", "agent".
const char* RunnerName(v1::Runner runner);
// Parses a runner name (as in a JSONL dataset or config); RUNNER_UNSPECIFIED if unknown.
v1::Runner ParseRunner(const std::string& name);

// True when episodes of `task` need a sandbox (tool_loop, agent, VERIFIER rewards).
bool NeedsSandbox(const v1::Task& task);

// The network policy of `task`'s sandbox: its environment's, else PROXY_ONLY for the agent runner and NONE for
// the others.
v1::NetworkPolicy NetworkOf(const v1::Task& task);

}  // namespace corral::scheduler
