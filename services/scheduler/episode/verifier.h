// The reward of an episode that ran to its end: the task's built-in function on the final message, or its
// verifier in the sandbox, which starts from a clean slate (docs/reward-integrity.md).
#pragma once

#include <optional>

#include "boost/asio/awaitable.hpp"
#include "services/scheduler/episode/attempt.h"

namespace corral::scheduler {

// The reward of a finished conversation: the task's built-in function on the final message, or its verifier.
boost::asio::awaitable<std::optional<Failure>> Reward(Attempt& a);
// Ends every process of the agent phase, clears the reward location and the task's replace_paths, uploads the
// verifier's files, runs it and reads the reward from what it wrote (VERIFIER rewards and the agent runner).
boost::asio::awaitable<std::optional<Failure>> RunVerifier(Attempt& a);

}  // namespace corral::scheduler
