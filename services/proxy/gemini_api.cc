#include "services/proxy/gemini_api.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libs/core/status_macros.h"
#include "libs/http/openai_json.h"

namespace corral::proxy::gemini {
namespace {

namespace json = boost::json;
using chat_json::Bad;
using http::StringOf;

// Gemini's own Schema (OpenAPI's subset, types in capitals) as the JSON Schema a chat tool takes: every `type`
// in lower case, recursively. A JSON Schema already (parametersJsonSchema) goes through the same walk unchanged.
json::value JsonSchema(const json::value& schema) {
  if (schema.is_array()) {
    json::array out;
    for (const json::value& v : schema.as_array()) out.push_back(JsonSchema(v));
    return out;
  }
  if (!schema.is_object()) return schema;
  json::object out;
  for (const auto& [key, value] : schema.as_object()) {
    if (key == "type" && value.is_string()) {
      out[key] = absl::AsciiStrToLower(std::string(value.as_string()));
    } else {
      out[key] = JsonSchema(value);
    }
  }
  return out;
}

// A content's parts, which must be an array of objects.
absl::Status EachPart(const json::object& content, const std::string& field,
                      const std::function<absl::Status(const json::object&, const std::string&)>& each) {
  const json::value* parts = content.if_contains("parts");
  if (parts == nullptr || parts->is_null()) return absl::OkStatus();
  return chat_json::EachObject(parts, field + ".parts", each);
}

// The text of a system instruction: a Content (its text parts), or as some clients send it, one Part or a string.
absl::StatusOr<std::string> SystemText(const json::value& v, json::object* notes) {
  if (v.is_string()) return std::string(v.as_string());
  if (!v.is_object()) return Bad("systemInstruction", "must be a Content object");
  if (const json::value* text = v.as_object().if_contains("text"); text != nullptr && text->is_string()) {
    return std::string(text->as_string());
  }
  std::vector<std::string> texts;
  CORRAL_RETURN_IF_ERROR(
      EachPart(v.as_object(), "systemInstruction", [&](const json::object& part, const std::string& at) {
        if (const json::value* t = part.if_contains("text"); t != nullptr && t->is_string()) {
          texts.emplace_back(t->as_string());
        } else {
          chat_json::NoteDropped(notes, at, "part", "a system instruction holds text only");
        }
        return absl::OkStatus();
      }));
  return absl::StrJoin(texts, "\n");
}

// An inline or file part as a chat image part; an error when it is not an image (chat takes none other).
absl::StatusOr<json::object> ImagePart(const json::object& part) {
  const json::value* inline_data = part.if_contains("inlineData");
  const json::object* data = inline_data != nullptr && inline_data->is_object() ? &inline_data->as_object() : nullptr;
  const json::value* file = part.if_contains("fileData");
  const json::object* file_data = file != nullptr && file->is_object() ? &file->as_object() : nullptr;
  const json::object* media = data != nullptr ? data : file_data;
  if (media == nullptr) return absl::InvalidArgumentError("it has no data");
  const std::string type = StringOf(media->if_contains("mimeType"));
  if (type.rfind("image/", 0) != 0) return absl::InvalidArgumentError(absl::StrCat("'", type, "' is not an image"));
  const std::string url = data != nullptr ? absl::StrCat("data:", type, ";base64,", StringOf(data->if_contains("data")))
                                          : StringOf(file_data->if_contains("fileUri"));
  return json::object{{"type", "image_url"}, {"image_url", json::object{{"url", url}}}};
}

// A function response's content for a chat tool message: its `output` when that is all it holds (Gemini CLI's
// shape), else the whole response as JSON.
std::string ResponseText(const json::value* response) {
  if (response == nullptr) return "";
  if (response->is_object() && response->as_object().size() == 1) {
    if (const json::value* out = response->as_object().if_contains("output"); out != nullptr && out->is_string()) {
      return std::string(out->as_string());
    }
  }
  return json::serialize(*response);
}

// The conversation's function calls without an id of their own get one by position, and their responses find
// them by name in call order: chat links a result to its call by id.
class CallIds {
 public:
  std::string ForCall(const json::object& call, size_t turn, size_t part) {
    std::string id = StringOf(call.if_contains("id"));
    if (id.empty()) id = absl::StrCat("call_", turn, "_", part);
    pending_.emplace_back(StringOf(call.if_contains("name")), id);
    return id;
  }
  std::string ForResponse(const json::object& response) {
    std::string id = StringOf(response.if_contains("id"));
    const std::string name = StringOf(response.if_contains("name"));
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (id.empty() ? it->first == name : it->second == id) {
        id = it->second;
        pending_.erase(it);
        return id;
      }
    }
    return id.empty() ? absl::StrCat("call_", name) : id;
  }

