// The three runners (single_turn, tool_loop, agent) and the verifier, as coroutines over an Attempt whose
// session (and, when needed, sandbox) the driver has set up. Each returns nullopt when the episode ran to its
// reward (set in attempt.result), or why it ended early.
#pragma once

#include <optional>

#include "boost/asio/awaitable.hpp"
#include "services/scheduler/attempt.h"

namespace corral::scheduler {

boost::asio::awaitable<std::optional<Failure>> RunSingleTurn(Attempt& a);
boost::asio::awaitable<std::optional<Failure>> RunToolLoop(Attempt& a);
boost::asio::awaitable<std::optional<Failure>> RunAgent(Attempt& a);
// Uploads the verifier's files, runs it, reads the reward (VERIFIER rewards and the agent runner).
boost::asio::awaitable<std::optional<Failure>> RunVerifier(Attempt& a);
// Uploads `files` into the sandbox before `deadline`; a failure is infra in `phase`.
boost::asio::awaitable<std::optional<Failure>> Upload(Attempt& a, const std::vector<v1::InlineFile>& files,
                                                      absl::Time deadline, v1::EpisodePhase phase);

}  // namespace corral::scheduler
