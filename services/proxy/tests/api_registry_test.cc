// The proxy's table of APIs: one entry per path, the metrics' route labels as dashboards know them, and what each
// entry decides (method, kind, dialect, native pass-through, where a translated call goes, refusals' shape).
#include "services/proxy/api_registry.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/proxy/dialect.h"

namespace corral::proxy {
namespace {

namespace bhttp = boost::beast::http;

TEST(ApiRegistry, EveryPathOnceAndTheRouteLabelsDashboardsUse) {
  std::set<std::string> paths;
  for (const ApiSpec& api : Apis()) {
    EXPECT_TRUE(paths.insert(std::string(api.path)).second) << api.path;
    EXPECT_EQ(&Apis()[static_cast<size_t>(api.index)], &api) << api.path;
  }
  // The `route` label values of corral_proxy_requests_total (dashboards and alerts name them) and /health.
  EXPECT_THAT(paths, ::testing::UnorderedElementsAre(
                         "/health", "/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/messages",
                         "/v1/responses", "/v1/messages/count_tokens", "/v1beta/models/{model}:generateContent",
                         "/v1beta/models/{model}:streamGenerateContent", "/v1beta/models/{model}:countTokens",
                         "/v1beta/models", "/v1/models/{model}:generateContent",
                         "/v1/models/{model}:streamGenerateContent", "/v1/models/{model}:countTokens"));
}

TEST(ApiRegistry, EachEntrySaysHowItsCallsAreServed) {
  const ApiSpec* chat = FindApi("/v1/chat/completions");
  ASSERT_NE(chat, nullptr);
  EXPECT_EQ(chat, &ChatApi());
  EXPECT_EQ(chat->method, bhttp::verb::post);
  EXPECT_EQ(chat->dialect, nullptr);
  EXPECT_EQ(chat->UpstreamPath(false), "/v1/chat/completions");
  EXPECT_FALSE(CompletionsApi().chat);
  EXPECT_EQ(FindApi("/v1/models")->method, bhttp::verb::get);
  EXPECT_FALSE(FindApi("/health")->method.has_value());  // any method
  EXPECT_EQ(FindApi("/v1/chat/completions/"), nullptr);  // exact paths only

  const ApiSpec* messages = FindApi("/v1/messages");
  ASSERT_NE(messages, nullptr);
  ASSERT_NE(messages->dialect, nullptr);
  ASSERT_NE(messages->native, nullptr);
  EXPECT_EQ(messages->native->name, "messages");
  EXPECT_EQ(messages->native->token_cap, "max_tokens");
  EXPECT_EQ(messages->UpstreamPath(false), "/v1/chat/completions");  // translated
  EXPECT_EQ(messages->UpstreamPath(true), "/v1/messages");           // passed through
  const ApiSpec* responses = FindApi("/v1/responses");
  ASSERT_NE(responses->native, nullptr);
  EXPECT_EQ(responses->native->token_cap, "max_output_tokens");
  EXPECT_EQ(FindApi("/v1/messages/count_tokens")->kind, ApiKind::kCountTokens);
  EXPECT_EQ(FindApi("/v1/messages/count_tokens")->native, nullptr);  // nothing goes upstream
}

TEST(ApiRegistry, GeminisCallsNameTheirModelInThePath) {
  const ApiSpec* generate = FindApi("/v1beta/models/gemini-2.5-pro:generateContent");
  ASSERT_NE(generate, nullptr);
  EXPECT_EQ(generate->ModelIn("/v1beta/models/gemini-2.5-pro:generateContent"), "gemini-2.5-pro");
  EXPECT_FALSE(generate->streams);
  EXPECT_EQ(generate->UpstreamPath(false), "/v1/chat/completions");
  const ApiSpec* stream = FindApi("/v1beta/models/m:streamGenerateContent");
  ASSERT_NE(stream, nullptr);
  EXPECT_TRUE(stream->streams);
  EXPECT_EQ(FindApi("/v1beta/models/m:countTokens")->kind, ApiKind::kCountTokens);
  EXPECT_EQ(FindApi("/v1beta/models")->kind, ApiKind::kModels);
  EXPECT_EQ(FindApi("/v1beta/models/:generateContent"), nullptr);     // no model
  EXPECT_EQ(FindApi("/v1beta/models/a/b:generateContent"), nullptr);  // one segment
  EXPECT_EQ(FindApi("/v1beta/models/m:embedContent"), nullptr);
  EXPECT_EQ(FindApi("/v1/models/m:generateContent")->ModelIn("/v1/models/m:generateContent"), "m");  // @google/genai
  EXPECT_EQ(FindApi("/v1/models")->dialect, nullptr);  // OpenAI's list, unless the key says Google's client asks
  EXPECT_EQ(ChatApi().ModelIn("/v1/chat/completions"), "");
  // Passed through to an upstream that serves Google's API: the call's model in the path, a stream as SSE.
  ASSERT_NE(generate->native, nullptr);
  EXPECT_EQ(generate->native->name, "gemini");
  EXPECT_EQ(generate->UpstreamTarget(true, "m2"), "/v1beta/models/m2:generateContent");
  EXPECT_EQ(stream->UpstreamTarget(true, "m2"), "/v1beta/models/m2:streamGenerateContent?alt=sse");
  EXPECT_EQ(stream->UpstreamTarget(false, "m2"), "/v1/chat/completions");
  EXPECT_EQ(FindApi("/v1beta/models/m:countTokens")->native, nullptr);  // nothing goes upstream
}

TEST(ApiRegistry, RefusalsTakeTheShapeOfTheApiThePathIsUnder) {
  EXPECT_NE(RefusalShapeFor("/v1/messages/batches"), nullptr);           // Anthropic's
  EXPECT_NE(RefusalShapeFor("/v1beta/models/m:embedContent"), nullptr);  // Google's
  EXPECT_EQ(RefusalShapeFor("/v1/responses/input_items"), nullptr);
  EXPECT_EQ(RefusalShapeFor("/v1/embeddings"), nullptr);  // OpenAI's
}

TEST(ApiRegistry, NativeApisAreTheOnesUpstreamsMayList) {
  EXPECT_EQ(NativeApiNames(), "responses, messages, gemini");
  EXPECT_NE(FindNativeApi("responses"), nullptr);
  EXPECT_EQ(FindNativeApi("chat"), nullptr);
  const NativeApi* messages = FindNativeApi("messages");
  ASSERT_NE(messages, nullptr);
  auto chat = messages->answer_to_chat(boost::json::parse(R"({"id": "msg_1", "type": "message", "role": "assistant",
      "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn",
      "usage": {"input_tokens": 3, "output_tokens": 1}})")
                                           .as_object());
  ASSERT_TRUE(chat.has_value());
  EXPECT_EQ(chat->at("object"), "chat.completion");
}

}  // namespace
}  // namespace corral::proxy