 private:
  std::vector<std::pair<std::string, std::string>> pending_;  // (name, id) of calls not yet answered
};

// One model turn as a chat assistant message: its text and its function calls. Earlier thinking and the parts of
// built-in tools (code it ran, their results) have no chat form: left out, noted.
absl::Status AddModelTurn(const json::object& content, const std::string& field, size_t turn, CallIds& ids,
                          json::array& out, json::object* notes) {
  std::string text;
  json::array calls;
  CORRAL_RETURN_IF_ERROR(EachPart(content, field, [&](const json::object& part, const std::string& at) {
    const json::value* thought = part.if_contains("thought");
    const bool thinking = thought != nullptr && thought->is_bool() && thought->as_bool();
    if (const json::value* t = part.if_contains("text"); t != nullptr && t->is_string() && !thinking) {
      absl::StrAppend(&text, std::string(t->as_string()));
    } else if (const json::value* fc = part.if_contains("functionCall"); fc != nullptr && fc->is_object()) {
      const json::object& call = fc->as_object();
      const json::value* args = call.if_contains("args");
      calls.push_back(
          json::object{{"id", ids.ForCall(call, turn, calls.size())},
                       {"type", "function"},
                       {"function", json::object{{"name", StringOf(call.if_contains("name"))},
                                                 {"arguments", args != nullptr ? json::serialize(*args) : "{}"}}}});
    } else if (thinking) {
      chat_json::NoteDropped(notes, at, "thought", "the model's earlier thinking is not sent back to a chat upstream");
    } else {
      chat_json::NoteDropped(notes, at, "part", "this part of a model turn has no chat form");
    }
    return absl::OkStatus();
  }));
  json::object msg{{"role", "assistant"}, {"content", text}};
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  out.push_back(std::move(msg));
  return absl::OkStatus();
}

// One user turn as chat messages: its function responses as tool messages (first, right after the assistant's
// calls, as chat wants them), its text and images as one user message.
absl::Status AddUserTurn(const json::object& content, const std::string& field, CallIds& ids, json::array& out,
                         json::object* notes) {
  std::string text;
  json::array parts;
  bool has_image = false;
  CORRAL_RETURN_IF_ERROR(EachPart(content, field, [&](const json::object& part, const std::string& at) {
    if (const json::value* t = part.if_contains("text"); t != nullptr && t->is_string()) {
      absl::StrAppend(&text, text.empty() ? "" : "\n", std::string(t->as_string()));
      parts.push_back(json::object{{"type", "text"}, {"text", t->as_string()}});
    } else if (const json::value* fr = part.if_contains("functionResponse"); fr != nullptr && fr->is_object()) {
      const json::object& response = fr->as_object();
      out.push_back(json::object{{"role", "tool"},
                                 {"tool_call_id", ids.ForResponse(response)},
                                 {"content", ResponseText(response.if_contains("response"))}});
    } else if (part.contains("inlineData") || part.contains("fileData")) {
      auto image = ImagePart(part);
      if (!image.ok()) {
        chat_json::NoteDropped(notes, at, "media",
                               absl::StrCat("a chat message takes images only: ", image.status().message()));
        return absl::OkStatus();
      }
      parts.push_back(*std::move(image));
      has_image = true;
    } else {
      chat_json::NoteDropped(notes, at, "part", "this part of a user turn has no chat form");
    }
    return absl::OkStatus();
  }));
  if (!parts.empty()) {
    out.push_back(
        json::object{{"role", "user"}, {"content", has_image ? json::value(std::move(parts)) : json::value(text)}});
  }
  return absl::OkStatus();
}

absl::Status AddContents(const json::value* contents, json::array& out, json::object* notes) {
  if (contents == nullptr || !contents->is_array()) return Bad("contents", "is required (an array of Content)");
  CallIds ids;
  size_t turn = 0;
  return chat_json::EachObject(contents, "contents", [&](const json::object& content, const std::string& at) {
    const std::string role = StringOf(content.if_contains("role"));
    if (role == "model") return AddModelTurn(content, at, turn++, ids, out, notes);
    if (role == "user" || role == "function" || role.empty()) return AddUserTurn(content, at, ids, out, notes);
    return Bad(at + ".role", "must be user or model");
  });
}

// tools[k].functionDeclarations as chat functions; built-in tools (Google Search, code execution, URL context,
// …) cannot be run by a chat upstream: left out, noted.
absl::Status AddTools(const json::value* tools, json::object& chat, json::object* notes) {
  json::array functions;
  CORRAL_RETURN_IF_ERROR(chat_json::EachObject(tools, "tools", [&](const json::object& tool, const std::string& at) {
    for (const auto& [key, value] : tool) {
      if (key != "functionDeclarations") {
        chat_json::NoteDropped(notes, at, std::string(key), "a built-in tool cannot be run by a chat upstream");
      }
    }
    return chat_json::EachObject(tool.if_contains("functionDeclarations"), at + ".functionDeclarations",
                                 [&](const json::object& d, const std::string&) {
                                   json::object fn{{"name", StringOf(d.if_contains("name"))}};
                                   if (const json::value* desc = d.if_contains("description"); desc != nullptr)
                                     fn["description"] = *desc;
                                   const json::value* schema = d.if_contains("parametersJsonSchema");
                                   if (schema == nullptr || schema->is_null()) schema = d.if_contains("parameters");
                                   fn["parameters"] = schema != nullptr && !schema->is_null()
                                                          ? JsonSchema(*schema)
                                                          : json::value(json::object{{"type", "object"}});
                                   functions.push_back(json::object{{"type", "function"}, {"function", std::move(fn)}});
                                   return absl::OkStatus();
                                 });
  }));
  if (!functions.empty()) chat["tools"] = std::move(functions);
  return absl::OkStatus();
}

// toolConfig.functionCallingConfig as chat's tool_choice: AUTO, ANY (one allowed name: that function), NONE.
absl::Status AddToolChoice(const json::value* config, json::object& chat, json::object* notes) {
  if (config == nullptr || config->is_null()) return absl::OkStatus();
  if (!config->is_object()) return Bad("toolConfig", "must be an object");
  const json::value* fcc = config->as_object().if_contains("functionCallingConfig");
  if (fcc == nullptr || !fcc->is_object()) {
    chat_json::NoteIgnored(notes, "toolConfig", *config);
    return absl::OkStatus();
  }
  const std::string mode = StringOf(fcc->as_object().if_contains("mode"));
  const json::value* allowed = fcc->as_object().if_contains("allowedFunctionNames");
  if (mode == "ANY" || mode == "VALIDATED") {
    if (allowed != nullptr && allowed->is_array() && allowed->as_array().size() == 1) {
      chat["tool_choice"] =
          json::object{{"type", "function"}, {"function", json::object{{"name", StringOf(&allowed->as_array()[0])}}}};
    } else {
      chat["tool_choice"] = mode == "ANY" ? "required" : "auto";
    }
  } else if (mode == "NONE") {
    chat["tool_choice"] = "none";
  } else if (mode == "AUTO" || mode.empty() || mode == "MODE_UNSPECIFIED") {
    chat["tool_choice"] = "auto";
  } else {
    return Bad("toolConfig.functionCallingConfig.mode",
               absl::StrCat("'", mode, "' is not AUTO, ANY, NONE or VALIDATED"));
  }
  return absl::OkStatus();
}

// generationConfig's sampling keys and their chat names.
constexpr std::pair<const char*, const char*> kKeys[] = {{"temperature", "temperature"},
                                                         {"topP", "top_p"},
                                                         {"topK", "top_k"},
                                                         {"maxOutputTokens", "max_tokens"},
                                                         {"stopSequences", "stop"},
                                                         {"candidateCount", "n"},
                                                         {"presencePenalty", "presence_penalty"},
                                                         {"frequencyPenalty", "frequency_penalty"},
                                                         {"seed", "seed"}};

// generationConfig's sampling keys under their chat names; a JSON answer as response_format; the rest (thinking,
// modalities, speech, logprobs in Gemini's shape) has no chat form: noted.
absl::Status AddGenerationConfig(const json::value* config, json::object& chat, json::object* notes) {
  if (config == nullptr || config->is_null()) return absl::OkStatus();
  if (!config->is_object()) return Bad("generationConfig", "must be an object");
  for (const auto& [key, value] : config->as_object()) {
    const auto known = std::find_if(std::begin(kKeys), std::end(kKeys), [&](const auto& k) { return key == k.first; });
    if (known != std::end(kKeys)) {
      if (!value.is_null()) chat[known->second] = value;
    } else if (key == "responseJsonSchema" || key == "responseSchema") {
      chat["response_format"] = json::object{
          {"type", "json_schema"}, {"json_schema", json::object{{"name", "response"}, {"schema", JsonSchema(value)}}}};
    } else if (key == "responseMimeType" && value.is_string() && value.as_string() == "application/json") {
      if (!chat.contains("response_format")) chat["response_format"] = json::object{{"type", "json_object"}};
    } else if (key != "responseMimeType" || !value.is_string() || value.as_string() != "text/plain") {
      chat_json::NoteIgnored(notes, absl::StrCat("generationConfig.", std::string(key)), value);
    }
  }
  return absl::OkStatus();
}

const char* FinishReason(const std::string& chat_reason) {
  if (chat_reason == "length") return "MAX_TOKENS";
  if (chat_reason == "content_filter") return "SAFETY";
  return "STOP";  // Gemini ends a turn of function calls with STOP too
}

const char* StatusName(int http_status) {
  switch (http_status) {
    case 400:
    case 422: return "INVALID_ARGUMENT";
    case 401: return "UNAUTHENTICATED";
    case 403: return "PERMISSION_DENIED";
    case 404: return "NOT_FOUND";
    case 405: return "UNIMPLEMENTED";
    case 409: return "ABORTED";
    case 410: return "FAILED_PRECONDITION";  // the session is closed
    case 413: return "OUT_OF_RANGE";
    case 429: return "RESOURCE_EXHAUSTED";
    case 499: return "CANCELLED";
    case 503: return "UNAVAILABLE";
    case 504: return "DEADLINE_EXCEEDED";
    default: return "INTERNAL";
  }
}

json::object ErrorObject(int http_status, absl::string_view message) {
  return json::object{
      {"error",
       json::object{{"code", http_status}, {"message", std::string(message)}, {"status", StatusName(http_status)}}}};
}

json::object FunctionCallPart(const chat_json::ToolCall& call) {
  boost::system::error_code ec;
  json::value args = json::parse(call.arguments, ec);
  return json::object{
      {"functionCall",
       json::object{{"id", call.id}, {"name", call.name}, {"args", !ec && args.is_object() ? args : json::object()}}}};
}

json::object UsageMetadata(int64_t prompt, int64_t completion) {
  return json::object{
      {"promptTokenCount", prompt}, {"candidatesTokenCount", completion}, {"totalTokenCount", prompt + completion}};
}

std::string Sse(const json::object& data) { return absl::StrCat("data: ", json::serialize(data), "\r\n\r\n"); }

}  // namespace

