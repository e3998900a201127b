#include "tools/fake-llm/native_messages.h"

#include "absl/strings/str_cat.h"
#include "tools/fake-llm/fake_model.h"
#include "tools/fake-llm/json_text.h"

namespace corral::fakellm {
namespace {

namespace json = boost::json;

// One message of the request: its text, tool calls (assistant) and tool results (user, as tool messages first).
void AddMessage(const json::object& m, json::array& out) {
  const std::string role = Str(m.if_contains("role"));
  const json::value* content = m.if_contains("content");
  if (content == nullptr || !content->is_array()) {
    out.push_back(ChatMessage(role, ContentText(content)));
    return;
  }
  std::string text;
  json::array calls;
  for (const json::value& b : content->as_array()) {
    if (!b.is_object()) continue;
    const json::object& block = b.as_object();
    const std::string type = Str(block.if_contains("type"));
    if (type == "text") {
      text += Str(block.if_contains("text"));
    } else if (type == "tool_use") {
      json::object fn;
      fn["name"] = Str(block.if_contains("name"));
      const json::value* input = block.if_contains("input");
      fn["arguments"] = input != nullptr ? json::serialize(*input) : "{}";
      json::object call;
      call["id"] = Str(block.if_contains("id"));
      call["type"] = "function";
      call["function"] = std::move(fn);
      calls.push_back(std::move(call));
    } else if (type == "tool_result") {
      json::object result = ChatMessage("tool", ContentText(block.if_contains("content")));
      result["tool_call_id"] = Str(block.if_contains("tool_use_id"));
      out.push_back(std::move(result));
    }
  }
  if (text.empty() && calls.empty()) return;
  json::object message = ChatMessage(role, std::move(text));
  if (!calls.empty()) message["tool_calls"] = std::move(calls);
  out.push_back(std::move(message));
}

std::string Event(const char* type, json::object data) {
  data["type"] = type;
  return absl::StrCat("event: ", type, "\ndata: ", json::serialize(data), "\n\n");
}

}  // namespace

json::object MessagesAsChat(const json::object& request) {
  json::array messages;
  if (const std::string system = ContentText(request.if_contains("system")); !system.empty()) {
    messages.push_back(ChatMessage("system", system));
  }
  if (const json::value* m = request.if_contains("messages"); m != nullptr && m->is_array()) {
    for (const json::value& v : m->as_array()) {
      if (v.is_object()) AddMessage(v.as_object(), messages);
    }
  }
  json::array tools;
  if (const json::value* t = request.if_contains("tools"); t != nullptr && t->is_array()) {
    for (const json::value& v : t->as_array()) {
      if (!v.is_object() || !v.as_object().contains("input_schema")) continue;  // server tools have none
      tools.push_back(FunctionTool(Str(v.as_object().if_contains("name")), &v.as_object().at("input_schema")));
    }
  }
  return ChatBody(request, std::move(messages), std::move(tools));
}

json::object MessageOf(const json::object& completion) {
  const json::object& message = FirstMessage(completion);
  json::array content;
  bool tool_use = false;
  if (const json::value* calls = message.if_contains("tool_calls"); calls != nullptr && calls->is_array()) {
    for (const json::value& c : calls->as_array()) {
      const json::object& fn = c.as_object().at("function").as_object();
      boost::system::error_code ec;
      json::value input = json::parse(Str(fn.if_contains("arguments")), ec);
      json::object block;
      block["type"] = "tool_use";
      block["id"] = Str(c.as_object().if_contains("id"));
      block["name"] = Str(fn.if_contains("name"));
      block["input"] = !ec && input.is_object() ? input : json::value(json::object());
      content.push_back(std::move(block));
      tool_use = true;
    }
  } else {
    json::object block;
    block["type"] = "text";
    block["text"] = Str(message.if_contains("content"));
    content.push_back(std::move(block));
  }
  json::object usage;
  if (const json::value* u = completion.if_contains("usage"); u != nullptr && u->is_object()) {
    usage["input_tokens"] = u->as_object().at("prompt_tokens");
    usage["output_tokens"] = u->as_object().at("completion_tokens");
  }
  json::object out;
  out["id"] = absl::StrCat("msg_", Str(completion.if_contains("id")));
  out["type"] = "message";
  out["role"] = "assistant";
  out["model"] = Str(completion.if_contains("model"));
  out["content"] = std::move(content);
  out["stop_reason"] = tool_use ? "tool_use" : "end_turn";
  out["stop_sequence"] = nullptr;
  out["usage"] = std::move(usage);
  return out;
}

std::vector<std::string> MessageEvents(const json::object& completion) {
  const json::object whole = MessageOf(completion);
  std::vector<std::string> events;
  json::object started = whole;
  started["content"] = json::array();
  started["stop_reason"] = nullptr;
  json::object start;
  start["message"] = std::move(started);
  events.push_back(Event("message_start", std::move(start)));
  int64_t index = 0;
  for (const json::value& v : whole.at("content").as_array()) {
    const json::object& block = v.as_object();
    const bool text = Str(block.if_contains("type")) == "text";
    json::object opened = block;
    if (text) {
      opened["text"] = "";
    } else {
      opened["input"] = json::object();
    }
    json::object block_start;
    block_start["index"] = index;
    block_start["content_block"] = std::move(opened);
    events.push_back(Event("content_block_start", std::move(block_start)));
    const std::string body = text ? Str(block.if_contains("text")) : json::serialize(block.at("input"));
    for (const std::string& piece : SplitTokens(body)) {
      json::object delta;
      if (text) {
        delta["type"] = "text_delta";
        delta["text"] = piece;
      } else {
        delta["type"] = "input_json_delta";
        delta["partial_json"] = piece;
      }
      json::object block_delta;
      block_delta["index"] = index;
      block_delta["delta"] = std::move(delta);
      events.push_back(Event("content_block_delta", std::move(block_delta)));
    }
    json::object block_stop;
    block_stop["index"] = index++;
    events.push_back(Event("content_block_stop", std::move(block_stop)));
  }
  json::object delta;
  delta["stop_reason"] = whole.at("stop_reason");
  delta["stop_sequence"] = nullptr;
  json::object usage;
  usage["output_tokens"] =
      whole.at("usage").as_object().contains("output_tokens") ? whole.at("usage").at("output_tokens") : json::value(0);
  json::object message_delta;
  message_delta["delta"] = std::move(delta);
  message_delta["usage"] = std::move(usage);
  events.push_back(Event("message_delta", std::move(message_delta)));
  events.push_back(Event("message_stop", json::object()));
  return events;
}

}  // namespace corral::fakellm
