// The fake as an upstream that serves OpenAI's Responses API itself (--native-responses, like vLLM and SGLang's
// /v1/responses): a Responses request is read as the fake's chat body, answered as any chat call would be, and the
// answer given back as a Response object or as the Responses stream's events. Written apart from the proxy's own
// translation, so that a test of the proxy's native pass-through does not check the proxy against itself.
#pragma once

#include <string>
#include <vector>

#include "boost/json.hpp"

namespace corral::fakellm {

// instructions → a system message; input (a string, or message / function_call / function_call_output items) →
// messages; function tools → chat tools. `stream` is left out: the fake answers whole, then shapes the answer.
boost::json::object ResponsesAsChat(const boost::json::object& request);
// A whole chat completion as a Response object (a message item, or function_call items; usage).
boost::json::object ResponseOf(const boost::json::object& completion);
// The same as the Responses stream: response.created, each item's added / delta / done events, response.completed;
// each a complete "event: …\ndata: …\n\n".
std::vector<std::string> ResponseEvents(const boost::json::object& completion);

}  // namespace corral::fakellm
