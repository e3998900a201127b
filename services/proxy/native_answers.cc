#include "services/proxy/native_answers.h"

namespace corral::proxy {
namespace {

namespace json = boost::json;

std::string Str(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
}

int64_t Int(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v != nullptr && v->is_int64()) return v->as_int64();
  return v != nullptr && v->is_uint64() ? static_cast<int64_t>(v->as_uint64()) : 0;
}

const json::object* Object(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_object() ? &v->as_object() : nullptr;
}

const json::array* Array(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_array() ? &v->as_array() : nullptr;
}

json::object ToolCall(const std::string& id, const std::string& name, std::string arguments) {
  json::object fn;
  fn["name"] = name;
  fn["arguments"] = std::move(arguments);
  json::object call;
  call["id"] = id;
  call["type"] = "function";
  call["function"] = std::move(fn);
  return call;
}

// The completion the record holds: one choice, its message (text and tool calls), finish reason and usage.
json::object Completion(const json::object& answer, std::string text, json::array calls, std::string finish,
                        int64_t input_tokens, int64_t output_tokens) {
  json::object message;
  message["role"] = "assistant";
  if (text.empty() && !calls.empty()) {
    message["content"] = nullptr;
  } else {
    message["content"] = std::move(text);
  }
  if (!calls.empty()) {
    message["tool_calls"] = std::move(calls);
    finish = "tool_calls";
  }
  json::object choice;
  choice["index"] = 0;
  choice["message"] = std::move(message);
  choice["finish_reason"] = std::move(finish);
  json::object usage;
  usage["prompt_tokens"] = input_tokens;
  usage["completion_tokens"] = output_tokens;
  usage["total_tokens"] = input_tokens + output_tokens;
  json::object out;
  out["id"] = Str(answer, "id");
  out["object"] = "chat.completion";
  out["model"] = Str(answer, "model");
  out["choices"] = json::array{std::move(choice)};
  out["usage"] = std::move(usage);
  return out;
}

}  // namespace

std::optional<json::object> ResponseToChat(const json::object& response) {
  const json::array* output = Array(response, "output");
  if (output == nullptr) return std::nullopt;
  std::string text;
  json::array calls;
  for (const json::value& item : *output) {
    if (!item.is_object()) continue;
    const json::object& o = item.as_object();
    const std::string type = Str(o, "type");
    if (type == "message") {
      if (const json::array* parts = Array(o, "content")) {
        for (const json::value& part : *parts) {
          if (part.is_object() && Str(part.as_object(), "type") == "output_text") text += Str(part.as_object(), "text");
        }
      }
    } else if (type == "function_call") {
      calls.push_back(ToolCall(Str(o, "call_id"), Str(o, "name"), Str(o, "arguments")));
    }
  }
  const json::object* usage = Object(response, "usage");
  const std::string finish = Str(response, "status") == "incomplete" ? "length" : "stop";
  return Completion(response, std::move(text), std::move(calls), finish, usage ? Int(*usage, "input_tokens") : 0,
                    usage ? Int(*usage, "output_tokens") : 0);
}

std::optional<json::object> MessageToChat(const json::object& message) {
  const json::array* content = Array(message, "content");
  if (content == nullptr || Str(message, "type") != "message") return std::nullopt;
  std::string text;
  json::array calls;
  for (const json::value& block : *content) {
    if (!block.is_object()) continue;
    const json::object& b = block.as_object();
    const std::string type = Str(b, "type");
    if (type == "text") {
      text += Str(b, "text");
    } else if (type == "tool_use") {
      const json::value* input = b.if_contains("input");
      calls.push_back(ToolCall(Str(b, "id"), Str(b, "name"), input != nullptr ? json::serialize(*input) : "{}"));
    }
  }
  const json::object* usage = Object(message, "usage");
  const std::string finish = Str(message, "stop_reason") == "max_tokens" ? "length" : "stop";
  return Completion(message, std::move(text), std::move(calls), finish, usage ? Int(*usage, "input_tokens") : 0,
                    usage ? Int(*usage, "output_tokens") : 0);
}

std::optional<json::object> GenerateContentToChat(const json::object& response) {
  const json::array* candidates = Array(response, "candidates");
  if (candidates == nullptr) return std::nullopt;
  std::string text, finish = "stop";
  json::array calls;
  if (!candidates->empty() && candidates->front().is_object()) {
    const json::object& candidate = candidates->front().as_object();
    if (Str(candidate, "finishReason") == "MAX_TOKENS") finish = "length";
    const json::object* content = Object(candidate, "content");
    const json::array* parts = content != nullptr ? Array(*content, "parts") : nullptr;
    for (const json::value& part : parts != nullptr ? *parts : json::array()) {
      if (!part.is_object()) continue;
      const json::object& p = part.as_object();
      const json::value* thought = p.if_contains("thought");
      if (thought != nullptr && thought->is_bool() && thought->as_bool()) continue;
      text += Str(p, "text");
      if (const json::object* call = Object(p, "functionCall")) {
        const json::value* args = call->if_contains("args");
        std::string id = Str(*call, "id");
        if (id.empty()) id = "call_" + std::to_string(calls.size());
        calls.push_back(ToolCall(id, Str(*call, "name"), args != nullptr ? json::serialize(*args) : "{}"));
      }
    }
  }
  const json::object* usage = Object(response, "usageMetadata");
  const json::object named{{"id", Str(response, "responseId")}, {"model", Str(response, "modelVersion")}};
  return Completion(named, std::move(text), std::move(calls), finish, usage ? Int(*usage, "promptTokenCount") : 0,
                    usage ? Int(*usage, "candidatesTokenCount") : 0);
}

