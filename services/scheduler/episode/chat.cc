#include "services/scheduler/episode/chat.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "libs/http/openai_json.h"
#include "libs/trajectory/resent.h"

namespace corral::scheduler {
namespace {

namespace json = boost::json;

using http::StringOf;

json::value ParseOr(const std::string& text, json::value fallback) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  return ec ? fallback : v;
}

json::object Schema(std::initializer_list<std::pair<const char*, const char*>> properties) {
  json::object props;
  json::array required;
  for (const auto& [name, description] : properties) {
    json::object p;
    p["type"] = "string";
    p["description"] = description;
    props[name] = std::move(p);
    required.push_back(json::string(name));
  }
  json::object schema;
  schema["type"] = "object";
  schema["properties"] = std::move(props);
  schema["required"] = std::move(required);
  return schema;
}

}  // namespace

json::array InitialMessages(const v1::Task& task) {
  json::array out;
  if (!task.prompt().empty()) {
    json::object m;
    m["role"] = "user";
    m["content"] = task.prompt();
    out.push_back(std::move(m));
    return out;
  }
  for (const auto& msg : task.messages()) out.push_back(OpenAiMessage(msg));
  return out;
}

json::array ToolsJson(const v1::Task& task) {
  json::array out;
  for (const auto& t : task.tool_loop().tools()) {
    std::string description = t.description();
    json::object parameters;
    switch (t.kind()) {
      case v1::TOOL_KIND_CODE_INTERPRETER:
        if (description.empty()) {
          description = absl::StrCat("Runs ", t.language().empty() ? "python" : t.language(),
                                     " code in your sandbox and returns its output (stdout and stderr).");
        }
        parameters = Schema({{"code", "the code to run"}});
        break;
      case v1::TOOL_KIND_BASH:
        if (description.empty()) description = "Runs a bash command in your sandbox and returns its output.";
        parameters = Schema({{"command", "the command line"}});
        break;
      case v1::TOOL_KIND_READ_FILE:
        if (description.empty()) description = "Returns the contents of a file in your sandbox.";
        parameters = Schema({{"path", "the file's path"}});
        break;
      case v1::TOOL_KIND_WRITE_FILE:
        if (description.empty()) description = "Writes a file in your sandbox (parent directories are created).";
        parameters = Schema({{"path", "the file's path"}, {"content", "the text to write"}});
        break;
      default: break;
    }
    if (!t.parameters_json().empty()) parameters = ParseOr(t.parameters_json(), json::object()).as_object();
    json::object fn;
    fn["name"] = t.name();
    fn["description"] = description;
    fn["parameters"] = std::move(parameters);
    json::object tool;
    tool["type"] = "function";
    tool["function"] = std::move(fn);
    out.push_back(std::move(tool));
  }
  return out;
}

std::string ChatBody(const std::string& model, const std::string& params_json, const json::array& messages,
                     const json::array& tools) {
  json::object body;
  if (!params_json.empty()) {
    json::value params = ParseOr(params_json, json::object());
    if (params.is_object()) body = std::move(params.as_object());
  }
  body["model"] = model;
  body["messages"] = messages;
  if (!tools.empty()) body["tools"] = tools;
  return json::serialize(body);
}

absl::StatusOr<ChatReply> ParseChatReply(const std::string& body) {
  json::value v = ParseOr(body, nullptr);
  const json::object* o = v.if_object();
  const json::value* choices = o ? o->if_contains("choices") : nullptr;
  if (choices == nullptr || !choices->is_array() || choices->as_array().empty() ||
      !choices->as_array()[0].is_object()) {
    return absl::InvalidArgumentError("the chat completion has no choices");
  }
  const json::object& choice = choices->as_array()[0].as_object();
  const json::value* message = choice.if_contains("message");
  if (message == nullptr || !message->is_object()) return absl::InvalidArgumentError("the first choice has no message");
  ChatReply reply;
  reply.message = message->as_object();
  reply.finish_reason = StringOf(choice.if_contains("finish_reason"));
  reply.content = StringOf(reply.message.if_contains("content"));
  if (const json::value* calls = reply.message.if_contains("tool_calls"); calls != nullptr && calls->is_array()) {
    for (const auto& c : calls->as_array()) {
      if (!c.is_object()) continue;
      const json::object& co = c.as_object();
      const json::value* fn = co.if_contains("function");
      ToolCallRequest call;
      call.id = StringOf(co.if_contains("id"));
      if (fn != nullptr && fn->is_object()) {
        call.name = StringOf(fn->as_object().if_contains("name"));
        call.arguments = StringOf(fn->as_object().if_contains("arguments"));
      }
      reply.tool_calls.push_back(std::move(call));
    }
  }
  return reply;
}

std::string ErrorMessage(const std::string& body) {
  json::value v = ParseOr(body, nullptr);
  if (const json::object* o = v.if_object()) {
    if (const json::value* e = o->if_contains("error"); e != nullptr && e->is_object()) {
      const std::string m = StringOf(e->as_object().if_contains("message"));
      if (!m.empty()) return m;
    }
  }
  return body.substr(0, 256);
}

bool IsBudgetExhausted(int status, const std::string& body) {
  return status == 400 && absl::StrContains(body, "budget_exhausted");
}

json::object ToolMessage(const std::string& tool_call_id, const std::string& content) {
  json::object m;
  m["role"] = "tool";
  m["tool_call_id"] = tool_call_id;
  m["content"] = content;
  return m;
}

absl::StatusOr<json::object> ParseArguments(const std::string& arguments) {
  if (arguments.empty()) return json::object();
  json::value v = ParseOr(arguments, nullptr);
  if (!v.is_object()) return absl::InvalidArgumentError("the arguments are not a JSON object");
  return std::move(v.as_object());
}

std::string StringArg(const json::object& args, const char* name) { return StringOf(args.if_contains(name)); }

}  // namespace corral::scheduler
