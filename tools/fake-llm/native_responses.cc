#include "tools/fake-llm/native_responses.h"

#include "absl/strings/str_cat.h"
#include "tools/fake-llm/fake_model.h"
#include "tools/fake-llm/json_text.h"

namespace corral::fakellm {
namespace {

namespace json = boost::json;

}  // namespace

json::object ResponsesAsChat(const json::object& request) {
  json::array messages;
  if (const std::string instructions = Str(request.if_contains("instructions")); !instructions.empty()) {
    messages.push_back(ChatMessage("system", instructions));
  }
  const json::value* input = request.if_contains("input");
  if (input != nullptr && input->is_string()) messages.push_back(ChatMessage("user", std::string(input->as_string())));
  if (input != nullptr && input->is_array()) {
    for (const json::value& v : input->as_array()) {
      if (!v.is_object()) continue;
      const json::object& item = v.as_object();
      const std::string type = Str(item.if_contains("type"));
      if (type == "function_call") {
        json::object fn;
        fn["name"] = Str(item.if_contains("name"));
        fn["arguments"] = Str(item.if_contains("arguments"));
        json::object call;
        call["id"] = Str(item.if_contains("call_id"));
        call["type"] = "function";
        call["function"] = std::move(fn);
        json::object m = ChatMessage("assistant", "");
        m["tool_calls"] = json::array{std::move(call)};
        messages.push_back(std::move(m));
      } else if (type == "function_call_output") {
        json::object m = ChatMessage("tool", ContentText(item.if_contains("output")));
        m["tool_call_id"] = Str(item.if_contains("call_id"));
        messages.push_back(std::move(m));
      } else if (type.empty() || type == "message") {
        std::string role = Str(item.if_contains("role"));
        if (role == "developer") role = "system";
        messages.push_back(ChatMessage(role, ContentText(item.if_contains("content"))));
      }
    }
  }
  json::array tools;
  if (const json::value* t = request.if_contains("tools"); t != nullptr && t->is_array()) {
    for (const json::value& v : t->as_array()) {
      if (!v.is_object() || Str(v.as_object().if_contains("type")) != "function") continue;
      tools.push_back(FunctionTool(Str(v.as_object().if_contains("name")), v.as_object().if_contains("parameters")));
    }
  }
  return ChatBody(request, std::move(messages), std::move(tools));
}

json::object ResponseOf(const json::object& completion) {
  const json::object& message = FirstMessage(completion);
  json::array output;
  if (const json::value* calls = message.if_contains("tool_calls"); calls != nullptr && calls->is_array()) {
    int i = 0;
    for (const json::value& c : calls->as_array()) {
      const json::object& call = c.as_object();
      const json::object& fn = call.at("function").as_object();
      json::object item;
      item["type"] = "function_call";
      item["id"] = absl::StrCat("fc_", ++i);
      item["call_id"] = Str(call.if_contains("id"));
      item["name"] = Str(fn.if_contains("name"));
      item["arguments"] = Str(fn.if_contains("arguments"));
      item["status"] = "completed";
      output.push_back(std::move(item));
    }
  } else {
    json::object part;
    part["type"] = "output_text";
    part["text"] = Str(message.if_contains("content"));
    part["annotations"] = json::array();
    json::object item;
    item["type"] = "message";
    item["id"] = "msg_1";
    item["role"] = "assistant";
    item["status"] = "completed";
    item["content"] = json::array{std::move(part)};
    output.push_back(std::move(item));
  }
  json::object usage;
  if (const json::value* u = completion.if_contains("usage"); u != nullptr && u->is_object()) {
    usage["input_tokens"] = u->as_object().at("prompt_tokens");
    usage["output_tokens"] = u->as_object().at("completion_tokens");
    usage["total_tokens"] = u->as_object().at("total_tokens");
  }
  json::object response;
  response["id"] = absl::StrCat("resp_", Str(completion.if_contains("id")));
  response["object"] = "response";
  response["created_at"] = completion.contains("created") ? completion.at("created") : json::value(0);
  response["status"] = "completed";
  response["model"] = Str(completion.if_contains("model"));
  response["output"] = std::move(output);
  response["usage"] = std::move(usage);
  return response;
}

std::vector<std::string> ResponseEvents(const json::object& completion) {
  const json::object whole = ResponseOf(completion);
  std::vector<std::string> events;
  int64_t sequence = 0;
  auto event = [&](const char* type, json::object data) {
    data["type"] = type;
    data["sequence_number"] = sequence++;
    events.push_back(absl::StrCat("event: ", type, "\ndata: ", json::serialize(data), "\n\n"));
  };
  json::object started = whole;
  started["status"] = "in_progress";
  started["output"] = json::array();
  json::object created;
  created["response"] = std::move(started);
  event("response.created", std::move(created));
  int64_t index = 0;
  for (const json::value& v : whole.at("output").as_array()) {
    const json::object& item = v.as_object();
    const bool message = Str(item.if_contains("type")) == "message";
    json::object opened = item;
    opened["status"] = "in_progress";
    if (message) {
      opened["content"] = json::array();
    } else {
      opened["arguments"] = "";
    }
    json::object added;
    added["output_index"] = index;
    added["item"] = std::move(opened);
    event("response.output_item.added", std::move(added));
    const std::string id = Str(item.if_contains("id"));
    // Where an event is: the item, its index, and (for a message) its one content part.
    auto at = [&](bool part) {
      json::object o;
      o["item_id"] = id;
      o["output_index"] = index;
      if (part) o["content_index"] = 0;
      return o;
    };
    if (message) {
      const json::object& part = item.at("content").as_array()[0].as_object();
      json::object empty_part = part;
      empty_part["text"] = "";
      json::object part_added = at(true);
      part_added["part"] = std::move(empty_part);
      event("response.content_part.added", std::move(part_added));
      const std::string text = Str(part.if_contains("text"));
      for (const std::string& token : SplitTokens(text)) {
        json::object delta = at(true);
        delta["delta"] = token;
        event("response.output_text.delta", std::move(delta));
      }
      json::object text_done = at(true);
      text_done["text"] = text;
      event("response.output_text.done", std::move(text_done));
      json::object part_done = at(true);
      part_done["part"] = part;
      event("response.content_part.done", std::move(part_done));
    } else {
      const std::string arguments = Str(item.if_contains("arguments"));
      for (const std::string& piece : SplitTokens(arguments)) {
        json::object delta = at(false);
        delta["delta"] = piece;
        event("response.function_call_arguments.delta", std::move(delta));
      }
      json::object args_done = at(false);
      args_done["arguments"] = arguments;
      event("response.function_call_arguments.done", std::move(args_done));
    }
    json::object done;
    done["output_index"] = index;
    done["item"] = item;
    event("response.output_item.done", std::move(done));
    ++index;
  }
  json::object completed;
  completed["response"] = whole;
  event("response.completed", std::move(completed));
  return events;
}

}  // namespace corral::fakellm
