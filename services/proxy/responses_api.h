// OpenAI's Responses API (POST /v1/responses, what Codex-style agents call) in front of upstreams that speak
// chat completions: stateless (the whole input each time; previous_response_id is refused), translated to a
// chat body and back, whole or streamed. What survives the translation is listed in docs/proxy.md.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "boost/json.hpp"
#include "services/proxy/dialect.h"

namespace corral::proxy::responses {

// The chat names of namespaced functions ("<namespace>__<name>") and what the agent calls them.
using NamespacedNames = std::map<std::string, std::pair<std::string, std::string>>;

// The chat-completions body for a Responses request; INVALID_ARGUMENT naming the field for what is malformed or
// cannot be carried out (previous_response_id). Built-in tools the upstream cannot run (web search, computer use,
// code interpreter, …) and unknown fields are left out and written to `notes` (optional; Dialect::notes); a
// namespace's functions are offered as "<namespace>__<name>", recorded in `names` (optional).
absl::StatusOr<boost::json::object> ToChat(const boost::json::object& request, boost::json::object* notes = nullptr,
                                           NamespacedNames* names = nullptr);
// A whole chat completion as a Response object (a reasoning model's reasoning as a first reasoning item); calls of
// `names` are given back their namespace and name.
boost::json::object FromChat(const boost::json::object& completion, const NamespacedNames* names = nullptr);

class ResponsesDialect final : public Dialect, private ChatStreamWalker {
 public:
  absl::StatusOr<boost::json::object> ToChat(const boost::json::object& request) override {
    notes_.clear();
    names_.clear();
    return responses::ToChat(request, &notes_, &names_);
  }
  std::string Whole(const boost::json::object& completion) override {
    return boost::json::serialize(FromChat(completion, &names_));
  }
  // The stream: response.created, then per output item (a reasoning item with its reasoning_text, a message
  // with one output_text part, or a function call) its added / delta / done events, then response.completed
  // with the whole response.
  std::string Chunk(const boost::json::object& chunk) override { return Walk(chunk); }
  std::string End() override;
  std::string ErrorBody(int http_status, absl::string_view message) const override;
  std::string ErrorEvent(int http_status, absl::string_view message) const override;

 private:
  std::string Event(absl::string_view type, boost::json::object data);
  void Begin(const boost::json::object& chunk, std::string& out) override;
  void Reasoning(const std::string& text, std::string& out) override;
  void Text(const std::string& text, std::string& out) override;
  void ToolCall(const chat_json::ToolCall& call, bool first, std::string& out) override;
  void OpenReasoning(std::string& out);
  void OpenMessage(std::string& out);
  void OpenCall(const std::string& call_id, const std::string& name, std::string& out);
  void Close(std::string& out);
  boost::json::object Snapshot(const char* status) const;

  NamespacedNames names_;
  mutable int64_t sequence_ = 0;
  std::string id_, model_;
  int64_t created_ = 0;
  boost::json::array output_;  // finished items
  // The open item: -1 none; its kind, id and accumulated text or arguments.
  enum class Kind { kReasoning, kMessage, kCall };
  int open_ = -1;
  Kind open_kind_ = Kind::kMessage;
  std::string open_id_, open_call_id_, open_name_, open_text_;
  int64_t open_call_ = -1;  // the chat tool_call index of the open function_call item
};

}  // namespace corral::proxy::responses
