// MCP tool servers (Task.mcp_servers) in the episode's sandbox: each runs over stdio (newline-delimited JSON-RPC
// on an ExecInteractive kept open, its stderr to .corral/mcp-<name>.log) or, when it listens, behind a relay
// that speaks MCP's streamable HTTP to it and stdio to the scheduler (scripts/mcp_http.py). Each is initialized
// and its tools listed once, and each tool call is a tools/call under the tool limit with a timeout that acts (the
// model is told, the request cancelled, the server kept). A server that exits is started again on its next call. The
// agent runner gets the same servers as an MCP configuration file instead. Used by one coroutine at a time.
#pragma once

#include <optional>
#include <string>
#include <variant>

#include "boost/asio/awaitable.hpp"
#include "boost/json.hpp"
#include "services/scheduler/episode/attempt.h"

namespace corral::scheduler {

// Starts the task's MCP servers, lists their tools and appends them to `tools` as OpenAI tools named
// "<server>__<tool>" (recorded in a.mcp.tools). Failure: ENVIRONMENT when a server cannot start or answers
// outside the protocol, INFRA when the sandbox is gone.
boost::asio::awaitable<std::optional<Failure>> StartMcpServers(Attempt& a, boost::json::array& tools);

// Calls the MCP tool offered as `name` with `arguments` (a JSON object's text): the tool message's content
// (errors included: they are for the model), or an infra failure.
boost::asio::awaitable<std::variant<std::string, Failure>> CallMcpTool(Attempt& a, const std::string& name,
                                                                       const std::string& arguments);

// The agent runner's MCP configuration ({"mcpServers": {name: {"command", "args", "env"}}}), the shape Claude
// Code, Cursor and most MCP clients read; a server over HTTP appears as its relay (a stdio server). `home`: the
// sandbox's home, under which relative paths are.
std::string McpConfigJson(const v1::Task& task, const std::string& home);

// The OpenAI function name for `tool` of `server`: "<server>__<tool>", other characters than [A-Za-z0-9_-] as
// '_', at most 64 characters.
std::string McpToolName(const std::string& server, const std::string& tool);

}  // namespace corral::scheduler
