#include "services/proxy/anthropic_api.h"

#include "absl/strings/str_cat.h"

namespace corral::proxy::anthropic {
namespace {

namespace json = boost::json;

absl::Status Bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

std::string Str(const json::value* v) { return v != nullptr && v->is_string() ? std::string(v->as_string()) : ""; }

// The text of a string or of an array of text blocks (system prompts, tool results).
absl::StatusOr<std::string> Text(const json::value& v, absl::string_view field) {
  if (v.is_string()) return std::string(v.as_string());
  if (!v.is_array()) return Bad(field, "must be a string or an array of text blocks");
  std::string out;
  for (const json::value& block : v.as_array()) {
    if (!block.is_object() || Str(block.as_object().if_contains("type")) != "text") {
      return Bad(field, "only text blocks can be translated here");
    }
    absl::StrAppend(&out, out.empty() ? "" : "\n", Str(block.as_object().if_contains("text")));
  }
  return out;
}

// An image block as a chat content part (a data: URL, or the URL as it is).
absl::StatusOr<json::object> ImagePart(const json::object& block, absl::string_view field) {
  const json::value* source = block.if_contains("source");
  if (source == nullptr || !source->is_object()) return Bad(field, "an image needs a source");
  const json::object& s = source->as_object();
  const std::string type = Str(s.if_contains("type"));
  std::string url;
  if (type == "base64") {
    url = absl::StrCat("data:", Str(s.if_contains("media_type")), ";base64,", Str(s.if_contains("data")));
  } else if (type == "url") {
    url = Str(s.if_contains("url"));
  } else {
    return Bad(field, absl::StrCat("image source type '", type, "' cannot be translated"));
  }
  return json::object{{"type", "image_url"}, {"image_url", json::object{{"url", url}}}};
}

// One Messages message as chat messages: a user turn's tool results become tool messages (first, as chat
// wants them right after the assistant's tool calls), its text and images one user message; an assistant turn
// one message with its text and tool calls. Thinking blocks are dropped.
absl::Status AddMessage(const json::object& m, const std::string& field, json::array& out) {
  const std::string role = Str(m.if_contains("role"));
  if (role != "user" && role != "assistant") return Bad(field + ".role", "must be user or assistant");
  const json::value* content = m.if_contains("content");
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
    const std::string type = Str(block.if_contains("type"));
    if (type == "text") {
      const std::string t = Str(block.if_contains("text"));
      absl::StrAppend(&text, text.empty() ? "" : "\n", t);
      parts.push_back(json::object{{"type", "text"}, {"text", t}});
    } else if (type == "image" && role == "user") {
      auto part = ImagePart(block, at);
      if (!part.ok()) return part.status();
      parts.push_back(*std::move(part));
      has_image = true;
    } else if (type == "tool_result" && role == "user") {
      std::string result;
      if (const json::value* c = block.if_contains("content"); c != nullptr) {
        auto t = Text(*c, at + ".content");
        if (!t.ok()) return t.status();
        result = *std::move(t);
      }
      if (const json::value* e = block.if_contains("is_error"); e != nullptr && e->is_bool() && e->as_bool()) {
        result = absl::StrCat("Error: ", result);
      }
      out.push_back(json::object{{"role", "tool"}, {"tool_call_id", Str(block.if_contains("tool_use_id"))},
                                 {"content", result}});
    } else if (type == "tool_use" && role == "assistant") {
      const json::value* input = block.if_contains("input");
      tool_calls.push_back(json::object{
          {"id", Str(block.if_contains("id"))},
          {"type", "function"},
          {"function", json::object{{"name", Str(block.if_contains("name"))},
                                    {"arguments", input != nullptr ? json::serialize(*input) : "{}"}}}});
    } else if (type == "thinking" || type == "redacted_thinking") {
      continue;
    } else {
      return Bad(at, absl::StrCat("a '", type, "' block in a ", role, " message cannot be translated to chat"));
    }
  }
  if (role == "assistant") {
    json::object msg{{"role", "assistant"}, {"content", text}};
    if (!tool_calls.empty()) msg["tool_calls"] = std::move(tool_calls);
    out.push_back(std::move(msg));
  } else if (!parts.empty()) {
    out.push_back(json::object{{"role", "user"}, {"content", has_image ? json::value(std::move(parts)) : json::value(text)}});
  }
  return absl::OkStatus();
}

absl::StatusOr<json::value> ToolChoice(const json::value& v) {
  if (!v.is_object()) return Bad("tool_choice", "must be an object");
  const std::string type = Str(v.as_object().if_contains("type"));
  if (type == "auto") return json::value("auto");
  if (type == "any") return json::value("required");
  if (type == "none") return json::value("none");
  if (type == "tool") {
    return json::value(json::object{{"type", "function"},
                                    {"function", json::object{{"name", Str(v.as_object().if_contains("name"))}}}});
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
    case 400: case 409: case 410: case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return "api_error";
  }
}

std::string Event(absl::string_view type, json::object data) {
  data["type"] = std::string(type);
  return absl::StrCat("event: ", type, "\ndata: ", json::serialize(data), "\n\n");
}

}  // namespace

