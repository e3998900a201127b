// The runners (single_turn, tool_loop, agent, environment) and the verifier, as coroutines over an Attempt whose
// session (and, when needed, sandbox) the driver has set up. Each returns nullopt when the episode ran to its
// reward (set in attempt.result), or why it ended early.
#pragma once

#include <optional>

#include "boost/asio/awaitable.hpp"
#include "services/scheduler/episode/attempt.h"
#include "services/scheduler/episode/chat.h"
#include "services/scheduler/episode/reward.h"

namespace corral::scheduler {

boost::asio::awaitable<std::optional<Failure>> RunSingleTurn(Attempt& a);
boost::asio::awaitable<std::optional<Failure>> RunToolLoop(Attempt& a);
boost::asio::awaitable<std::optional<Failure>> RunAgent(Attempt& a);
// In env_runner.cc.
boost::asio::awaitable<std::optional<Failure>> RunEnvironment(Attempt& a);

// One chat call through the proxy with the session's token (under the LLM limit, in generation time, ended by a
// stop). A failure names what the proxy said.
struct ChatOutcome {
  std::optional<ChatReply> reply;
  bool budget_exhausted = false;
  std::optional<Failure> failure;
};
boost::asio::awaitable<ChatOutcome> Chat(Attempt& a, const boost::json::array& messages,
                                         const boost::json::array& tools);
// The reward of a finished conversation: the task's built-in function on the final message, or its verifier.
boost::asio::awaitable<std::optional<Failure>> Reward(Attempt& a);
// A permit of `limit` (the tool limit for one execution, the LLM limit for one call), or an empty one when there
// is no limiter or no such limit is configured. A stop withdraws the request.
boost::asio::awaitable<absl::StatusOr<Permit>> TakePermit(Attempt& a, const std::string& limit, const std::string& key,
                                                          absl::Duration wait);
// Ends every process of the agent phase, clears the reward location and the task's replace_paths, uploads the
// verifier's files, runs it and reads the reward from what it wrote (VERIFIER rewards and the agent runner).
// In verifier.cc.
boost::asio::awaitable<std::optional<Failure>> RunVerifier(Attempt& a);
// Runs `command` to its exit in the episode's sandbox (its cwd defaults to the attempt's workdir). With
// `host_keeps_time` false the host only gets its ceiling as the timeout and the call no deadline: the caller
// keeps the time (in generation time).
boost::asio::awaitable<absl::StatusOr<ExecOutcome>> Exec(Attempt& a, v1::Command command, std::string stdin_data,
                                                         absl::Duration timeout, size_t output_limit,
                                                         bool host_keeps_time = true);
// Sets the attempt's reward, step rewards and details.
void SetReward(Attempt& a, const RewardOutcome& r);
// `.corral/task.json`: the task's id, episode id and seed — and, `for_verifier`, its answer and metadata, which
// the agent phase never sees (the verifier phase writes the file anew once the agent's processes are gone).
inline constexpr char kTaskJsonPath[] = ".corral/task.json";
std::string TaskJson(const v1::Task& task, const v1::EpisodeIds& ids, bool for_verifier);
// Where the agent runner writes the task's instruction: the task's instruction_path, else .corral/instruction.md
// (relative paths are under the sandbox's home).
std::string InstructionPath(const v1::Task& task);
// Uploads `files` into the sandbox before `deadline`; a failure is infra in `phase`.
boost::asio::awaitable<std::optional<Failure>> Upload(Attempt& a, const std::vector<v1::InlineFile>& files,
                                                      absl::Time deadline, v1::EpisodePhase phase);

}  // namespace corral::scheduler
