#include "services/proxy/dialect.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "libs/http/openai_json.h"

namespace corral::proxy::chat_json {

namespace json = boost::json;
using http::StringOf;

absl::Status Bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::StatusOr<json::object> ChatWithModel(const json::object& request) {
  const json::value* model = request.if_contains("model");
  if (model == nullptr || model->is_null()) return json::object();  // the session's model, if it has one
  if (!model->is_string()) return Bad("model", "must be a string");
  return json::object{{"model", *model}};
}

void NoteIgnored(json::object* notes, absl::string_view field, const json::value& value) {
  if (notes == nullptr) return;
  json::value& ignored = (*notes)["ignored"];
  if (!ignored.is_object()) ignored = json::object();
  ignored.as_object()[json::string_view(field.data(), field.size())] = value;
}

void NoteDropped(json::object* notes, absl::string_view field, absl::string_view type, absl::string_view why) {
  if (notes == nullptr) return;
  json::value& dropped = (*notes)["dropped"];
  if (!dropped.is_array()) dropped = json::array();
  dropped.as_array().push_back(json::object{{"field", json::string_view(field.data(), field.size())},
                                            {"type", json::string_view(type.data(), type.size())},
                                            {"why", json::string_view(why.data(), why.size())}});
}

void NoteRenamed(json::object* notes, absl::string_view chat_name, const json::value& original) {
  if (notes == nullptr) return;
  json::value& renamed = (*notes)["renamed"];
  if (!renamed.is_object()) renamed = json::object();
  renamed.as_object()[json::string_view(chat_name.data(), chat_name.size())] = original;
}

void NoteUnknownFields(json::object* notes, const json::object& request,
                       std::initializer_list<absl::string_view> known) {
  for (const auto& [key, value] : request) {
    const absl::string_view k(key.data(), key.size());
    if (std::find(known.begin(), known.end(), k) == known.end()) NoteIgnored(notes, k, value);
  }
}

int64_t EstimateTokens(const json::object& chat) {
  size_t bytes = 0;
  for (const char* key : {"messages", "tools"}) {
    if (const json::value* v = chat.if_contains(key); v != nullptr) bytes += json::serialize(*v).size();
  }
  return static_cast<int64_t>((bytes + 3) / 4);
}

std::string SseEvent(absl::string_view type, json::object data) {
  data["type"] = std::string(type);
  return absl::StrCat("event: ", type, "\ndata: ", json::serialize(data), "\n\n");
}

int64_t Int(const json::value* v) { return v != nullptr && v->is_int64() ? v->as_int64() : 0; }

absl::Status EachObject(const json::value* v, absl::string_view field,
                        const std::function<absl::Status(const json::object&, const std::string&)>& each) {
  if (v == nullptr || v->is_null()) return absl::OkStatus();
  if (!v->is_array()) return Bad(field, "must be an array");
  for (size_t k = 0; k < v->as_array().size(); ++k) {
    const std::string at = absl::StrCat(field, "[", k, "]");
    if (!v->as_array()[k].is_object()) return Bad(at, "must be an object");
    if (absl::Status s = each(v->as_array()[k].as_object(), at); !s.ok()) return s;
  }
  return absl::OkStatus();
}

const json::object* FirstChoice(const json::object& completion) {
  const json::value* choices = completion.if_contains("choices");
  if (choices == nullptr || !choices->is_array() || choices->as_array().empty()) return nullptr;
  const json::value& first = choices->as_array()[0];
  return first.is_object() ? &first.as_object() : nullptr;
}

std::vector<ToolCall> ToolCalls(const json::object& message) {
  std::vector<ToolCall> out;
  const json::value* calls = message.if_contains("tool_calls");
  if (calls == nullptr || !calls->is_array()) return out;
  for (const json::value& call : calls->as_array()) {
    if (!call.is_object()) continue;
    const json::object& c = call.as_object();
    ToolCall t{.index = Int(c.if_contains("index")), .id = StringOf(c.if_contains("id"))};
    if (const json::value* fn = c.if_contains("function"); fn != nullptr && fn->is_object()) {
      t.name = StringOf(fn->as_object().if_contains("name"));
      t.arguments = StringOf(fn->as_object().if_contains("arguments"));
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::string Reasoning(const json::object& message) {
  std::string text = http::StringOf(message.if_contains("reasoning_content"));
  return text.empty() ? http::StringOf(message.if_contains("reasoning")) : text;
}

std::optional<std::pair<int64_t, int64_t>> Usage(const json::object& completion) {
  const json::value* u = completion.if_contains("usage");
  if (u == nullptr || !u->is_object()) return std::nullopt;
  return std::pair(Int(u->as_object().if_contains("prompt_tokens")),
                   Int(u->as_object().if_contains("completion_tokens")));
}

}  // namespace corral::proxy::chat_json

namespace corral::proxy {

namespace json = boost::json;

absl::StatusOr<std::string> Dialect::CountTokens(const json::object&) {
  return absl::UnimplementedError("this API has no token-count call");
}

std::string Dialect::ModelList(const std::vector<std::string>& ids) const { return http::ModelListJson(ids, "corral"); }

void ChatStreamWalker::EnsureBegun(std::string& out) {
  if (begun_) return;
  begun_ = true;
  Begin(json::object(), out);
}

std::string ChatStreamWalker::Walk(const json::object& chunk) {
  std::string out;
  if (!begun_) {
    begun_ = true;
    Begin(chunk, out);
  }
  if (auto usage = chat_json::Usage(chunk)) std::tie(input_tokens_, output_tokens_) = *usage;
  const json::object* choice = chat_json::FirstChoice(chunk);
  if (choice == nullptr) return out;
  if (const json::value* d = choice->if_contains("delta"); d != nullptr && d->is_object()) {
    if (std::string reasoning = chat_json::Reasoning(d->as_object()); !reasoning.empty()) Reasoning(reasoning, out);
    if (std::string text = http::StringOf(d->as_object().if_contains("content")); !text.empty()) Text(text, out);
    for (const chat_json::ToolCall& call : chat_json::ToolCalls(d->as_object())) {
      const bool first = std::find(calls_.begin(), calls_.end(), call.index) == calls_.end();
      if (first) calls_.push_back(call.index);
      ToolCall(call, first, out);
    }
  }
  if (std::string finish = http::StringOf(choice->if_contains("finish_reason")); !finish.empty())
    finish_reason_ = finish;
  return out;
}

}  // namespace corral::proxy
