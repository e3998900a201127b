// The OpenAI chat format as the scheduler's own runners speak it: request bodies built from the conversation
// and the task's parameters, and replies parsed into the assistant message (kept verbatim, so the next request
// extends the recorded prefix exactly) and its tool calls. Plain functions, no I/O.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "boost/json.hpp"
#include "corral/v1/scheduler.pb.h"

namespace corral::scheduler {

// The conversation a task starts with (its prompt as one user message, or its messages).
boost::json::array InitialMessages(const v1::Task& task);
// The tools array offered to the model (built-in descriptions and schemas where the task gives none).
boost::json::array ToolsJson(const v1::Task& task);
// {"model", "messages", "tools"?, ...task params}.
std::string ChatBody(const std::string& model, const std::string& params_json, const boost::json::array& messages,
                     const boost::json::array& tools);

struct ToolCallRequest {
  std::string id;
  std::string name;
  std::string arguments;
};
struct ChatReply {
  boost::json::object message;  // the assistant message as returned
  std::string content;
  std::vector<ToolCallRequest> tool_calls;
  std::string finish_reason;
};
// The first choice of a chat completion; INVALID_ARGUMENT when the body is not one.
absl::StatusOr<ChatReply> ParseChatReply(const std::string& body);
// The error message of an OpenAI-shaped error body (or the body itself, shortened).
std::string ErrorMessage(const std::string& body);
// True for the proxy's budget refusal (HTTP 400 whose body says finish_reason "length").
bool IsBudgetExhausted(int status, const std::string& body);

// A tool result message.
boost::json::object ToolMessage(const std::string& tool_call_id, const std::string& content);
// The arguments object of a tool call; INVALID_ARGUMENT when it is not a JSON object.
absl::StatusOr<boost::json::object> ParseArguments(const std::string& arguments);
// A string field of a tool's arguments ("" when absent or not a string).
std::string StringArg(const boost::json::object& args, const char* name);

}  // namespace corral::scheduler
