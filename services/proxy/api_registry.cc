#include "services/proxy/api_registry.h"

#include <array>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/proxy/anthropic_api.h"
#include "services/proxy/gemini_api.h"
#include "services/proxy/responses_api.h"

namespace corral::proxy {
namespace {

namespace bhttp = boost::beast::http;

std::unique_ptr<Dialect> Messages() { return std::make_unique<anthropic::MessagesDialect>(); }
std::unique_ptr<Dialect> Responses() { return std::make_unique<responses::ResponsesDialect>(); }
std::unique_ptr<Dialect> Gemini() { return std::make_unique<gemini::GeminiDialect>(); }

constexpr absl::string_view kModelSegment = "{model}";

// In the order UpstreamSpec.dialects' messages name them.
constexpr std::array<NativeApi, 3> kNative = {{
    {"responses", "max_output_tokens", &ResponseToChat, NativeStream::Shape::kResponses},
    {"messages", "max_tokens", &MessageToChat, NativeStream::Shape::kMessages},
    {.name = "gemini",
     .token_cap = "maxOutputTokens",
     .answer_to_chat = &GenerateContentToChat,
     .stream = NativeStream::Shape::kGemini,
     .model_in_path = true,
     .settings_field = "generationConfig",
     .setting_name = &gemini::SettingName},
}};

const std::array<ApiSpec, 14> kApis = {{
    {.path = "/health", .method = std::nullopt, .kind = ApiKind::kHealth, .chat = false, .index = 0},
    {.path = "/v1/chat/completions", .method = bhttp::verb::post, .kind = ApiKind::kGenerate, .index = 1},
    {.path = "/v1/completions", .method = bhttp::verb::post, .kind = ApiKind::kGenerate, .chat = false, .index = 2},
    {.path = "/v1/models", .method = bhttp::verb::get, .kind = ApiKind::kModels, .chat = false, .index = 3},
    // Anthropic's Messages API and OpenAI's Responses API, translated to chat (or passed through).
    {.path = "/v1/messages",
     .method = bhttp::verb::post,
     .kind = ApiKind::kGenerate,
     .dialect = &Messages,
     .shapes_subpaths = true,
     .native = &kNative[1],
     .index = 4},
    {.path = "/v1/responses",
     .method = bhttp::verb::post,
     .kind = ApiKind::kGenerate,
     .dialect = &Responses,
     .native = &kNative[0],
     .index = 5},
    {.path = "/v1/messages/count_tokens",
     .method = bhttp::verb::post,
     .kind = ApiKind::kCountTokens,
     .dialect = &Messages,
     .index = 6},
    // Google's Gemini API, translated to chat: the model is named in the path. v1beta is what Gemini CLI calls,
    // v1 what @google/genai calls by default (its model list is OpenAI's path, answered by the key's shape).
    {.path = "/v1beta/models/{model}:generateContent",
     .method = bhttp::verb::post,
     .kind = ApiKind::kGenerate,
     .dialect = &Gemini,
     .native = &kNative[2],
     .index = 7},
    {.path = "/v1beta/models/{model}:streamGenerateContent",
     .method = bhttp::verb::post,
     .kind = ApiKind::kGenerate,
     .dialect = &Gemini,
     .native = &kNative[2],
     .index = 8,
     .streams = true},
    {.path = "/v1beta/models/{model}:countTokens",
     .method = bhttp::verb::post,
     .kind = ApiKind::kCountTokens,
     .dialect = &Gemini,
     .index = 9},
    {.path = "/v1beta/models",
     .method = bhttp::verb::get,
     .kind = ApiKind::kModels,
     .chat = false,
     .dialect = &Gemini,
     .shapes_subpaths = true,  // and every call under it
     .index = 10},
    {.path = "/v1/models/{model}:generateContent",
     .method = bhttp::verb::post,
     .kind = ApiKind::kGenerate,
     .dialect = &Gemini,
     .native = &kNative[2],
     .index = 11},
    {.path = "/v1/models/{model}:streamGenerateContent",
     .method = bhttp::verb::post,
     .kind = ApiKind::kGenerate,
     .dialect = &Gemini,
     .native = &kNative[2],
     .index = 12,
     .streams = true},
    {.path = "/v1/models/{model}:countTokens",
     .method = bhttp::verb::post,
     .kind = ApiKind::kCountTokens,
     .dialect = &Gemini,
     .index = 13},
}};

}  // namespace

absl::string_view ApiSpec::UpstreamPath(bool native_call) const {
  if (native_call || dialect == nullptr) return path;
  return chat ? ChatApi().path : CompletionsApi().path;
}

std::string ApiSpec::UpstreamTarget(bool native_call, absl::string_view model) const {
  const absl::string_view to = UpstreamPath(native_call);
  const size_t at = to.find(kModelSegment);
  if (at == absl::string_view::npos) return std::string(to);
  return absl::StrCat(to.substr(0, at), model, to.substr(at + kModelSegment.size()), streams ? "?alt=sse" : "");
}

std::string ApiSpec::ModelIn(absl::string_view target) const {
  const size_t at = path.find(kModelSegment);
  if (at == absl::string_view::npos) return "";
  const absl::string_view before = path.substr(0, at), after = path.substr(at + kModelSegment.size());
  if (target.size() <= before.size() + after.size() || !absl::StartsWith(target, before) ||
      !absl::EndsWith(target, after)) {
    return "";
  }
  const absl::string_view model = target.substr(before.size(), target.size() - before.size() - after.size());
  return model.find('/') == absl::string_view::npos ? std::string(model) : "";
}

std::span<const ApiSpec> Apis() { return kApis; }

const ApiSpec* FindApi(absl::string_view path) {
  for (const ApiSpec& api : kApis) {
    if (api.path == path || !api.ModelIn(path).empty()) return &api;
  }
  return nullptr;
}

const ApiSpec& ChatApi() { return kApis[1]; }
const ApiSpec& CompletionsApi() { return kApis[2]; }

std::unique_ptr<Dialect> RefusalShapeFor(absl::string_view target) {
  for (const ApiSpec& api : kApis) {
    if (api.shapes_subpaths && api.dialect != nullptr && absl::StartsWith(target, api.Prefix())) return api.dialect();
  }
  return nullptr;
}

const NativeApi* FindNativeApi(absl::string_view name) {
  for (const NativeApi& n : kNative) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

std::string NativeApiNames() {
  return absl::StrJoin(kNative, ", ", [](std::string* out, const NativeApi& n) { absl::StrAppend(out, n.name); });
}

}  // namespace corral::proxy
