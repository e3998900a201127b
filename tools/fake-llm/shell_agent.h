// The fake's shell-agent script, for tests of installed agent harnesses (Claude Code, Codex CLI, OpenCode): a
// stand-in model that drives whatever harness calls it. It finds the harness's own shell tool among the offered
// tools, calls it once with the command the task gives after "RUN:", and once the tool's result is in the
// conversation answers with the text after "ANSWER:". A task without "RUN:" gets the answer straight away (the
// model that claims success without doing the work), unless a default command is given (a task written for
// people, such as a Harbor task's instruction, run with the command that solves it).
#pragma once

#include <optional>
#include <string>

#include "boost/json.hpp"

namespace corral::fakellm {

struct ShellAgentPlan {
  bool tool_call = false;
  std::string tool_name;  // the shell tool called
  std::string arguments;  // its JSON arguments
  std::string reply;      // otherwise
};

// `body` is a chat-completions request. nullopt when it offers no shell tool and asks for no task (a harness's
// side call: a title, a summary), which the fake answers as usual.
// `default_command` is run when the task gives no "RUN:" line ("" = none).
std::optional<ShellAgentPlan> PlanShellAgent(const boost::json::object& body, const std::string& default_command = "");

}  // namespace corral::fakellm