absl::StatusOr<json::object> ToChat(const json::object& request) {
  json::object chat;
  const json::value* model = request.if_contains("model");
  if (model == nullptr || !model->is_string()) return Bad("model", "is required (a string)");
  chat["model"] = *model;
  const json::value* messages = request.if_contains("messages");
  if (messages == nullptr || !messages->is_array()) return Bad("messages", "is required (an array)");
  json::array out;
  if (const json::value* system = request.if_contains("system"); system != nullptr) {
    auto text = Text(*system, "system");
    if (!text.ok()) return text.status();
    out.push_back(json::object{{"role", "system"}, {"content", *text}});
  }
  for (size_t i = 0; i < messages->as_array().size(); ++i) {
    const json::value& m = messages->as_array()[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Bad(field, "must be an object");
    if (absl::Status s = AddMessage(m.as_object(), field, out); !s.ok()) return s;
  }
  chat["messages"] = std::move(out);
  if (const json::value* tools = request.if_contains("tools"); tools != nullptr && !tools->is_null()) {
    if (!tools->is_array()) return Bad("tools", "must be an array");
    json::array functions;
    for (size_t k = 0; k < tools->as_array().size(); ++k) {
      const json::value& t = tools->as_array()[k];
      const std::string field = absl::StrCat("tools[", k, "]");
      if (!t.is_object()) return Bad(field, "must be an object");
      const std::string type = Str(t.as_object().if_contains("type"));
      if (!type.empty() && type != "custom") {
        return Bad(field, absl::StrCat("the server tool '", type, "' cannot be run by a chat-completions upstream"));
      }
      json::object fn{{"name", Str(t.as_object().if_contains("name"))}};
      if (const json::value* d = t.as_object().if_contains("description"); d != nullptr) fn["description"] = *d;
      const json::value* schema = t.as_object().if_contains("input_schema");
      fn["parameters"] = schema != nullptr ? *schema : json::value(json::object{{"type", "object"}});
      functions.push_back(json::object{{"type", "function"}, {"function", std::move(fn)}});
    }
    chat["tools"] = std::move(functions);
  }
  if (const json::value* choice = request.if_contains("tool_choice"); choice != nullptr && !choice->is_null()) {
    auto c = ToolChoice(*choice);
    if (!c.ok()) return c.status();
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
  if (const json::value* stream = request.if_contains("stream"); stream != nullptr && stream->is_bool() && stream->as_bool()) {
    chat["stream"] = true;
    chat["stream_options"] = json::object{{"include_usage", true}};
  }
  return chat;
}

json::object FromChat(const json::object& completion) {
  json::array content;
  std::string finish;
  if (const json::value* choices = completion.if_contains("choices");
      choices != nullptr && choices->is_array() && !choices->as_array().empty() && choices->as_array()[0].is_object()) {
    const json::object& choice = choices->as_array()[0].as_object();
    finish = Str(choice.if_contains("finish_reason"));
    if (const json::value* m = choice.if_contains("message"); m != nullptr && m->is_object()) {
      if (std::string text = Str(m->as_object().if_contains("content")); !text.empty()) {
        content.push_back(json::object{{"type", "text"}, {"text", text}});
      }
      if (const json::value* calls = m->as_object().if_contains("tool_calls"); calls != nullptr && calls->is_array()) {
        for (const json::value& call : calls->as_array()) {
          if (!call.is_object()) continue;
          const json::value* fn = call.as_object().if_contains("function");
          const json::object empty;
          const json::object& f = fn != nullptr && fn->is_object() ? fn->as_object() : empty;
          boost::system::error_code ec;
          json::value input = json::parse(Str(f.if_contains("arguments")), ec);
          content.push_back(json::object{{"type", "tool_use"},
                                         {"id", Str(call.as_object().if_contains("id"))},
                                         {"name", Str(f.if_contains("name"))},
                                         {"input", !ec && input.is_object() ? input : json::value(json::object{})}});
        }
      }
    }
  }
  json::object usage{{"input_tokens", 0}, {"output_tokens", 0}};
  if (const json::value* u = completion.if_contains("usage"); u != nullptr && u->is_object()) {
    if (const json::value* p = u->as_object().if_contains("prompt_tokens"); p != nullptr) usage["input_tokens"] = *p;
    if (const json::value* c = u->as_object().if_contains("completion_tokens"); c != nullptr) usage["output_tokens"] = *c;
  }
  return json::object{{"id", absl::StrCat("msg_", Str(completion.if_contains("id")))},
                      {"type", "message"},
                      {"role", "assistant"},
                      {"model", Str(completion.if_contains("model"))},
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
  return Event("error", json::object{{"error", json::object{{"type", ErrorType(http_status)}, {"message", std::string(message)}}}});
}

void StreamTranslator::Start(const json::object& chunk, std::string& out) {
  started_ = true;
  json::object message{{"id", absl::StrCat("msg_", Str(chunk.if_contains("id")))},
                       {"type", "message"},
                       {"role", "assistant"},
                       {"model", Str(chunk.if_contains("model"))},
                       {"content", json::array()},
                       {"stop_reason", nullptr},
                       {"stop_sequence", nullptr},
                       {"usage", json::object{{"input_tokens", 0}, {"output_tokens", 0}}}};
  out += Event("message_start", json::object{{"message", std::move(message)}});
}

void StreamTranslator::Open(json::object block, std::string& out) {
  Close(out);
  open_ = next_index_++;
  open_is_text_ = Str(block.if_contains("type")) == "text";
  out += Event("content_block_start", json::object{{"index", open_}, {"content_block", std::move(block)}});
}

void StreamTranslator::Close(std::string& out) {
  if (open_ < 0) return;
  out += Event("content_block_stop", json::object{{"index", open_}});
  open_ = -1;
}

std::string StreamTranslator::Chunk(const json::object& chunk) {
  std::string out;
  if (!started_) Start(chunk, out);
  if (const json::value* u = chunk.if_contains("usage"); u != nullptr && u->is_object()) {
    if (const json::value* p = u->as_object().if_contains("prompt_tokens"); p != nullptr && p->is_int64()) {
      input_tokens_ = p->as_int64();
    }
    if (const json::value* c = u->as_object().if_contains("completion_tokens"); c != nullptr && c->is_int64()) {
      output_tokens_ = c->as_int64();
    }
  }
  const json::value* choices = chunk.if_contains("choices");
  if (choices == nullptr || !choices->is_array() || choices->as_array().empty() || !choices->as_array()[0].is_object()) {
    return out;
  }
  const json::object& choice = choices->as_array()[0].as_object();
  if (const json::value* d = choice.if_contains("delta"); d != nullptr && d->is_object()) {
    const json::object& delta = d->as_object();
    if (std::string text = Str(delta.if_contains("content")); !text.empty()) {
      if (open_ < 0 || !open_is_text_) Open(json::object{{"type", "text"}, {"text", ""}}, out);
      out += Event("content_block_delta",
                   json::object{{"index", open_}, {"delta", json::object{{"type", "text_delta"}, {"text", text}}}});
    }
    if (const json::value* calls = delta.if_contains("tool_calls"); calls != nullptr && calls->is_array()) {
      for (const json::value& call : calls->as_array()) {
        if (!call.is_object()) continue;
        const json::object& c = call.as_object();
        const json::value* i = c.if_contains("index");
        const int64_t index = i != nullptr && i->is_int64() ? i->as_int64() : 0;
        const json::value* fn = c.if_contains("function");
        const json::object empty;
        const json::object& f = fn != nullptr && fn->is_object() ? fn->as_object() : empty;
        if (!tool_blocks_.count(index)) {
          Open(json::object{{"type", "tool_use"}, {"id", Str(c.if_contains("id"))}, {"name", Str(f.if_contains("name"))},
                            {"input", json::object()}},
               out);
          tool_blocks_[index] = open_;
        }
        if (std::string args = Str(f.if_contains("arguments")); !args.empty() && tool_blocks_[index] == open_) {
          out += Event("content_block_delta",
                       json::object{{"index", open_},
                                    {"delta", json::object{{"type", "input_json_delta"}, {"partial_json", args}}}});
        }
      }
    }
  }
  if (std::string finish = Str(choice.if_contains("finish_reason")); !finish.empty()) stop_reason_ = StopReason(finish);
  return out;
}

std::string StreamTranslator::End() {
  std::string out;
  if (!started_) Start(json::object(), out);
  Close(out);
  out += Event("message_delta",
               json::object{{"delta", json::object{{"stop_reason", stop_reason_.empty() ? "end_turn" : stop_reason_},
                                                   {"stop_sequence", nullptr}}},
                            {"usage", json::object{{"input_tokens", input_tokens_}, {"output_tokens", output_tokens_}}}});
  out += Event("message_stop", json::object());
  return out;
}

}  // namespace corral::proxy::anthropic
