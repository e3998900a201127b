// The Anthropic Messages API (POST /v1/messages) in front of upstreams that speak chat completions (vLLM,
// SGLang): a request is translated to a chat body, which then goes through the proxy exactly as a chat call
// (policy, routing, pauses, recording, token capture); the answer, whole or streamed, is translated back. Pure
// functions and one small stream state, no I/O. What survives the translation is listed in docs/proxy.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "boost/json.hpp"
#include "services/proxy/dialect.h"

namespace corral::proxy::anthropic {

// The chat-completions body for a Messages request. INVALID_ARGUMENT naming the field for what is malformed;
// what has no chat form (server tools, thinking, documents, unknown fields) is left out and written to `notes`
// (optional; Dialect::notes).
absl::StatusOr<boost::json::object> ToChat(const boost::json::object& request, boost::json::object* notes = nullptr);

// A model list in Anthropic's shape (GET /v1/models with an anthropic-version header).
std::string ModelList(const std::vector<std::string>& ids);

// A whole chat completion as a Messages response (a reasoning model's reasoning as a first `thinking` block).
boost::json::object FromChat(const boost::json::object& completion);

// Anthropic's error shape ({"type": "error", "error": {"type", "message"}}), typed by the HTTP status; the same
// as an SSE `error` event for a stream already started.
std::string ErrorBody(int http_status, absl::string_view message);
std::string ErrorEvent(int http_status, absl::string_view message);

// A chat stream's chunks as the Messages stream's events: message_start, content blocks (thinking, text, tool_use) with
// their deltas, message_delta (stop reason, usage) and message_stop.
class StreamTranslator final : public ChatStreamWalker {
 public:
  // The events for one chat chunk (possibly none).
  std::string Chunk(const boost::json::object& chunk) { return Walk(chunk); }
  // Closes the open block and the message; called once the chat stream is complete.
  std::string End();

 private:
  void Begin(const boost::json::object& chunk, std::string& out) override;
  void Reasoning(const std::string& text, std::string& out) override;
  void Text(const std::string& text, std::string& out) override;
  void ToolCall(const chat_json::ToolCall& call, bool first, std::string& out) override;
  void Open(boost::json::object block, std::string& out);
  void Close(std::string& out);

  int open_ = -1;           // the open content block's index, -1 when none
  std::string open_type_;   // its type: "thinking", "text" or "tool_use"
  int64_t open_call_ = -1;  // the chat tool_call index of the open tool_use block
  int next_index_ = 0;
};

// The Messages API as a Dialect.
class MessagesDialect final : public Dialect {
 public:
  absl::StatusOr<boost::json::object> ToChat(const boost::json::object& request) override {
    notes_.clear();
    return anthropic::ToChat(request, &notes_);
  }
  std::string Whole(const boost::json::object& completion) override {
    return boost::json::serialize(FromChat(completion));
  }
  std::string Chunk(const boost::json::object& chunk) override { return stream_.Chunk(chunk); }
  std::string End() override { return stream_.End(); }
  std::string ErrorBody(int http_status, absl::string_view message) const override {
    return anthropic::ErrorBody(http_status, message);
  }
  std::string ErrorEvent(int http_status, absl::string_view message) const override {
    return anthropic::ErrorEvent(http_status, message);
  }
  // POST /v1/messages/count_tokens: {"input_tokens": N}.
  absl::StatusOr<std::string> CountTokens(const boost::json::object& request) override;
  std::string ModelList(const std::vector<std::string>& ids) const override { return anthropic::ModelList(ids); }

 private:
  StreamTranslator stream_;
};

}  // namespace corral::proxy::anthropic
