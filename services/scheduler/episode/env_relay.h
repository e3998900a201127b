// The environment server's relay: a small python3 program run in the episode's sandbox (an ExecInteractive kept
// open) that starts the task's environment server, waits for its health check, and carries each HTTP request
// the scheduler writes on its stdin to the server's port or unix socket — from inside the sandbox, so the
// sandbox's network policy and process limits hold. It reports a server that exited (with its log's tail), so
// a crash is told apart from a malformed answer. Used by one coroutine at a time.
#pragma once

#include <string>
#include <variant>

#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "services/scheduler/episode/attempt.h"

namespace corral::scheduler {

// An HTTP answer of the environment server.
struct EnvHttpReply {
  int status = 0;
  std::string body;
};

// Starts the relay and, through it, the server of `spec`; returns once the server's health check answered 200.
// Failure: INFRA when the server exits, is not ready within spec.ready_timeout or the sandbox is gone;
// ENVIRONMENT when the sandbox has no python3 to run the relay.
boost::asio::awaitable<std::optional<Failure>> StartEnvServer(Attempt& a, const v1::EnvServerSpec& spec);

// One request to the started server, answered within `timeout`. Failure (INFRA, phase ENVIRONMENT) when the
// server exited, refused the connection or did not answer in time — then the relay and server are stopped.
boost::asio::awaitable<std::variant<EnvHttpReply, Failure>> EnvRequest(Attempt& a, const std::string& method,
                                                                       const std::string& path, const std::string& body,
                                                                       absl::Duration timeout);

}  // namespace corral::scheduler
