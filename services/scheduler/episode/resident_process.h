// Starting a process kept open in the episode's sandbox for the attempt's life (resident_registry.h): the
// persistent tools' interpreters, MCP servers over stdio and the environment relay share this one start — an
// ExecInteractive whose lifetime is the episode's, its stderr optionally to a log under the home — and the
// embedded programs they run. The protocol on top is each user's own.
#pragma once

#include <string>
#include <variant>

#include "boost/asio/awaitable.hpp"
#include "boost/json.hpp"
#include "corral/v1/scheduler.pb.h"
#include "services/scheduler/episode/attempt.h"

namespace corral::scheduler {

// What to start.
struct ResidentSpec {
  std::string key;
  v1::Command command;  // its timeout is set to the episode's remaining time; an empty cwd is the workdir
  std::string marker;   // see ResidentProcesses::Entry
  // Non-empty: stderr is appended to this file (relative to the home; its directory is made first), so stdout is
  // the protocol's alone.
  std::string stderr_log;
  v1::EpisodePhase phase = v1::EPISODE_PHASE_TOOL;  // where a failure to start is reported
  std::string what;                                 // "the py session", "MCP server 'x'": for messages
  // A start the host refuses for the command itself (NOT_FOUND, INVALID_ARGUMENT: no such program) is the
  // environment's fault, said with this prefix; empty: infra like any other failure.
  std::string cannot_start;
};

// Starts `spec` in the attempt's sandbox and registers it under spec.key (replacing what was there): the entry,
// or why it could not start.
boost::asio::awaitable<std::variant<ResidentProcesses::Entry, Failure>> StartResident(Attempt& a,
                                                                                      const ResidentSpec& spec);

// A marker a process prints after each answer: `prefix`, 24 random hex digits, "__".
std::string RandomMarker(const std::string& prefix);

// The embedded program `name` (episode/scripts/: persistent_bash.sh, persistent_python.py, env_relay.py).
std::string EpisodeScript(const std::string& name);

// A relay run in the sandbox (scripts/sandbox_server.py, then `script`: env_relay.py, mcp_http.py) that starts
// `server` as its child, its output appended to `log`, and reaches it on `port` or else `unix_socket` (paths as
// the sandbox sees them): python3 with the relay's configuration, `extra` merged into it.
v1::Command RelayCommand(const std::string& script, const v1::Command& server, uint32_t port,
                         const std::string& unix_socket, const std::string& log, boost::json::object extra);

// `path` under the sandbox's home `home` when relative (Attempt::InSandbox).
std::string UnderHome(const std::string& home, const std::string& path);

}  // namespace corral::scheduler
