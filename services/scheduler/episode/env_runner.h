// The environment runner: the task's environment server (OpenEnv-style reset/step) driven turn by turn in the
// episode's sandbox, by the scheduler's model calls or by the trainer (trainer-driven environments).
#pragma once

#include <optional>

#include "boost/asio/awaitable.hpp"
#include "services/scheduler/episode/attempt.h"

namespace corral::scheduler {

boost::asio::awaitable<std::optional<Failure>> RunEnvironment(Attempt& a);

}  // namespace corral::scheduler