void NativeStream::AddGemini(const json::object& data) {
  if (const json::object* e = Object(data, "error")) {
    error_ = Str(*e, "message");
    if (error_.empty()) error_ = json::serialize(data);
    return;
  }
  for (const char* key : {"responseId", "modelVersion", "usageMetadata"}) {
    if (const json::value* v = data.if_contains(key)) message_[key] = *v;
  }
  const json::array* candidates = Array(data, "candidates");
  if (candidates != nullptr && !candidates->empty() && candidates->front().is_object()) {
    AddGeminiPiece(candidates->front().as_object());
  }
  const json::array* whole = Array(message_, "candidates");
  if (whole != nullptr && !whole->empty() && whole->front().as_object().contains("finishReason")) answer_ = message_;
}

void NativeStream::AddGeminiPiece(const json::object& piece) {
  json::value& whole_value = message_["candidates"];
  if (!whole_value.is_array() || whole_value.as_array().empty()) {
    whole_value = json::array{json::object{{"content", json::object{{"role", "model"}, {"parts", json::array()}}}}};
  }
  json::object& whole = whole_value.as_array().front().as_object();
  json::array& parts = whole["content"].as_object()["parts"].as_array();
  const json::object* content = Object(piece, "content");
  const json::array* more = content != nullptr ? Array(*content, "parts") : nullptr;
  for (const json::value& part : more != nullptr ? *more : json::array()) {
    if (!part.is_object()) continue;
    // Text continues the text part before it when both are the answer (or both thought); anything else is a part.
    const json::object& p = part.as_object();
    const bool thought = p.contains("thought");
    if (p.contains("text") && !parts.empty() && parts.back().is_object() && parts.back().as_object().contains("text") &&
        parts.back().as_object().contains("thought") == thought) {
      json::object& last = parts.back().as_object();
      last["text"] = Str(last, "text") + Str(p, "text");
    } else {
      parts.push_back(p);
    }
  }
  if (const json::value* finish = piece.if_contains("finishReason")) whole["finishReason"] = *finish;
}

void NativeStream::Add(const json::object& data) {
  if (shape_ == Shape::kGemini) {
    AddGemini(data);
    return;
  }
  const std::string type = Str(data, "type");
  if (type == "error") {
    const json::object* e = Object(data, "error");
    error_ = e != nullptr ? Str(*e, "message") : Str(data, "message");
    if (error_.empty()) error_ = json::serialize(data);
    return;
  }
  if (shape_ == Shape::kResponses) {
    if (type == "response.completed" || type == "response.incomplete" || type == "response.failed") {
      if (const json::object* r = Object(data, "response")) answer_ = *r;
      if (type == "response.failed") error_ = "the upstream's response failed";
    }
    return;
  }
  if (type == "message_start") {
    if (const json::object* m = Object(data, "message")) message_ = *m;
    message_["content"] = json::array();
  } else if (type == "content_block_start") {
    json::value& content = message_["content"];
    json::array& blocks = content.is_array() ? content.as_array() : content.emplace_array();
    const json::object* block = Object(data, "content_block");
    blocks.push_back(block != nullptr ? json::value(*block) : json::value(json::object()));
    partial_.emplace_back();
  } else if (type == "content_block_delta") {
    const json::object* delta = Object(data, "delta");
    json::value* blocks = message_.if_contains("content");
    const size_t index = static_cast<size_t>(Int(data, "index"));
    if (delta == nullptr || blocks == nullptr || !blocks->is_array() || index >= blocks->as_array().size() ||
        index >= partial_.size() || !blocks->as_array()[index].is_object()) {
      return;
    }
    json::object& block = blocks->as_array()[index].as_object();
    if (Str(*delta, "type") == "text_delta") block["text"] = Str(block, "text") + Str(*delta, "text");
    if (Str(*delta, "type") == "input_json_delta") partial_[index] += Str(*delta, "partial_json");
  } else if (type == "content_block_stop") {
    json::value* blocks = message_.if_contains("content");
    const size_t index = static_cast<size_t>(Int(data, "index"));
    if (blocks == nullptr || !blocks->is_array() || index >= blocks->as_array().size() || index >= partial_.size() ||
        partial_[index].empty() || !blocks->as_array()[index].is_object()) {
      return;
    }
    boost::system::error_code ec;
    json::value input = json::parse(partial_[index], ec);
    if (!ec) blocks->as_array()[index].as_object()["input"] = std::move(input);
  } else if (type == "message_delta") {
    if (const json::object* delta = Object(data, "delta"); delta != nullptr && delta->contains("stop_reason")) {
      message_["stop_reason"] = delta->at("stop_reason");
    }
    if (const json::object* usage = Object(data, "usage")) {
      json::value& u_value = message_["usage"];
      json::object& u = u_value.is_object() ? u_value.as_object() : u_value.emplace_object();
      u["output_tokens"] = Int(*usage, "output_tokens");
    }
  } else if (type == "message_stop") {
    answer_ = message_;
  }
}

}  // namespace corral::proxy
