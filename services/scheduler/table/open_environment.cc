#include "services/scheduler/table/open_environment.h"

#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"

namespace corral::scheduler {

namespace json = boost::json;

absl::StatusOr<TrainerDrivenBatch> TrainerDrivenBatchOf(const v1::OpenEnvironmentRequest& request) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (!request.has_task()) return bad("task is required: an environment task (runner ENVIRONMENT, env_server)");
  TrainerDrivenBatch out{request.spec(), request.task(), kDefaultIdleTimeout};
  v1::Task& task = out.task;
  if (task.runner() != v1::RUNNER_UNSPECIFIED && task.runner() != v1::RUNNER_ENVIRONMENT) {
    return bad("task.runner must be ENVIRONMENT (or unset): the trainer drives an environment server");
  }
  if (!task.has_env_server()) return bad("task.env_server is required: the environment server the trainer drives");
  const v1::BatchSpec& spec = out.spec;
  if (spec.group_size() > 1 || spec.redundancy() > 0) {
    return bad("spec.group_size and spec.redundancy: an environment episode is one episode (group_size 0 or 1)");
  }
  if (spec.groups_in_flight() > 0 || spec.target_groups() > 0 || spec.max_groups() > 0 || spec.has_group_filter()) {
    return bad("spec: streaming, target_groups, max_groups and group_filter do not apply to one episode");
  }
  if (request.has_idle_timeout()) {
    out.idle_timeout = FromProto(request.idle_timeout());
    if (out.idle_timeout < absl::Seconds(1) || out.idle_timeout > absl::Hours(24)) {
      return bad("idle_timeout must be between 1s and 24h");
    }
  }
  json::object reset;
  for (const std::string* extra : {&task.env_server().reset_json(), &request.reset_json()}) {
    if (extra->empty()) continue;
    boost::system::error_code ec;
    json::value v = json::parse(*extra, ec);
    if (ec || !v.is_object()) {
      return bad(extra == &request.reset_json() ? "reset_json must be a JSON object"
                                                : "task.env_server.reset_json must be a JSON object");
    }
    for (const auto& [key, value] : v.as_object()) reset[key] = value;
  }
  if (request.has_seed()) reset["seed"] = request.seed();
  task.set_runner(v1::RUNNER_ENVIRONMENT);
  v1::EnvServerSpec& env = *task.mutable_env_server();
  env.set_trainer_driven(true);
  if (!reset.empty()) env.set_reset_json(json::serialize(reset));
  out.spec.set_group_size(1);
  return out;
}

}  // namespace corral::scheduler
