// The fake as an upstream that serves Anthropic's Messages API itself (--native-messages): a Messages request is
// read as the fake's chat body, answered as any chat call would be, and the answer given back as a Messages
// answer or as the Messages stream's events. Written apart from the proxy's own translation, like
// native_responses.h.
#pragma once

#include <string>
#include <vector>

#include "boost/json.hpp"

namespace corral::fakellm {

// system → a system message; text / tool_use / tool_result blocks → messages, tool calls and tool messages;
// tools (input_schema) → chat function tools. `stream` is left out: the fake answers whole, then shapes it.
boost::json::object MessagesAsChat(const boost::json::object& request);
// A whole chat completion as a Messages answer (text or tool_use blocks, stop reason, usage).
boost::json::object MessageOf(const boost::json::object& completion);
// The same as the Messages stream: message_start, each block's start / deltas / stop, message_delta,
// message_stop; each a complete "event: …\ndata: …\n\n".
std::vector<std::string> MessageEvents(const boost::json::object& completion);

}  // namespace corral::fakellm
