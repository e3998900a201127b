// An agent API that the proxy serves over chat-completions upstreams (Anthropic's Messages API, OpenAI's
// Responses API): the request is translated to a chat body, which then goes through the proxy exactly as a chat
// call (policy, routing, pauses, recording, token capture), and the answer, whole or streamed, is translated
// back. One per call: a stream's translation keeps state. Pure: no I/O.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "boost/json.hpp"

namespace corral::proxy {

class Dialect {
 public:
  virtual ~Dialect() = default;
  // The chat-completions body; INVALID_ARGUMENT naming the field for what cannot be carried out. What has no
  // meaning for a chat upstream (a server tool, a thinking setting, an unknown field) is left out and noted.
  virtual absl::StatusOr<boost::json::object> ToChat(const boost::json::object& request) = 0;
  // What the last ToChat left out or changed (LlmCall.translation_json); empty when nothing.
  const boost::json::object& notes() const { return notes_; }
  // A whole chat completion as the API's answer (serialized).
  virtual std::string Whole(const boost::json::object& completion) = 0;
  // The SSE events for one chat chunk (possibly none), and those that end the stream once it is complete.
  virtual std::string Chunk(const boost::json::object& chunk) = 0;
  virtual std::string End() = 0;
  // An error in the API's own shape, as a body and as an SSE event of a stream already started.
  virtual std::string ErrorBody(int http_status, absl::string_view message) const = 0;
  virtual std::string ErrorEvent(int http_status, absl::string_view message) const = 0;
  // The answer to the API's token-count call (chat_json::EstimateTokens of the request's translation), or
  // UNIMPLEMENTED when the API has none; INVALID_ARGUMENT as ToChat.
  virtual absl::StatusOr<std::string> CountTokens(const boost::json::object& request);
  // A model list in the API's shape (OpenAI's unless the API has its own).
  virtual std::string ModelList(const std::vector<std::string>& ids) const;

 protected:
  boost::json::object notes_;
};

// Reading chat completions and chunks, for the dialects.
namespace chat_json {

// INVALID_ARGUMENT "<field>: <what>".
absl::Status Bad(absl::string_view field, absl::string_view what);
// The chat body a translation starts from: the request's model (a string; absent: the session's, by policy).
absl::StatusOr<boost::json::object> ChatWithModel(const boost::json::object& request);
// Notes of a translation (Dialect::notes), each a no-op on a null `notes`: a request field with no meaning for a
// chat upstream, ignored (kept with its value); a tool, block or item left out, and why; a name changed.
void NoteIgnored(boost::json::object* notes, absl::string_view field, const boost::json::value& value);
void NoteDropped(boost::json::object* notes, absl::string_view field, absl::string_view type, absl::string_view why);
void NoteRenamed(boost::json::object* notes, absl::string_view chat_name, const boost::json::value& original);
// Notes every top-level field of `request` not in `known` as ignored.
void NoteUnknownFields(boost::json::object* notes, const boost::json::object& request,
                       std::initializer_list<absl::string_view> known);
// A rough estimate of a chat body's input tokens (the token-count calls): a quarter of the bytes of its messages
// and tools as JSON, rounded up. No tokenizer is consulted and nothing is sent upstream.
int64_t EstimateTokens(const boost::json::object& chat);
// One typed server-sent event: "event: <type>" and `data` (with its "type" set) as JSON.
std::string SseEvent(absl::string_view type, boost::json::object data);
// An integer member (0 when absent or of another type); strings: http::StringOf.
int64_t Int(const boost::json::value* v);
// Calls `each(element, "<field>[k]")` for every element of the array `v` (absent or null: none), stopping at the
// first error; INVALID_ARGUMENT when `v` is not an array or an element not an object.
absl::Status EachObject(const boost::json::value* v, absl::string_view field,
                        const std::function<absl::Status(const boost::json::object&, const std::string&)>& each);
// The first choice of a completion or chunk; null when there is none.
const boost::json::object* FirstChoice(const boost::json::object& completion);
// The tool calls of a message or a delta (a chunk's carry an index and pieces of the arguments).
struct ToolCall {
  int64_t index = 0;
  std::string id, name, arguments;
};
std::vector<ToolCall> ToolCalls(const boost::json::object& message);
// The reasoning text of a message or a delta (vLLM and SGLang's `reasoning_content`, or `reasoning`).
std::string Reasoning(const boost::json::object& message);
// usage.prompt_tokens and usage.completion_tokens, when the completion or chunk has usage.
std::optional<std::pair<int64_t, int64_t>> Usage(const boost::json::object& completion);

}  // namespace chat_json

// Walks a chat stream's chunks for a dialect's translation: Begin once (with the first chunk), Reasoning for each
// piece of reasoning text (a reasoning model's, before its answer), Text for each piece of text, ToolCall for each
// piece of a tool call (`first` on its first piece); keeps the finish reason and the usage.
class ChatStreamWalker {
 public:
  virtual ~ChatStreamWalker() = default;
  // The events for one chunk.
  std::string Walk(const boost::json::object& chunk);

 protected:
  virtual void Begin(const boost::json::object& chunk, std::string& out) = 0;
  virtual void Reasoning(const std::string& text, std::string& out) = 0;
  virtual void Text(const std::string& text, std::string& out) = 0;
  virtual void ToolCall(const chat_json::ToolCall& call, bool first, std::string& out) = 0;
  // Begins with an empty chunk when no chunk came (for End).
  void EnsureBegun(std::string& out);

  std::string finish_reason_;  // the chat finish_reason, "" until one came
  int64_t input_tokens_ = 0, output_tokens_ = 0;

 private:
  bool begun_ = false;
  std::vector<int64_t> calls_;  // tool call indexes seen
};

}  // namespace corral::proxy
