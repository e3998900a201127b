// The environment server's relay: a small python3 program run in the episode's sandbox (an ExecInteractive kept
// open; episode/scripts/env_relay.py) that starts the task's environment server, waits for its health check, and
// carries each reset and step the scheduler writes on its stdin to the server's port or unix socket — over an
// OpenEnv WebSocket session or plain HTTP (with the server's cookies) — from inside the sandbox, so the
// sandbox's network policy and process limits hold. It reports a server that exited (with its log's tail), so
// a crash is told apart from a malformed answer. Used by one coroutine at a time.
#pragma once

#include <string>
#include <variant>

#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "services/scheduler/episode/attempt.h"

namespace corral::scheduler {

// An answer of the environment server to a reset or step: its body ({"observation", "reward", "done"}) and how it
// was asked ("POST /step", "step over the WebSocket session"), for messages.
struct EnvHttpReply {
  int status = 0;
  std::string body;
  std::string call;
};

// Starts the relay and, through it, the server of `spec`; returns once the server's health check answered 200
// and the episode's transport is chosen (spec.transport: a WebSocket session on ws_path when the server accepts
// it, else plain HTTP). Failure: INFRA when the server exits, is not ready within spec.ready_timeout or the
// sandbox is gone; ENVIRONMENT when the sandbox has no python3 to run the relay, or the task asks for a WebSocket
// session the server refuses.
boost::asio::awaitable<std::optional<Failure>> StartEnvServer(Attempt& a, const v1::EnvServerSpec& spec);

// A reset or step (`kind`) with its HTTP body ({"seed", ...} or {"action": ...}), over the episode's transport,
// answered within `timeout`. Failure (INFRA, phase ENVIRONMENT) when the server exited, refused the connection,
// dropped the session or did not answer in time — then the relay and server are stopped; ENVIRONMENT, quoting
// it, when the server answered with an error frame.
boost::asio::awaitable<std::variant<EnvHttpReply, Failure>> EnvCall(Attempt& a, const std::string& kind,
                                                                    const std::string& body, absl::Duration timeout);

}  // namespace corral::scheduler
