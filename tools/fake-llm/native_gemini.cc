#include "tools/fake-llm/native_gemini.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "tools/fake-llm/fake_model.h"
#include "tools/fake-llm/json_text.h"

namespace corral::fakellm {
namespace {

namespace json = boost::json;

// A Gemini Schema as JSON Schema: its types in lower case.
json::value Lowered(const json::value& schema) {
  if (schema.is_array()) {
    json::array out;
    for (const json::value& v : schema.as_array()) out.push_back(Lowered(v));
    return out;
  }
  if (!schema.is_object()) return schema;
  json::object out;
  for (const auto& [key, value] : schema.as_object()) {
    out[key] = key == "type" && value.is_string() ? json::value(absl::AsciiStrToLower(std::string(value.as_string())))
                                                  : Lowered(value);
  }
  return out;
}

// One Content as chat messages: a model turn's text and calls; a user turn's function responses, then its text.
void AddContent(const json::object& content, json::array& out) {
  const bool model = Str(content.if_contains("role")) == "model";
  const json::value* parts = content.if_contains("parts");
  std::string text;
  json::array calls;
  for (const json::value& p : parts != nullptr && parts->is_array() ? parts->as_array() : json::array()) {
    if (!p.is_object()) continue;
    const json::object& part = p.as_object();
    text += Str(part.if_contains("text"));
    if (const json::value* fc = part.if_contains("functionCall"); fc != nullptr && fc->is_object()) {
      const json::value* args = fc->as_object().if_contains("args");
      json::object fn;
      fn["name"] = Str(fc->as_object().if_contains("name"));
      fn["arguments"] = args != nullptr ? json::serialize(*args) : "{}";
      json::object call;
      call["id"] = Str(fc->as_object().if_contains("id"));
      call["type"] = "function";
      call["function"] = std::move(fn);
      calls.push_back(std::move(call));
    }
    if (const json::value* fr = part.if_contains("functionResponse"); fr != nullptr && fr->is_object()) {
      const json::value* response = fr->as_object().if_contains("response");
      json::object result = ChatMessage("tool", response != nullptr ? json::serialize(*response) : "");
      result["tool_call_id"] = Str(fr->as_object().if_contains("id"));
      out.push_back(std::move(result));
    }
  }
  if (text.empty() && calls.empty()) return;
  json::object message = ChatMessage(model ? "assistant" : "user", std::move(text));
  if (!calls.empty()) message["tool_calls"] = std::move(calls);
  out.push_back(std::move(message));
}

json::object Response(json::array parts, const json::object& completion, bool last) {
  json::object content;
  content["role"] = "model";
  content["parts"] = std::move(parts);
  json::object candidate;
  candidate["content"] = std::move(content);
  candidate["index"] = 0;
  if (last) candidate["finishReason"] = "STOP";
  json::object out;
  out["candidates"] = json::array{std::move(candidate)};
  if (last) {
    json::object usage;
    if (const json::value* u = completion.if_contains("usage"); u != nullptr && u->is_object()) {
      usage["promptTokenCount"] = u->as_object().at("prompt_tokens");
      usage["candidatesTokenCount"] = u->as_object().at("completion_tokens");
    }
    out["usageMetadata"] = std::move(usage);
  }
  out["modelVersion"] = Str(completion.if_contains("model"));
  out["responseId"] = Str(completion.if_contains("id"));
  return out;
}

// The completion's function calls as functionCall parts.
json::array CallParts(const json::object& message) {
  json::array parts;
  const json::value* calls = message.if_contains("tool_calls");
  for (const json::value& c : calls != nullptr && calls->is_array() ? calls->as_array() : json::array()) {
    const json::object& fn = c.as_object().at("function").as_object();
    boost::system::error_code ec;
    json::value args = json::parse(Str(fn.if_contains("arguments")), ec);
    json::object call;
    call["id"] = Str(c.as_object().if_contains("id"));
    call["name"] = Str(fn.if_contains("name"));
    call["args"] = !ec && args.is_object() ? args : json::value(json::object());
    json::object part;
    part["functionCall"] = std::move(call);
    parts.push_back(std::move(part));
  }
  return parts;
}

json::object TextPart(std::string text) {
  json::object part;
  part["text"] = std::move(text);
  return part;
}

}  // namespace

json::object GeminiAsChat(const json::object& request) {
  json::array messages;
  if (const json::value* s = request.if_contains("systemInstruction"); s != nullptr && s->is_object()) {
    std::string system;
    if (const json::value* parts = s->as_object().if_contains("parts"); parts != nullptr && parts->is_array()) {
      for (const json::value& p : parts->as_array())
        system += p.is_object() ? Str(p.as_object().if_contains("text")) : "";
    }
    messages.push_back(ChatMessage("system", std::move(system)));
  }
  if (const json::value* c = request.if_contains("contents"); c != nullptr && c->is_array()) {
    for (const json::value& v : c->as_array()) {
      if (v.is_object()) AddContent(v.as_object(), messages);
    }
  }
  json::array tools;
  if (const json::value* t = request.if_contains("tools"); t != nullptr && t->is_array()) {
    for (const json::value& v : t->as_array()) {
      const json::value* decls = v.is_object() ? v.as_object().if_contains("functionDeclarations") : nullptr;
      for (const json::value& d : decls != nullptr && decls->is_array() ? decls->as_array() : json::array()) {
        if (!d.is_object()) continue;
        const json::value* schema = d.as_object().if_contains("parametersJsonSchema");
        if (schema == nullptr) schema = d.as_object().if_contains("parameters");
        const json::value lowered = schema != nullptr ? Lowered(*schema) : json::value(nullptr);
        tools.push_back(FunctionTool(Str(d.as_object().if_contains("name")), schema != nullptr ? &lowered : nullptr));
      }
    }
  }
  return ChatBody(request, std::move(messages), std::move(tools));
}

json::object GenerateContentOf(const json::object& completion) {
  const json::object& message = FirstMessage(completion);
  json::array parts = CallParts(message);
  if (parts.empty()) parts.push_back(TextPart(Str(message.if_contains("content"))));
  return Response(std::move(parts), completion, true);
}

std::vector<std::string> GeminiEvents(const json::object& completion) {
  const json::object& message = FirstMessage(completion);
  std::vector<std::string> events;
  for (const std::string& piece : SplitTokens(Str(message.if_contains("content")))) {
    events.push_back(
        absl::StrCat("data: ", json::serialize(Response(json::array{TextPart(piece)}, completion, false)), "\r\n\r\n"));
  }
  json::array last = CallParts(message);
  if (last.empty()) last.push_back(TextPart(""));
  events.push_back(absl::StrCat("data: ", json::serialize(Response(std::move(last), completion, true)), "\r\n\r\n"));
  return events;
}

}  // namespace corral::fakellm
