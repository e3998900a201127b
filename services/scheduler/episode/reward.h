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
  // A verifier's: what decided it ("reward.txt", "reward.json", "stdout", "exit_code"); empty for the others.
  std::string source;
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

// REWARD_SOURCE_STDOUT: the last non-empty line of the verifier's stdout — one number, or a JSON object as
// reward.json holds — else the exit code. INVALID_ARGUMENT for a JSON line that is not {"reward": <number>};
// NOT_FOUND when there is neither a line nor an exit code.
absl::StatusOr<RewardOutcome> StdoutReward(const std::string& stdout_tail, std::optional<int> exit_code);

}  // namespace corral::scheduler