absl::StatusOr<json::object> ToChat(const json::object& request, json::object* notes) {
  CORRAL_ASSIGN_OR_RETURN(json::object chat, chat_json::ChatWithModel(request));
  chat_json::NoteUnknownFields(notes, request,
                               {"model", "stream", "contents", "systemInstruction", "system_instruction", "tools",
                                "toolConfig", "generationConfig"});
  json::array messages;
  const json::value* system = request.if_contains("systemInstruction");
  if (system == nullptr) system = request.if_contains("system_instruction");
  if (system != nullptr && !system->is_null()) {
    CORRAL_ASSIGN_OR_RETURN(std::string text, SystemText(*system, notes));
    messages.push_back(json::object{{"role", "system"}, {"content", std::move(text)}});
  }
  CORRAL_RETURN_IF_ERROR(AddContents(request.if_contains("contents"), messages, notes));
  chat["messages"] = std::move(messages);
  CORRAL_RETURN_IF_ERROR(AddTools(request.if_contains("tools"), chat, notes));
  CORRAL_RETURN_IF_ERROR(AddToolChoice(request.if_contains("toolConfig"), chat, notes));
  CORRAL_RETURN_IF_ERROR(AddGenerationConfig(request.if_contains("generationConfig"), chat, notes));
  if (const json::value* stream = request.if_contains("stream");
      stream != nullptr && stream->is_bool() && stream->as_bool()) {
    chat["stream"] = true;
    chat["stream_options"] = json::object{{"include_usage", true}};
  }
  return chat;
}

