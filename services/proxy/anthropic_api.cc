#include "services/proxy/anthropic_api.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "libs/http/openai_json.h"

namespace corral::proxy::anthropic {
namespace {

namespace json = boost::json;
using chat_json::Bad;
using http::StringOf;

// The text of a string or of an array of blocks (system prompts, tool results): text blocks as they are
// (cache_control has no meaning upstream); a tool reference names its tool; other blocks (an image a tool
// returned, a document) cannot be text and are left out, noted.
absl::StatusOr<std::string> Text(const json::value& v, absl::string_view field, json::object* notes) {
  if (v.is_string()) return std::string(v.as_string());
  if (!v.is_array()) return Bad(field, "must be a string or an array of blocks");
  std::string out;
  for (size_t k = 0; k < v.as_array().size(); ++k) {
    const json::value& block = v.as_array()[k];
    if (!block.is_object()) return Bad(absl::StrCat(field, "[", k, "]"), "must be a block object");
    const std::string type = StringOf(block.as_object().if_contains("type"));
    std::string piece;
    if (type == "text") {
      piece = StringOf(block.as_object().if_contains("text"));
    } else if (type == "tool_reference") {
      piece = absl::StrCat("[tool: ", StringOf(block.as_object().if_contains("tool_name")), "]");
    } else {
      chat_json::NoteDropped(notes, absl::StrCat(field, "[", k, "]"), type, "a chat message here holds text only");
      piece = absl::StrCat("[", type, " omitted]");
    }
    absl::StrAppend(&out, out.empty() ? "" : "\n", piece);
  }
  return out;
}

// An image block as a chat content part (a data: URL, or the URL as it is).
absl::StatusOr<json::object> ImagePart(const json::object& block, absl::string_view field) {
  const json::value* source = block.if_contains("source");
  if (source == nullptr || !source->is_object()) return Bad(field, "an image needs a source");
  const json::object& s = source->as_object();
  const std::string type = StringOf(s.if_contains("type"));
  std::string url;
  if (type == "base64") {
    url = absl::StrCat("data:", StringOf(s.if_contains("media_type")), ";base64,", StringOf(s.if_contains("data")));
  } else if (type == "url") {
    url = StringOf(s.if_contains("url"));
  } else {
    return Bad(field, absl::StrCat("image source type '", type, "' cannot be translated"));
  }
  return json::object{{"type", "image_url"}, {"image_url", json::object{{"url", url}}}};
}

// One Messages message as chat messages: a user turn's tool results become tool messages (first, as chat
// wants them right after the assistant's tool calls), its text and images one user message; an assistant turn
// one message with its text and tool calls; a system (or developer) message, which harnesses put anywhere in
// the conversation (Claude Code's environment block), a system message where it stands. Thinking blocks and the
// blocks of server tools (their calls and results) have no chat form: left out, noted.
absl::Status AddMessage(const json::object& m, const std::string& field, json::array& out, json::object* notes) {
  const std::string role = StringOf(m.if_contains("role"));
  const json::value* content = m.if_contains("content");
  if (role == "system" || role == "developer") {
    if (content == nullptr) return Bad(field + ".content", "is required");
    auto text = Text(*content, field + ".content", notes);
    if (!text.ok()) return text.status();
    out.push_back(json::object{{"role", "system"}, {"content", *std::move(text)}});
    return absl::OkStatus();
  }
  if (role != "user" && role != "assistant") return Bad(field + ".role", "must be user, assistant or system");
  if (content == nullptr) return Bad(field + ".content", "is required");
  if (content->is_string()) {
    out.push_back(json::object{{"role", role}, {"content", content->as_string()}});
    return absl::OkStatus();
  }
  if (!content->is_array()) return Bad(field + ".content", "must be a string or an array of blocks");
  std::string text;
  json::array parts, tool_calls;
  bool has_image = false;
  for (size_t k = 0; k < content->as_array().size(); ++k) {
    const std::string at = absl::StrCat(field, ".content[", k, "]");
    const json::value& b = content->as_array()[k];
    if (!b.is_object()) return Bad(at, "must be a block object");
    const json::object& block = b.as_object();
    const std::string type = StringOf(block.if_contains("type"));
    if (type == "text") {
      const std::string t = StringOf(block.if_contains("text"));
      absl::StrAppend(&text, text.empty() ? "" : "\n", t);
      parts.push_back(json::object{{"type", "text"}, {"text", t}});
    } else if (type == "image" && role == "user") {
      auto part = ImagePart(block, at);
      if (!part.ok()) {  // a file id or a source type chat cannot take
        chat_json::NoteDropped(notes, at, type, part.status().message());
        continue;
      }
      parts.push_back(*std::move(part));
      has_image = true;
    } else if (type == "tool_result" && role == "user") {
      std::string result;
      if (const json::value* c = block.if_contains("content"); c != nullptr) {
        auto t = Text(*c, at + ".content", notes);
        if (!t.ok()) return t.status();
        result = *std::move(t);
      }
      if (const json::value* e = block.if_contains("is_error"); e != nullptr && e->is_bool() && e->as_bool()) {
        result = absl::StrCat("Error: ", result);
      }
      out.push_back(json::object{
          {"role", "tool"}, {"tool_call_id", StringOf(block.if_contains("tool_use_id"))}, {"content", result}});
    } else if (type == "tool_use" && role == "assistant") {
      const json::value* input = block.if_contains("input");
      tool_calls.push_back(
          json::object{{"id", StringOf(block.if_contains("id"))},
                       {"type", "function"},
                       {"function", json::object{{"name", StringOf(block.if_contains("name"))},
                                                 {"arguments", input != nullptr ? json::serialize(*input) : "{}"}}}});
    } else if (type == "thinking" || type == "redacted_thinking") {
      chat_json::NoteDropped(notes, at, type, "the model's earlier thinking is not sent back to a chat upstream");
    } else {
      chat_json::NoteDropped(notes, at, type,
                             absl::StrCat("a '", type, "' block in a ", role, " message has no chat form"));
    }
  }
  if (role == "assistant") {
    json::object msg{{"role", "assistant"}, {"content", text}};
    if (!tool_calls.empty()) msg["tool_calls"] = std::move(tool_calls);
    out.push_back(std::move(msg));
  } else if (!parts.empty()) {
    out.push_back(
        json::object{{"role", "user"}, {"content", has_image ? json::value(std::move(parts)) : json::value(text)}});
  }
  return absl::OkStatus();
}

absl::StatusOr<json::value> ToolChoice(const json::value& v) {
  if (!v.is_object()) return Bad("tool_choice", "must be an object");
  const std::string type = StringOf(v.as_object().if_contains("type"));
  if (type == "auto") return json::value("auto");
  if (type == "any") return json::value("required");
  if (type == "none") return json::value("none");
  if (type == "tool") {
    return json::value(json::object{{"type", "function"},
                                    {"function", json::object{{"name", StringOf(v.as_object().if_contains("name"))}}}});
  }
  return Bad("tool_choice.type", absl::StrCat("'", type, "' is not auto, any, tool or none"));
}

const char* StopReason(const std::string& finish_reason) {
  if (finish_reason == "length") return "max_tokens";
  if (finish_reason == "tool_calls" || finish_reason == "function_call") return "tool_use";
  return "end_turn";
}

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 409:
    case 410:
    case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return "api_error";
  }
}

