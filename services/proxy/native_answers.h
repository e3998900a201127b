// Native pass-through (an upstream that serves an agent API itself, UpstreamSpec.dialects): the agent's request
// goes upstream untranslated and the upstream's answer back as it came; these read that answer — whole, or
// gathered from its stream — as a chat completion, which is what the call's record holds. Pure: no I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "boost/json.hpp"

namespace corral::proxy {

// A whole answer as a chat completion (message text, tool calls, finish reason, usage); nullopt when it is not of
// the API's shape. A Responses API Response object; an Anthropic message.
std::optional<boost::json::object> ResponseToChat(const boost::json::object& response);
std::optional<boost::json::object> MessageToChat(const boost::json::object& message);
// A Gemini GenerateContentResponse (its first candidate; thought parts are not the answer).
std::optional<boost::json::object> GenerateContentToChat(const boost::json::object& response);

// A native stream's events, gathered into the whole answer: Responses' response.completed (or .incomplete /
// .failed) carries it; a Messages stream is assembled from message_start, its content blocks and deltas, and
// message_delta, and is whole at message_stop; a Gemini stream's responses are pieces of one, gathered part by
// part, whole once one carried a finishReason.
class NativeStream {
 public:
  enum class Shape { kResponses, kMessages, kGemini };
  explicit NativeStream(Shape shape) : shape_(shape) {}
  // One event's data.
  void Add(const boost::json::object& data);
  // The whole answer once the stream carried it.
  const std::optional<boost::json::object>& answer() const { return answer_; }
  // The message of an error event, "" when none came.
  const std::string& error() const { return error_; }

 private:
  Shape shape_;
  std::optional<boost::json::object> answer_;
  std::string error_;
  void AddGemini(const boost::json::object& data);
  void AddGeminiPiece(const boost::json::object& candidate);  // one response's first candidate

  boost::json::object message_;       // messages, gemini: the answer being assembled
  std::vector<std::string> partial_;  // messages: each tool_use block's input JSON so far
};

}  // namespace corral::proxy
