// OpenEnvironment's request as a batch Submit takes, as a pure function: a trainer-driven environment episode is
// a batch of one episode whose task says the trainer sends the actions (EnvServerSpec.trainer_driven).
#pragma once

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "corral/v1/scheduler.pb.h"

namespace corral::scheduler {

struct TrainerDrivenBatch {
  v1::BatchSpec spec;  // as submitted (Submit fills in the defaults)
  v1::Task task;
  absl::Duration idle_timeout;
};

// How long a trainer-driven episode waits for the trainer's next call when the request does not say.
inline constexpr absl::Duration kDefaultIdleTimeout = absl::Minutes(5);

// The request checked and turned into one batch: the task made an environment task (runner ENVIRONMENT) marked
// trainer_driven, with the request's seed and reset_json merged over its reset_json; the spec of one episode.
// INVALID_ARGUMENT naming the field: no task or env_server, another runner, a spec of more than one episode
// (group_size above 1, redundancy, streaming, target_groups, group_filter), reset_json not a JSON object, an
// idle_timeout outside 1 s - 24 h. The task and spec are checked further as Submit checks any.
absl::StatusOr<TrainerDrivenBatch> TrainerDrivenBatchOf(const v1::OpenEnvironmentRequest& request);

}  // namespace corral::scheduler