std::string Event(absl::string_view type, json::object data) { return chat_json::SseEvent(type, std::move(data)); }

}  // namespace

absl::StatusOr<json::object> ToChat(const json::object& request, json::object* notes) {
  CORRAL_ASSIGN_OR_RETURN(json::object chat, chat_json::ChatWithModel(request));
  chat_json::NoteUnknownFields(notes, request,
                               {"model", "messages", "system", "tools", "tool_choice", "max_tokens", "temperature",
                                "top_p", "top_k", "stop_sequences", "stream"});
  const json::value* messages = request.if_contains("messages");
  if (messages == nullptr || !messages->is_array()) return Bad("messages", "is required (an array)");
  json::array out;
  if (const json::value* system = request.if_contains("system"); system != nullptr && !system->is_null()) {
    auto text = Text(*system, "system", notes);
    if (!text.ok()) return text.status();
    out.push_back(json::object{{"role", "system"}, {"content", *text}});
  }
  CORRAL_RETURN_IF_ERROR(chat_json::EachObject(messages, "messages", [&](const json::object& m, const std::string& at) {
    return AddMessage(m, at, out, notes);
  }));
  chat["messages"] = std::move(out);
  json::array functions;
  std::vector<std::string> dropped_tools;
  CORRAL_RETURN_IF_ERROR(
      chat_json::EachObject(request.if_contains("tools"), "tools", [&](const json::object& t, const std::string& at) {
        const std::string type = StringOf(t.if_contains("type"));
        if (!type.empty() && type != "custom") {  // a server tool (web search, code execution, computer use, …)
          chat_json::NoteDropped(notes, at, type, "a server tool cannot be run by a chat-completions upstream");
          dropped_tools.push_back(StringOf(t.if_contains("name")));
          return absl::OkStatus();
        }
        json::object fn{{"name", StringOf(t.if_contains("name"))}};
        if (const json::value* d = t.if_contains("description"); d != nullptr) fn["description"] = *d;
        const json::value* schema = t.if_contains("input_schema");
        fn["parameters"] = schema != nullptr ? *schema : json::value(json::object{{"type", "object"}});
        functions.push_back(json::object{{"type", "function"}, {"function", std::move(fn)}});
        return absl::OkStatus();
      }));
  if (!functions.empty()) chat["tools"] = std::move(functions);
  if (const json::value* choice = request.if_contains("tool_choice"); choice != nullptr && !choice->is_null()) {
    auto c = ToolChoice(*choice);
    if (!c.ok()) return c.status();
    const std::string named = StringOf(choice->as_object().if_contains("name"));
    if (!named.empty() && std::find(dropped_tools.begin(), dropped_tools.end(), named) != dropped_tools.end()) {
      chat_json::NoteDropped(notes, "tool_choice", "tool", "it names a server tool that was left out: auto instead");
      c = json::value("auto");
    }
    chat["tool_choice"] = *std::move(c);
    if (const json::value* d = choice->as_object().if_contains("disable_parallel_tool_use");
        d != nullptr && d->is_bool() && d->as_bool()) {
      chat["parallel_tool_calls"] = false;
    }
  }
  for (const char* key : {"max_tokens", "temperature", "top_p", "top_k"}) {
    if (const json::value* v = request.if_contains(key); v != nullptr && !v->is_null()) chat[key] = *v;
  }
  if (const json::value* stop = request.if_contains("stop_sequences"); stop != nullptr && !stop->is_null()) {
    chat["stop"] = *stop;
  }
  if (const json::value* stream = request.if_contains("stream");
      stream != nullptr && stream->is_bool() && stream->as_bool()) {
    chat["stream"] = true;
    chat["stream_options"] = json::object{{"include_usage", true}};
  }
  return chat;
}

