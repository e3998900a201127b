// Google's Gemini API (POST /v1beta/models/{model}:generateContent, :streamGenerateContent?alt=sse, :countTokens),
// the API Gemini CLI and every agent written with @google/genai speak, in front of upstreams that speak chat
// completions: `contents` with their parts, `systemInstruction`, `tools.functionDeclarations`, `toolConfig` and
// `generationConfig` are translated to a chat body, which then goes through the proxy exactly as a chat call; the
// answer, whole or streamed (one GenerateContentResponse per event), is translated back. The model is in the
// path, not the body: the handler puts it in the body as `model` (and `stream` for the streaming action) before
// ToChat. Pure functions and one small stream state, no I/O. docs/proxy.md lists what is carried.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "boost/json.hpp"
#include "services/proxy/dialect.h"

namespace corral::proxy::gemini {

// The chat-completions body for a generateContent request (with `model` and `stream` set from the path).
// INVALID_ARGUMENT naming the field for what is malformed; what has no chat form (built-in tools such as Google
// Search, code execution parts, thinking settings, safety settings, unknown fields) is left out and written to
// `notes` (optional; Dialect::notes).
absl::StatusOr<boost::json::object> ToChat(const boost::json::object& request, boost::json::object* notes = nullptr);

// A whole chat completion as a GenerateContentResponse: one candidate whose parts are the reasoning (a part with
// `thought`), the text and the function calls (each with the chat call's id), its finishReason, usageMetadata.
boost::json::object FromChat(const boost::json::object& completion);

// Google's error shape ({"error": {"code", "message", "status"}}), the status named from the HTTP one; and the
// same as the data of an SSE event, for a stream already started.
std::string ErrorBody(int http_status, absl::string_view message);
std::string ErrorEvent(int http_status, absl::string_view message);

// A chat sampling key's name in generationConfig ("max_tokens" → "maxOutputTokens"); a key Gemini has no name
// for keeps its own. (An upstream that serves this API itself gets the session's settings there.)
std::string SettingName(absl::string_view chat_key);

// A model list in Gemini's shape (GET /v1beta/models).
std::string ModelList(const std::vector<std::string>& ids);

// A chat stream's chunks as Gemini's stream: a GenerateContentResponse per piece of text or reasoning; a function
// call whole (Gemini never streams a call's arguments) in the chunk that ends the stream, with the finishReason
// and the usage.
class StreamTranslator final : public ChatStreamWalker {
 public:
  std::string Chunk(const boost::json::object& chunk) { return Walk(chunk); }
  std::string End();

 private:
  void Begin(const boost::json::object& chunk, std::string& out) override;
  void Reasoning(const std::string& text, std::string& out) override;
  void Text(const std::string& text, std::string& out) override;
  void ToolCall(const chat_json::ToolCall& call, bool first, std::string& out) override;
  // One event holding `parts` (and, at the end, the finish reason and the usage).
  std::string Event(boost::json::array parts, bool last) const;

  std::string id_, model_;
  std::map<int64_t, chat_json::ToolCall> calls_;  // by chat index, arguments gathered piece by piece
};

// The Gemini API as a Dialect.
class GeminiDialect final : public Dialect {
 public:
  absl::StatusOr<boost::json::object> ToChat(const boost::json::object& request) override {
    notes_.clear();
    return gemini::ToChat(request, &notes_);
  }
  std::string Whole(const boost::json::object& completion) override {
    return boost::json::serialize(FromChat(completion));
  }
  std::string Chunk(const boost::json::object& chunk) override { return stream_.Chunk(chunk); }
  std::string End() override { return stream_.End(); }
  std::string ErrorBody(int http_status, absl::string_view message) const override {
    return gemini::ErrorBody(http_status, message);
  }
  std::string ErrorEvent(int http_status, absl::string_view message) const override {
    return gemini::ErrorEvent(http_status, message);
  }
  // countTokens takes `contents` (and the rest of a generateContent body), or a whole `generateContentRequest`.
  absl::StatusOr<std::string> CountTokens(const boost::json::object& request) override;
  std::string ModelList(const std::vector<std::string>& ids) const override { return gemini::ModelList(ids); }

 private:
  StreamTranslator stream_;
};

}  // namespace corral::proxy::gemini
