// What MCP tool servers (Task.mcp_servers, mcp_tools.h) add to an attempt: the tools offered to the model and
// the ids of its JSON-RPC requests. The servers themselves are resident processes ("mcp:<server>").
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace corral::scheduler {

struct McpState {
  // MCP tools offered to the model, by offered name ("<server>__<tool>"): the server and its name for the tool.
  struct Tool {
    std::string server;
    std::string tool;
  };
  std::map<std::string, Tool> tools;
  int64_t next_id = 1;  // JSON-RPC ids of the attempt's MCP requests
};

}  // namespace corral::scheduler
