// The runners that drive a conversation themselves (single_turn, tool_loop) or run the task's agent (agent), as
// coroutines over an Attempt whose session (and, when needed, sandbox) the driver has set up. Each returns
// nullopt when the episode ran to its reward (set in attempt.result), or why it ended early. The environment
// runner is in env_runner.h, the verifier in verifier.h; what they all call is in episode_calls.h.
#pragma once

#include <optional>

#include "boost/asio/awaitable.hpp"
#include "services/scheduler/episode/attempt.h"

namespace corral::scheduler {

boost::asio::awaitable<std::optional<Failure>> RunSingleTurn(Attempt& a);
boost::asio::awaitable<std::optional<Failure>> RunToolLoop(Attempt& a);
boost::asio::awaitable<std::optional<Failure>> RunAgent(Attempt& a);

}  // namespace corral::scheduler
