// The Anthropic Messages API (POST /v1/messages) in front of upstreams that speak chat completions (vLLM,
// SGLang): a request is translated to a chat body, which then goes through the proxy exactly as a chat call
// (policy, routing, pauses, recording, token capture); the answer, whole or streamed, is translated back. Pure
// functions and one small stream state, no I/O. What survives the translation is listed in docs/proxy.md.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "boost/json.hpp"

namespace corral::proxy::anthropic {

// The chat-completions body for a Messages request. INVALID_ARGUMENT naming the field for what cannot be
// translated (a server tool, a document block) or is malformed.
absl::StatusOr<boost::json::object> ToChat(const boost::json::object& request);

// A whole chat completion as a Messages response.
boost::json::object FromChat(const boost::json::object& completion);

// Anthropic's error shape ({"type": "error", "error": {"type", "message"}}), typed by the HTTP status; the same
// as an SSE `error` event for a stream already started.
std::string ErrorBody(int http_status, absl::string_view message);
std::string ErrorEvent(int http_status, absl::string_view message);

// A chat stream's chunks as the Messages stream's events: message_start, content blocks (text, tool_use) with
// their deltas, message_delta (stop reason, usage) and message_stop.
class StreamTranslator {
 public:
  // The events for one chat chunk (possibly none).
  std::string Chunk(const boost::json::object& chunk);
  // Closes the open block and the message; called once the chat stream is complete.
  std::string End();

 private:
  void Start(const boost::json::object& chunk, std::string& out);
  void Open(boost::json::object block, std::string& out);
  void Close(std::string& out);

  bool started_ = false;
  int open_ = -1;             // the open content block's index, -1 when none
  bool open_is_text_ = false;
  int next_index_ = 0;
  std::map<int64_t, int> tool_blocks_;  // chat tool_call index -> content block index
  std::string stop_reason_;
  int64_t input_tokens_ = 0, output_tokens_ = 0;
};

}  // namespace corral::proxy::anthropic
