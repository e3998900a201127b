// OpenEnv's HTTP shape as the environment runner speaks it, as pure functions: the reset and step bodies, an
// answer checked field by field ({"observation", "reward", "done"}), an observation turned into the model's next
// user message, and the model's reply turned into an action (EnvServerSpec's formats and templates). No I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "boost/json.hpp"
#include "corral/v1/scheduler.pb.h"
#include "services/scheduler/episode/chat.h"

namespace corral::scheduler {

// One answer of /reset or /step.
struct EnvAnswer {
  boost::json::object raw;  // the whole answer, for templates
  boost::json::value observation;
  std::optional<double> reward;  // null or absent -> none
  bool done = false;
};

// The answer in `body`; INVALID_ARGUMENT naming the field when it is not {"observation": any, "reward":
// number|null?, "done": bool?} ("done" absent -> false). `call` names the call in the message ("POST /step").
absl::StatusOr<EnvAnswer> ParseEnvAnswer(const std::string& call, const std::string& body);

// {"seed": seed, "episode_id": id, ...reset_json} (reset_json already checked to be an object, or empty).
std::string ResetBody(uint64_t seed, const std::string& episode_id, const std::string& reset_json);
// {"action": action}.
std::string StepBody(const boost::json::value& action);

// The user message the model reads for `answer` (EnvServerSpec.observation_template, else observation_format).
std::string ObservationText(const v1::EnvServerSpec& spec, const EnvAnswer& answer);

// The action for the model's `reply`; INVALID_ARGUMENT, for the model to read, when the reply is not one (no
// tool call under TOOL_CALL, text that is not a JSON object under JSON).
absl::StatusOr<boost::json::value> ActionOf(const v1::EnvServerSpec& spec, const ChatReply& reply);

// The episode's reward from the steps' rewards (EnvServerSpec.reward_mode); 0 with no step.
double EnvReward(const v1::EnvServerSpec& spec, const std::vector<double>& step_rewards);

}  // namespace corral::scheduler