json::object FromChat(const json::object& completion) {
  json::array parts;
  std::string finish;
  if (const json::object* choice = chat_json::FirstChoice(completion)) {
    finish = StringOf(choice->if_contains("finish_reason"));
    if (const json::value* m = choice->if_contains("message"); m != nullptr && m->is_object()) {
      if (std::string reasoning = chat_json::Reasoning(m->as_object()); !reasoning.empty()) {
        parts.push_back(json::object{{"text", reasoning}, {"thought", true}});
      }
      if (std::string text = StringOf(m->as_object().if_contains("content")); !text.empty()) {
        parts.push_back(json::object{{"text", text}});
      }
      for (const chat_json::ToolCall& call : chat_json::ToolCalls(m->as_object())) {
        parts.push_back(FunctionCallPart(call));
      }
    }
  }
  if (parts.empty()) parts.push_back(json::object{{"text", ""}});
  const auto tokens = chat_json::Usage(completion).value_or(std::pair<int64_t, int64_t>(0, 0));
  json::object candidate{{"content", json::object{{"parts", std::move(parts)}, {"role", "model"}}},
                         {"finishReason", FinishReason(finish)},
                         {"index", 0}};
  return json::object{{"candidates", json::array{std::move(candidate)}},
                      {"usageMetadata", UsageMetadata(tokens.first, tokens.second)},
                      {"modelVersion", StringOf(completion.if_contains("model"))},
                      {"responseId", StringOf(completion.if_contains("id"))}};
}

