// Rewards as pure functions: the built-in reward functions of single_turn and tool_loop (computed on the final
// assistant message), and the verifier's reward read from /logs/verifier/reward.txt, then reward.json, then
// its exit code.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "corral/v1/scheduler.pb.h"

namespace corral::scheduler {

struct RewardOutcome {
  double reward = 0;
  std::vector<double> step_rewards;
  std::string details_json;  // what was compared, for a person
};

// EXACT (the default), NUMERIC, REGEX or GSM8K on `final_message`. Never fails: no match is reward 0.
RewardOutcome ComputeReward(const v1::RewardSpec& spec, const std::string& answer, const std::string& final_message);

// The last number in `text` ("1,234.5" -> 1234.5), or nullopt when there is none.
std::optional<double> LastNumber(const std::string& text);

// The verifier's reward: reward.txt (one number) wins, then reward.json ({"reward": x, "step_rewards": [...]}),
// then the exit code (0 -> 1.0, else 0.0). Each is nullopt when absent. INVALID_ARGUMENT when the file that
// decides is malformed (a verifier failure); NOT_FOUND when there is nothing at all.
absl::StatusOr<RewardOutcome> VerifierReward(const std::optional<std::string>& reward_txt,
                                             const std::optional<std::string>& reward_json,
                                             std::optional<int> exit_code);

}  // namespace corral::scheduler
