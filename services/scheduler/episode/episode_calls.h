// The floor of the episode wing: the calls every runner, the verifier, environments and tool servers make on an
// Attempt — a chat call through the proxy, an exec or upload in the sandbox, a permit of the limiter, the
// reward, the task's JSON, the generation-time deadlines — and the failures they share. Everything above this
// file (runners.cc, verifier.cc, env_runner.cc, mcp_tools.cc, persistent_tools.cc, env_relay.cc, branching.cc)
// stands on it; it includes nothing of theirs.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "boost/json/array.hpp"
#include "services/scheduler/episode/attempt.h"
#include "services/scheduler/episode/chat.h"
#include "services/scheduler/episode/reward.h"

namespace corral::scheduler {

// One chat call through the proxy with the session's token (under the LLM limit, in generation time, ended by a
// stop). A failure names what the proxy said.
struct ChatOutcome {
  std::optional<ChatReply> reply;
  bool budget_exhausted = false;
  std::optional<Failure> failure;
};
boost::asio::awaitable<ChatOutcome> Chat(Attempt& a, const boost::json::array& messages,
                                         const boost::json::array& tools);
// The model the episode's calls name: the session's, else the task's, else the scheduler's default.
std::string ModelOf(const Attempt& a);

// A permit of `limit` (the tool limit for one execution, the LLM limit for one call), or an empty one when there
// is no limiter or no such limit is configured. A stop withdraws the request.
boost::asio::awaitable<absl::StatusOr<ratelimiter::Permit>> TakePermit(Attempt& a, const std::string& limit,
                                                                       const std::string& key, absl::Duration wait);

// Runs `command` to its exit in the episode's sandbox (its cwd defaults to the attempt's workdir). With
// `host_keeps_time` false the host only gets its ceiling as the timeout and the call no deadline: the caller
// keeps the time (in generation time).
boost::asio::awaitable<absl::StatusOr<sandbox::ExecOutcome>> Exec(Attempt& a, v1::Command command,
                                                                  std::string stdin_data, absl::Duration timeout,
                                                                  size_t output_limit, bool host_keeps_time = true);
// Uploads `files` into the sandbox before `deadline`; a failure is infra in `phase`.
boost::asio::awaitable<std::optional<Failure>> Upload(Attempt& a, const std::vector<v1::InlineFile>& files,
                                                      absl::Time deadline, v1::EpisodePhase phase);

// Sets the attempt's reward, step rewards and details.
void SetReward(Attempt& a, const RewardOutcome& r);

// `.corral/task.json`: the task's id, episode id and seed — and, `for_verifier`, its answer and metadata, which
// the agent phase never sees (the verifier phase writes the file anew once the agent's processes are gone).
inline constexpr char kTaskJsonPath[] = ".corral/task.json";
std::string TaskJson(const v1::Task& task, const v1::EpisodeIds& ids, bool for_verifier);
// Where the agent runner writes the task's instruction: the task's instruction_path, else .corral/instruction.md
// (relative paths are under the sandbox's home).
std::string InstructionPath(const v1::Task& task);

// The HTTP exchange of a call whose time limit the scheduler keeps itself (in generation time) only gets this
// bound on stalls: a pause may hold the call that long.
inline constexpr absl::Duration kPauseSlack = absl::Hours(24);
// Returns once `deadline()` has passed while generation is not paused. The deadline may move later meanwhile
// (it counts generation time only); it is read again at each wake-up.
boost::asio::awaitable<void> UntilGenerationDeadline(const Attempt& a, std::function<absl::Time()> deadline);
// Stops the run (kTimeout) once the agent phase's deadline has passed in generation time. The stop cancels
// whatever the run waits on, so a race against it ends promptly.
boost::asio::awaitable<void> StopAtAgentDeadline(const Attempt& a);

// The failure of a step that a stop (cancel, timeout, lost host) cut short: infra in `phase`, unless the stop
// itself decides (ApplyStop).
Failure StoppedFailure(const Attempt& a, v1::EpisodePhase phase, const std::string& what);
// A FAILED result in phase ENVIRONMENT (the environment runner's and the MCP tools' failures).
Failure EnvironmentFailure(v1::FailureClass failure_class, std::string message);

}  // namespace corral::scheduler
