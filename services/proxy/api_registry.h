// The HTTP APIs the proxy serves agents, one entry each: the path, the method, what kind of call it is, whether
// its body is chat (translated from the API's own shape, when it has one) or a completions prompt, the dialect
// that translates it and shapes its errors, and, for an API an upstream may serve itself, how the call goes
// through untranslated and how its answer is read back. Adding an API is one entry here (and its dialect). The
// path is also the metrics' `route` label and the recorded call's endpoint. Plain data: thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/strings/string_view.h"
#include "boost/beast/http/verb.hpp"
#include "boost/json.hpp"
#include "services/proxy/native_answers.h"

namespace corral::proxy {

class Dialect;

enum class ApiKind : uint8_t {
  kHealth,       // GET /health: no session, not counted
  kGenerate,     // a model call: chat, completions, or an agent API translated to chat
  kModels,       // the model list
  kCountTokens,  // an estimate, nothing goes upstream
};

// An API an upstream may serve itself (UpstreamSpec.dialects): its call then goes through untranslated.
struct NativeApi {
  absl::string_view name;       // what UpstreamSpec.dialects lists: "responses", "messages", "gemini"
  absl::string_view token_cap;  // the field that caps the tokens to generate
  // Its whole answer as a chat completion, for the record; nullopt when it is not of the API's shape.
  std::optional<boost::json::object> (*answer_to_chat)(const boost::json::object& answer);
  NativeStream::Shape stream;  // how its stream carries the whole answer
  // Gemini's differences: the model named in the path, not the body; the sampling settings (and the token cap)
  // in this object of the body ("" = at its top), under the names `setting_name` gives chat's (null: chat's own).
  bool model_in_path = false;
  absl::string_view settings_field = "";
  std::string (*setting_name)(absl::string_view chat_key) = nullptr;
};

struct ApiSpec {
  // Exact, or with one `{model}` segment where the model is named in the path (Gemini's
  // "/v1beta/models/{model}:generateContent"): any non-empty name without '/' matches it.
  absl::string_view path;
  std::optional<boost::beast::http::verb> method;  // nullopt: any
  ApiKind kind = ApiKind::kGenerate;
  bool chat = true;                                 // the body is, or is translated to, chat; else a prompt
  std::unique_ptr<Dialect> (*dialect)() = nullptr;  // the translation and error shape; null: OpenAI's own
  bool shapes_subpaths = false;       // refusals of a target under Prefix() (404, 405) take its dialect's shape
  const NativeApi* native = nullptr;  // null: always translated (or OpenAI's own)
  int index = 0;                      // its position in Apis()
  bool streams = false;               // the path itself asks for a streamed answer (Gemini's :streamGenerateContent)

  // The model `target` names in the `{model}` segment of `path` ("" when the path has none or does not match).
  std::string ModelIn(absl::string_view target) const;
  // The part of `path` before any `{model}` segment: the prefix a refusal's shape is chosen by.
  absl::string_view Prefix() const { return path.substr(0, path.find('{')); }

  // Where the call goes upstream: its own path when it goes through untranslated (or is OpenAI's own), else
  // the chat or completions path it was translated to.
  absl::string_view UpstreamPath(bool native_call) const;
  // The target a call for `model` is sent to: UpstreamPath, with `model` in its {model} segment and, for a stream
  // of Google's API, `?alt=sse`.
  std::string UpstreamTarget(bool native_call, absl::string_view model) const;
};

// Every API, in a fixed order.
std::span<const ApiSpec> Apis();
// The API at exactly `path`, or nullptr.
const ApiSpec* FindApi(absl::string_view path);
// The API called chat and completions (the targets of translated calls).
const ApiSpec& ChatApi();
const ApiSpec& CompletionsApi();
// The dialect whose shape a refusal of `target` (a path no API has, or a method it refuses) takes: the API's
// whose path `target` is under when it shapes its subpaths (Anthropic's under /v1/messages); null: OpenAI's.
std::unique_ptr<Dialect> RefusalShapeFor(absl::string_view target);
// The API an upstream may serve itself named `name`, or nullptr; and their names, for messages.
const NativeApi* FindNativeApi(absl::string_view name);
std::string NativeApiNames();

}  // namespace corral::proxy