absl::StatusOr<std::string> MessagesDialect::CountTokens(const json::object& request) {
  CORRAL_ASSIGN_OR_RETURN(json::object chat, anthropic::ToChat(request));
  return json::serialize(json::object{{"input_tokens", chat_json::EstimateTokens(chat)}});
}

std::string ModelList(const std::vector<std::string>& ids) {
  json::array data;
  for (const std::string& id : ids) {
    data.push_back(
        json::object{{"type", "model"}, {"id", id}, {"display_name", id}, {"created_at", "1970-01-01T00:00:00Z"}});
  }
  return json::serialize(json::object{{"data", std::move(data)},
                                      {"has_more", false},
                                      {"first_id", ids.empty() ? json::value(nullptr) : json::value(ids.front())},
                                      {"last_id", ids.empty() ? json::value(nullptr) : json::value(ids.back())}});
}

json::object FromChat(const json::object& completion) {
  json::array content;
  std::string finish;
  if (const json::object* choice = chat_json::FirstChoice(completion)) {
    finish = StringOf(choice->if_contains("finish_reason"));
    if (const json::value* m = choice->if_contains("message"); m != nullptr && m->is_object()) {
      if (std::string reasoning = chat_json::Reasoning(m->as_object()); !reasoning.empty()) {
        content.push_back(json::object{{"type", "thinking"}, {"thinking", reasoning}, {"signature", ""}});
      }
      if (std::string text = StringOf(m->as_object().if_contains("content")); !text.empty()) {
        content.push_back(json::object{{"type", "text"}, {"text", text}});
      }
      for (const chat_json::ToolCall& call : chat_json::ToolCalls(m->as_object())) {
        boost::system::error_code ec;
        json::value input = json::parse(call.arguments, ec);
        content.push_back(json::object{{"type", "tool_use"},
                                       {"id", call.id},
                                       {"name", call.name},
                                       {"input", !ec && input.is_object() ? input : json::value(json::object{})}});
      }
    }
  }
  const auto tokens = chat_json::Usage(completion).value_or(std::pair<int64_t, int64_t>(0, 0));
  json::object usage{{"input_tokens", tokens.first}, {"output_tokens", tokens.second}};
  return json::object{{"id", absl::StrCat("msg_", StringOf(completion.if_contains("id")))},
                      {"type", "message"},
                      {"role", "assistant"},
                      {"model", StringOf(completion.if_contains("model"))},
                      {"content", std::move(content)},
                      {"stop_reason", finish.empty() ? json::value(nullptr) : json::value(StopReason(finish))},
                      {"stop_sequence", nullptr},
                      {"usage", std::move(usage)}};
}

