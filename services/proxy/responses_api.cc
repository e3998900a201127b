#include "services/proxy/responses_api.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "libs/http/openai_json.h"

namespace corral::proxy::responses {
namespace {

namespace json = boost::json;
using chat_json::Bad;
using chat_json::Int;
using http::StringOf;

// A message item's content as chat content: a string, or parts when it has images. Parts with no chat form (a
// file) are left out, noted.
absl::StatusOr<json::value> Content(const json::value& content, const std::string& field, json::object* notes) {
  if (content.is_string()) return content;
  if (!content.is_array()) return Bad(field, "must be a string or an array of content parts");
  std::string text;
  json::array parts;
  bool has_image = false;
  for (size_t k = 0; k < content.as_array().size(); ++k) {
    const json::value& p = content.as_array()[k];
    const std::string at = absl::StrCat(field, "[", k, "]");
    if (!p.is_object()) return Bad(at, "must be an object");
    const std::string type = StringOf(p.as_object().if_contains("type"));
    if (type == "input_text" || type == "output_text" || type == "text") {
      const std::string t = StringOf(p.as_object().if_contains("text"));
      absl::StrAppend(&text, t);
      parts.push_back(json::object{{"type", "text"}, {"text", t}});
    } else if (type == "input_image") {
      const std::string url = StringOf(p.as_object().if_contains("image_url"));
      if (url.empty()) return Bad(at, "only images given by image_url can be translated (not file_id)");
      parts.push_back(json::object{{"type", "image_url"}, {"image_url", json::object{{"url", url}}}});
      has_image = true;
    } else {
      chat_json::NoteDropped(notes, at, type, "a content part with no chat form");
    }
  }
  if (has_image) return json::value(std::move(parts));
  return json::value(text);
}

// A function's chat name: a namespace's functions are offered to the model as "<namespace>__<name>".
std::string ChatName(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : absl::StrCat(ns, "__", name);
}

// The input items as chat messages: function calls join the assistant message before them (or make one),
// function call outputs become tool messages. Reasoning items and the calls of built-in tools the upstream
// cannot run (web search, computer use, …) are left out, noted; items that only refer to state the proxy does
// not keep are refused.
absl::Status AddInput(const json::array& items, json::array& out, json::object* notes) {
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string field = absl::StrCat("input[", i, "]");
    if (!items[i].is_object()) return Bad(field, "must be an object");
    const json::object& item = items[i].as_object();
    const std::string type = StringOf(item.if_contains("type"));
    if (type.empty() || type == "message") {
      std::string role = StringOf(item.if_contains("role"));
      if (role == "developer") role = "system";
      if (role != "user" && role != "assistant" && role != "system") {
        return Bad(field + ".role", "must be user, assistant, system or developer");
      }
      const json::value* content = item.if_contains("content");
      if (content == nullptr) return Bad(field + ".content", "is required");
      auto c = Content(*content, field + ".content", notes);
      if (!c.ok()) return c.status();
      out.push_back(json::object{{"role", role}, {"content", *std::move(c)}});
    } else if (type == "function_call") {
      json::object call{
          {"id", StringOf(item.if_contains("call_id"))},
          {"type", "function"},
          {"function",
           json::object{{"name", ChatName(StringOf(item.if_contains("namespace")), StringOf(item.if_contains("name")))},
                        {"arguments", StringOf(item.if_contains("arguments"))}}}};
      json::object* last = out.empty() || !out.back().is_object() ? nullptr : &out.back().as_object();
      const bool joins = last != nullptr && StringOf(last->if_contains("role")) == "assistant";
      if (!joins) {
        out.push_back(json::object{{"role", "assistant"}, {"content", ""}});
        last = &out.back().as_object();
      }
      json::value& calls = (*last)["tool_calls"];
      if (!calls.is_array()) calls = json::array();
      calls.as_array().push_back(std::move(call));
    } else if (type == "function_call_output") {
      const json::value* output = item.if_contains("output");
      std::string text = output != nullptr && output->is_string() ? std::string(output->as_string())
                                                                  : (output != nullptr ? json::serialize(*output) : "");
      out.push_back(json::object{
          {"role", "tool"}, {"tool_call_id", StringOf(item.if_contains("call_id"))}, {"content", std::move(text)}});
    } else if (type == "reasoning") {
      chat_json::NoteDropped(notes, field, type, "the model's earlier reasoning is not sent back to a chat upstream");
    } else if (type == "item_reference" || type == "compaction") {
      return Bad(field, absl::StrCat("a '", type,
                                     "' item refers to state the proxy does not keep: send the items "
                                     "themselves"));
    } else {
      chat_json::NoteDropped(notes, field, type, "an item with no chat form (a built-in tool's call or output)");
    }
  }
  return absl::OkStatus();
}

json::object Usage(int64_t input, int64_t output) {
  return json::object{{"input_tokens", input},
                      {"input_tokens_details", json::object{{"cached_tokens", 0}}},
                      {"output_tokens", output},
                      {"output_tokens_details", json::object{{"reasoning_tokens", 0}}},
                      {"total_tokens", input + output}};
}

json::object MessageItem(const std::string& id, const std::string& text, const char* status) {
  json::array content;
  if (std::string(status) == "completed") {
    content.push_back(json::object{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}});
  }
  return json::object{
      {"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
}

// A reasoning model's reasoning: a reasoning item with its text as reasoning_text content (as open-weight models'
// reasoning comes in the Responses API), no summary.
json::object ReasoningItem(const std::string& id, const std::string& text, const char* status) {
  json::array content;
  if (std::string(status) == "completed") content.push_back(json::object{{"type", "reasoning_text"}, {"text", text}});
  return json::object{{"type", "reasoning"},
                      {"id", id},
                      {"status", status},
                      {"summary", json::array()},
                      {"content", std::move(content)}};
}

// A function call item; a namespace's function is named back as the agent offered it (namespace + name).
json::object CallItem(const std::string& id, const std::string& call_id, const std::string& name,
                      const std::string& arguments, const char* status, const NamespacedNames* names) {
  json::object item{{"type", "function_call"}, {"id", id},        {"call_id", call_id}, {"name", name},
                    {"arguments", arguments},  {"status", status}};
  if (names != nullptr) {
    if (auto it = names->find(name); it != names->end()) {
      item["namespace"] = it->second.first;
      item["name"] = it->second.second;
    }
  }
  return item;
}

json::object Response(const std::string& id, int64_t created, const std::string& model, const char* status,
                      json::array output, const std::string& finish_reason, int64_t input, int64_t output_tokens) {
  const bool incomplete = finish_reason == "length";
  return json::object{{"id", id},
                      {"object", "response"},
                      {"created_at", created},
                      {"status", incomplete && std::string(status) == "completed" ? "incomplete" : status},
                      {"model", model},
                      {"output", std::move(output)},
                      {"error", nullptr},
                      {"incomplete_details",
                       incomplete ? json::value(json::object{{"reason", "max_output_tokens"}}) : json::value(nullptr)},
                      {"parallel_tool_calls", true},
                      {"tool_choice", "auto"},
                      {"tools", json::array()},
                      {"usage", Usage(input, output_tokens)}};
}

// The Responses API's structured output (text.format: json_schema or json_object) as chat's response_format.
void SetResponseFormat(const json::object& request, json::object& chat) {
  const json::value* text = request.if_contains("text");
  if (text == nullptr || !text->is_object()) return;
  const json::value* format = text->as_object().if_contains("format");
  if (format == nullptr || !format->is_object()) return;
  const json::object& f = format->as_object();
  const std::string type = StringOf(f.if_contains("type"));
  if (type == "json_schema") {
    json::object schema{{"name", StringOf(f.if_contains("name"))}};
    for (const char* key : {"schema", "strict", "description"}) {
      if (const json::value* v = f.if_contains(key); v != nullptr) schema[key] = *v;
    }
    chat["response_format"] = json::object{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  } else if (type == "json_object") {
    chat["response_format"] = json::object{{"type", "json_object"}};
  }
}

}  // namespace

absl::StatusOr<json::object> ToChat(const json::object& request, json::object* notes, NamespacedNames* names) {
  CORRAL_ASSIGN_OR_RETURN(json::object chat, chat_json::ChatWithModel(request));
  chat_json::NoteUnknownFields(notes, request,
                               {"model", "input", "instructions", "tools", "tool_choice", "text", "max_output_tokens",
                                "temperature", "top_p", "parallel_tool_calls", "stream", "previous_response_id"});
  if (const json::value* prev = request.if_contains("previous_response_id"); prev != nullptr && !prev->is_null()) {
    return Bad("previous_response_id", "is not supported (the proxy keeps no responses): send the whole input");
  }
  json::array messages;
  if (std::string instructions = StringOf(request.if_contains("instructions")); !instructions.empty()) {
    messages.push_back(json::object{{"role", "system"}, {"content", instructions}});
  }
  const json::value* input = request.if_contains("input");
  if (input == nullptr) return Bad("input", "is required");
  if (input->is_string()) {
    messages.push_back(json::object{{"role", "user"}, {"content", input->as_string()}});
  } else if (input->is_array()) {
    if (absl::Status s = AddInput(input->as_array(), messages, notes); !s.ok()) return s;
  } else {
    return Bad("input", "must be a string or an array of items");
  }
  chat["messages"] = std::move(messages);
  json::array functions;
  std::set<std::string> offered;
  // A function tool as a chat function named `chat_name` (its namespace's, when it has one).
  auto add_function = [&](const json::object& tool, const std::string& ns, const std::string& at) -> absl::Status {
    const std::string name = StringOf(tool.if_contains("name"));
    const std::string chat_name = ChatName(ns, name);
    if (!offered.insert(chat_name).second) return Bad(at, absl::StrCat("a second tool named '", chat_name, "'"));
    json::object fn{{"name", chat_name}};
    for (const char* key : {"description", "parameters", "strict"}) {
      if (const json::value* v = tool.if_contains(key); v != nullptr && !v->is_null()) fn[key] = *v;
    }
    if (!ns.empty()) {
      if (names != nullptr) (*names)[chat_name] = {ns, name};
      chat_json::NoteRenamed(notes, chat_name, json::object{{"namespace", ns}, {"name", name}});
    }
    functions.push_back(json::object{{"type", "function"}, {"function", std::move(fn)}});
    return absl::OkStatus();
  };
  CORRAL_RETURN_IF_ERROR(chat_json::EachObject(
      request.if_contains("tools"), "tools", [&](const json::object& tool, const std::string& at) {
        const std::string type = StringOf(tool.if_contains("type"));
        if (type == "function") return add_function(tool, "", at);
        if (type == "namespace") {  // a group of tools: its plain functions are offered to the model, the rest noted
          const std::string ns = StringOf(tool.if_contains("name"));
          return chat_json::EachObject(
              tool.if_contains("tools"), at + ".tools", [&](const json::object& inner, const std::string& inner_at) {
                const std::string inner_type = StringOf(inner.if_contains("type"));
                if (inner_type == "function" || inner_type.empty()) return add_function(inner, ns, inner_at);
                chat_json::NoteDropped(notes, inner_at, inner_type,
                                       "a built-in tool cannot be run by a chat-completions upstream");
                return absl::OkStatus();
              });
        }
        chat_json::NoteDropped(notes, at, type, "a built-in tool cannot be run by a chat-completions upstream");
        return absl::OkStatus();
      }));
  if (!functions.empty()) chat["tools"] = std::move(functions);
  if (const json::value* choice = request.if_contains("tool_choice"); choice != nullptr && !choice->is_null()) {
    const json::object* c = choice->is_object() ? &choice->as_object() : nullptr;
    const std::string name =
        c != nullptr ? ChatName(StringOf(c->if_contains("namespace")), StringOf(c->if_contains("name"))) : "";
    if (choice->is_string()) {
      chat["tool_choice"] = *choice;
    } else if (c != nullptr && StringOf(c->if_contains("type")) == "function" && offered.count(name) > 0) {
      chat["tool_choice"] = json::object{{"type", "function"}, {"function", json::object{{"name", name}}}};
    } else if (c != nullptr) {  // a built-in tool, a set of allowed tools, a function left out: the model decides
      chat_json::NoteDropped(notes, "tool_choice", StringOf(c->if_contains("type")),
                             "no such function is offered: auto instead");
      chat["tool_choice"] = "auto";
    } else {
      return Bad("tool_choice", "must be auto, none, required or an object");
    }
  }
  SetResponseFormat(request, chat);
  if (const json::value* v = request.if_contains("max_output_tokens"); v != nullptr && !v->is_null()) {
    chat["max_tokens"] = *v;
  }
  for (const char* key : {"temperature", "top_p", "parallel_tool_calls"}) {
    if (const json::value* v = request.if_contains(key); v != nullptr && !v->is_null()) chat[key] = *v;
  }
  if (const json::value* stream = request.if_contains("stream");
      stream != nullptr && stream->is_bool() && stream->as_bool()) {
    chat["stream"] = true;
    chat["stream_options"] = json::object{{"include_usage", true}};
  }
  return chat;
}

json::object FromChat(const json::object& completion, const NamespacedNames* names) {
  const std::string id = StringOf(completion.if_contains("id"));
  json::array output;
  std::string finish;
  if (const json::object* choice = chat_json::FirstChoice(completion)) {
    finish = StringOf(choice->if_contains("finish_reason"));
    if (const json::value* m = choice->if_contains("message"); m != nullptr && m->is_object()) {
      if (std::string reasoning = chat_json::Reasoning(m->as_object()); !reasoning.empty()) {
        output.push_back(ReasoningItem(absl::StrCat("rs_", id), reasoning, "completed"));
      }
      if (std::string text = StringOf(m->as_object().if_contains("content")); !text.empty()) {
        output.push_back(MessageItem(absl::StrCat("msg_", id), text, "completed"));
      }
      for (const chat_json::ToolCall& call : chat_json::ToolCalls(m->as_object())) {
        output.push_back(
            CallItem(absl::StrCat("fc_", call.id), call.id, call.name, call.arguments, "completed", names));
      }
    }
  }
  const auto tokens = chat_json::Usage(completion).value_or(std::pair<int64_t, int64_t>(0, 0));
  return Response(absl::StrCat("resp_", id), Int(completion.if_contains("created")),
                  StringOf(completion.if_contains("model")), "completed", std::move(output), finish, tokens.first,
                  tokens.second);
}

std::string ResponsesDialect::ErrorBody(int http_status, absl::string_view message) const {
  return http::ErrorJson(message, http_status >= 500 ? "server_error" : "invalid_request_error", "");
}

std::string ResponsesDialect::ErrorEvent(int http_status, absl::string_view message) const {
  const char* code = http_status >= 500 ? "server_error" : "invalid_request_error";
  std::string out = chat_json::SseEvent(
      "error",
      json::object{
          {"code", code}, {"message", std::string(message)}, {"param", nullptr}, {"sequence_number", sequence_++}});
  // And the response's end, failed: clients (Codex) otherwise take the stream for cut short and send it again.
  json::object failed = Snapshot("failed");
  failed["error"] = json::object{{"code", code}, {"message", std::string(message)}};
  out += chat_json::SseEvent("response.failed",
                             json::object{{"response", std::move(failed)}, {"sequence_number", sequence_++}});
  return out;
}

std::string ResponsesDialect::Event(absl::string_view type, json::object data) {
  data["sequence_number"] = sequence_++;
  return chat_json::SseEvent(type, std::move(data));
}

json::object ResponsesDialect::Snapshot(const char* status) const {
  return Response(id_, created_, model_, status, output_, finish_reason_, input_tokens_, output_tokens_);
}

void ResponsesDialect::Begin(const json::object& chunk, std::string& out) {
  const std::string chat_id = StringOf(chunk.if_contains("id"));
  id_ = absl::StrCat("resp_", chat_id);
  model_ = StringOf(chunk.if_contains("model"));
  created_ = Int(chunk.if_contains("created"));
  out += Event("response.created", json::object{{"response", Snapshot("in_progress")}});
  out += Event("response.in_progress", json::object{{"response", Snapshot("in_progress")}});
}

void ResponsesDialect::OpenReasoning(std::string& out) {
  Close(out);
  open_ = static_cast<int>(output_.size());
  open_kind_ = Kind::kReasoning;
  open_id_ = absl::StrCat("rs_", id_.substr(5), "_", open_);
  open_text_.clear();
  out += Event("response.output_item.added",
               json::object{{"output_index", open_}, {"item", ReasoningItem(open_id_, "", "in_progress")}});
}

void ResponsesDialect::OpenMessage(std::string& out) {
  Close(out);
  open_ = static_cast<int>(output_.size());
  open_kind_ = Kind::kMessage;
  open_id_ = absl::StrCat("msg_", id_.substr(5), "_", open_);
  open_text_.clear();
  out += Event("response.output_item.added",
               json::object{{"output_index", open_}, {"item", MessageItem(open_id_, "", "in_progress")}});
  out += Event(
      "response.content_part.added",
      json::object{{"item_id", open_id_},
                   {"output_index", open_},
                   {"content_index", 0},
                   {"part", json::object{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
}

void ResponsesDialect::OpenCall(const std::string& call_id, const std::string& name, std::string& out) {
  Close(out);
  open_ = static_cast<int>(output_.size());
  open_kind_ = Kind::kCall;
  open_id_ = absl::StrCat("fc_", call_id);
  open_call_id_ = call_id;
  open_name_ = name;
  open_text_.clear();
  out += Event(
      "response.output_item.added",
      json::object{{"output_index", open_}, {"item", CallItem(open_id_, call_id, name, "", "in_progress", &names_)}});
}

void ResponsesDialect::Close(std::string& out) {
  if (open_ < 0) return;
  json::object item;
  if (open_kind_ == Kind::kReasoning) {
    item = ReasoningItem(open_id_, open_text_, "completed");
    out +=
        Event("response.reasoning_text.done",
              json::object{{"item_id", open_id_}, {"output_index", open_}, {"content_index", 0}, {"text", open_text_}});
  } else if (open_kind_ == Kind::kMessage) {
    item = MessageItem(open_id_, open_text_, "completed");
    out +=
        Event("response.output_text.done",
              json::object{{"item_id", open_id_}, {"output_index", open_}, {"content_index", 0}, {"text", open_text_}});
    out += Event("response.content_part.done", json::object{{"item_id", open_id_},
                                                            {"output_index", open_},
                                                            {"content_index", 0},
                                                            {"part", item["content"].as_array()[0]}});
  } else {
    item = CallItem(open_id_, open_call_id_, open_name_, open_text_, "completed", &names_);
    out += Event("response.function_call_arguments.done",
                 json::object{{"item_id", open_id_}, {"output_index", open_}, {"arguments", open_text_}});
  }
  out += Event("response.output_item.done", json::object{{"output_index", open_}, {"item", item}});
  output_.push_back(std::move(item));
  open_ = -1;
}

void ResponsesDialect::Reasoning(const std::string& text, std::string& out) {
  if (open_ < 0 || open_kind_ != Kind::kReasoning) OpenReasoning(out);
  open_text_ += text;
  out += Event("response.reasoning_text.delta",
               json::object{{"item_id", open_id_}, {"output_index", open_}, {"content_index", 0}, {"delta", text}});
}

void ResponsesDialect::Text(const std::string& text, std::string& out) {
  if (open_ < 0 || open_kind_ != Kind::kMessage) OpenMessage(out);
  open_text_ += text;
  out += Event("response.output_text.delta",
               json::object{{"item_id", open_id_}, {"output_index", open_}, {"content_index", 0}, {"delta", text}});
}

void ResponsesDialect::ToolCall(const chat_json::ToolCall& call, bool first, std::string& out) {
  if (first) {
    OpenCall(call.id, call.name, out);
    open_call_ = call.index;
  }
  if (call.arguments.empty() || open_ < 0 || open_kind_ != Kind::kCall || open_call_ != call.index) return;
  open_text_ += call.arguments;
  out += Event("response.function_call_arguments.delta",
               json::object{{"item_id", open_id_}, {"output_index", open_}, {"delta", call.arguments}});
}

std::string ResponsesDialect::End() {
  std::string out;
  EnsureBegun(out);
  Close(out);
  const json::object done = Snapshot("completed");
  const std::string type =
      StringOf(done.if_contains("status")) == "incomplete" ? "response.incomplete" : "response.completed";
  out += Event(type, json::object{{"response", done}});
  return out;
}

}  // namespace corral::proxy::responses
