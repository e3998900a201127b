// The fake as an upstream that serves Google's Gemini API itself (--native-gemini): a generateContent request is
// read as the fake's chat body, answered as any chat call would be, and the answer given back as a
// GenerateContentResponse, or as its stream (?alt=sse). Written apart from the proxy's own translation, like
// native_messages.h.
#pragma once

#include <string>
#include <vector>

#include "boost/json.hpp"

namespace corral::fakellm {

// systemInstruction → a system message; contents' text, functionCall and functionResponse parts → messages, tool
// calls and tool messages; functionDeclarations → chat function tools (their Schema types lower-cased).
boost::json::object GeminiAsChat(const boost::json::object& request);
// A whole chat completion as a GenerateContentResponse (text or functionCall parts, finishReason, usage).
boost::json::object GenerateContentOf(const boost::json::object& completion);
// The same as the stream: a response per word of text, then one with the calls, finishReason and usage; each a
// complete "data: …\r\n\r\n".
std::vector<std::string> GeminiEvents(const boost::json::object& completion);

}  // namespace corral::fakellm