std::string ErrorBody(int http_status, absl::string_view message) {
  return json::serialize(json::object{
      {"type", "error"}, {"error", json::object{{"type", ErrorType(http_status)}, {"message", std::string(message)}}}});
}

std::string ErrorEvent(int http_status, absl::string_view message) {
  return Event(
      "error",
      json::object{{"error", json::object{{"type", ErrorType(http_status)}, {"message", std::string(message)}}}});
}

void StreamTranslator::Begin(const json::object& chunk, std::string& out) {
  json::object message{{"id", absl::StrCat("msg_", StringOf(chunk.if_contains("id")))},
                       {"type", "message"},
                       {"role", "assistant"},
                       {"model", StringOf(chunk.if_contains("model"))},
                       {"content", json::array()},
                       {"stop_reason", nullptr},
                       {"stop_sequence", nullptr},
                       {"usage", json::object{{"input_tokens", 0}, {"output_tokens", 0}}}};
  out += Event("message_start", json::object{{"message", std::move(message)}});
}

void StreamTranslator::Open(json::object block, std::string& out) {
  Close(out);
  open_ = next_index_++;
  open_type_ = StringOf(block.if_contains("type"));
  out += Event("content_block_start", json::object{{"index", open_}, {"content_block", std::move(block)}});
}

void StreamTranslator::Close(std::string& out) {
  if (open_ < 0) return;
  out += Event("content_block_stop", json::object{{"index", open_}});
  open_ = -1;
}

void StreamTranslator::Reasoning(const std::string& text, std::string& out) {
  if (open_ < 0 || open_type_ != "thinking") {
    Open(json::object{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, out);
  }
  out += Event("content_block_delta",
               json::object{{"index", open_}, {"delta", json::object{{"type", "thinking_delta"}, {"thinking", text}}}});
}

void StreamTranslator::Text(const std::string& text, std::string& out) {
  if (open_ < 0 || open_type_ != "text") Open(json::object{{"type", "text"}, {"text", ""}}, out);
  out += Event("content_block_delta",
               json::object{{"index", open_}, {"delta", json::object{{"type", "text_delta"}, {"text", text}}}});
}

void StreamTranslator::ToolCall(const chat_json::ToolCall& call, bool first, std::string& out) {
  if (first) {
    Open(json::object{{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", json::object()}}, out);
    open_call_ = call.index;
  }
  if (call.arguments.empty() || open_ < 0 || open_type_ != "tool_use" || open_call_ != call.index) return;
  out += Event("content_block_delta",
               json::object{{"index", open_},
                            {"delta", json::object{{"type", "input_json_delta"}, {"partial_json", call.arguments}}}});
}

std::string StreamTranslator::End() {
  std::string out;
  EnsureBegun(out);
  Close(out);
  out += Event(
      "message_delta",
      json::object{
          {"delta", json::object{{"stop_reason", finish_reason_.empty() ? "end_turn" : StopReason(finish_reason_)},
                                 {"stop_sequence", nullptr}}},
          {"usage", json::object{{"input_tokens", input_tokens_}, {"output_tokens", output_tokens_}}}});
  out += Event("message_stop", json::object());
  return out;
}

}  // namespace corral::proxy::anthropic