std::string ErrorBody(int http_status, absl::string_view message) {
  return json::serialize(ErrorObject(http_status, message));
}

std::string SettingName(absl::string_view chat_key) {
  if (chat_key == "max_completion_tokens") chat_key = "max_tokens";
  for (const auto& [gemini, chat] : kKeys) {
    if (chat_key == chat) return gemini;
  }
  return std::string(chat_key);
}

std::string ErrorEvent(int http_status, absl::string_view message) { return Sse(ErrorObject(http_status, message)); }

std::string ModelList(const std::vector<std::string>& ids) {
  json::array models;
  for (const std::string& id : ids) {
    models.push_back(json::object{{"name", absl::StrCat("models/", id)},
                                  {"displayName", id},
                                  {"supportedGenerationMethods", json::array{"generateContent", "countTokens"}}});
  }
  return json::serialize(json::object{{"models", std::move(models)}});
}

absl::StatusOr<std::string> GeminiDialect::CountTokens(const json::object& request) {
  const json::value* inner = request.if_contains("generateContentRequest");
  const json::object& body = inner != nullptr && inner->is_object() ? inner->as_object() : request;
  CORRAL_ASSIGN_OR_RETURN(json::object chat, ToChat(body));
  return json::serialize(json::object{{"totalTokens", chat_json::EstimateTokens(chat)}});
}

std::string StreamTranslator::Event(json::array parts, bool last) const {
  json::object candidate{{"content", json::object{{"parts", std::move(parts)}, {"role", "model"}}}, {"index", 0}};
  json::object response;
  if (last) candidate["finishReason"] = FinishReason(finish_reason_);
  response["candidates"] = json::array{std::move(candidate)};
  if (last) response["usageMetadata"] = UsageMetadata(input_tokens_, output_tokens_);
  response["modelVersion"] = model_;
  response["responseId"] = id_;
  return Sse(response);
}

void StreamTranslator::Begin(const json::object& chunk, std::string&) {
  id_ = StringOf(chunk.if_contains("id"));
  model_ = StringOf(chunk.if_contains("model"));
}

void StreamTranslator::Reasoning(const std::string& text, std::string& out) {
  out += Event(json::array{json::object{{"text", text}, {"thought", true}}}, false);
}

void StreamTranslator::Text(const std::string& text, std::string& out) {
  out += Event(json::array{json::object{{"text", text}}}, false);
}

void StreamTranslator::ToolCall(const chat_json::ToolCall& call, bool first, std::string&) {
  chat_json::ToolCall& gathered = calls_[call.index];
  if (first) {
    gathered.id = call.id;
    gathered.name = call.name;
  }
  gathered.arguments += call.arguments;
}

std::string StreamTranslator::End() {
  std::string out;
  EnsureBegun(out);
  json::array parts;
  for (const auto& [index, call] : calls_) parts.push_back(FunctionCallPart(call));
  if (parts.empty()) parts.push_back(json::object{{"text", ""}});
  out += Event(std::move(parts), true);
  return out;
}

}  // namespace corral::proxy::gemini
