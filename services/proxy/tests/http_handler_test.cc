// The HTTP handler in process, between a real HTTP front (libs/http) and a scripted upstream on loopback:
// every refusal in OpenAI's shape with its status, a whole and a streamed call relayed and recorded (and
// journaled), the call budget, and a dead upstream recorded as a failed call.
#include "services/proxy/http_handler.h"

#include <functional>
#include <future>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/event_count.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/http/client.h"
#include "prometheus/registry.h"
#include "services/proxy/tests/proxy_core.h"
#include "services/proxy/tests/proxy_test_support.h"

namespace corral::proxy {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using ::testing::HasSubstr;

constexpr char kWhole[] =
    R"({"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant",)"
    R"("content":"4"},"finish_reason":"stop","token_ids":[52]}],"usage":{"prompt_tokens":5,"completion_tokens":1,)"
    R"("total_tokens":6}})";

// A chat backend: streams when asked, answers whole otherwise.
asio::awaitable<void> Backend(http::Request& req, http::Responder& res) {
  if (req.target() == "/health") {
    co_await res.Send(200, "application/json", "{}");
    co_return;
  }
  if (absl::StrContains(req.body(), R"("stream":true)")) {
    co_await res.StartStream(200, "text/event-stream");
    co_await res.WriteChunk(R"(data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"fo"}}]})"
                            "\n\n");
    co_await res.WriteChunk(R"(data: {"choices":[{"index":0,"delta":{"content":"ur"},"finish_reason":"stop"}]})"
                            "\n\n");
    co_await res.WriteChunk("data: [DONE]\n\n");
    co_await res.EndStream();
    co_return;
  }
  co_await res.Send(200, "application/json", kWhole);
}

class HttpHandlerTest : public ::testing::Test, protected testing::ProxyCore {
 protected:
  void SetUp() override { Start({upstream_.url()}); }

  void Start(std::vector<std::string> upstream_urls, const std::function<void(UpstreamSpec&)>& adjust = {}) {
    front_.reset();
    std::vector<UpstreamSpec> specs;
    for (const auto& u : upstream_urls) {
      specs.push_back(*ParseUpstreamUrl(u));
      if (adjust) adjust(specs.back());
    }
    BuildCore(std::move(specs),
              RelayOptions{.connect_timeout = absl::Seconds(1), .retry_backoff = absl::Milliseconds(1)});
    handler_ = std::make_unique<HttpHandler>(Parts(), pool_.get());
    front_ = std::make_unique<http::HttpServer>(
        http::ServerLimits{},
        [this](http::Request& q, http::Responder& r) -> asio::awaitable<void> {
          co_await handler_->Handle(q, r);
          handled_.Add();
        },
        1);
    port_ = *front_->Listen("127.0.0.1:0");
  }
  void TearDown() override {
    front_->Stop();
    dispatcher_->Shutdown();
  }

  // Opens a session through the ledger (journaled, as the gRPC service does); returns its env token.
  std::string Open(const std::string& env_id, uint32_t max_calls = 0) {
    v1::OpenSessionRequest r;
    r.set_env_id(env_id);
    r.mutable_policy()->set_capture_token_ids(true);  // as the scheduler opens sessions for trainers
    if (max_calls > 0) r.mutable_policy()->mutable_budget()->set_max_calls(max_calls);
    std::promise<std::string> token;
    ledger_->Open(r, [&](absl::StatusOr<SessionLedger::Opened> o) { token.set_value(o.ok() ? o->token : ""); });
    return token.get_future().get();
  }

  // `token` as a bearer token, or under `key_header` when one is named.
  http::FetchResult Call(bhttp::verb method, const std::string& target, const std::string& token,
                         const std::string& body = "", const std::string& key_header = "") {
    http::Request req{method, target, 11};
    req.set(bhttp::field::host, "proxy");
    if (!token.empty() && key_header.empty()) req.set(bhttp::field::authorization, "Bearer " + token);
    if (!token.empty() && !key_header.empty()) req.set(key_header, token);
    req.set(bhttp::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    auto r = io_.RunSync(http::Fetch(io_.context().get_executor(), "127.0.0.1", port_, req, absl::Seconds(10)));
    EXPECT_THAT(r, IsOk());
    return r.ok() ? *r : http::FetchResult{};
  }
  // A session "ep" whose policy maps `alias` to model "m", sets temperature 0.5 and caps completions at 100
  // tokens; its env token.
  std::string OpenWithOverrides(const std::string& alias) {
    v1::OpenSessionRequest r;
    r.set_env_id("ep");
    (*r.mutable_policy()->mutable_model_aliases())[alias] = "m";
    r.mutable_policy()->mutable_sampling_overrides()->set_temperature(0.5);
    r.mutable_policy()->mutable_budget()->set_max_completion_tokens(100);
    std::promise<std::string> opened;
    ledger_->Open(r, [&](absl::StatusOr<SessionLedger::Opened> o) { opened.set_value(o.ok() ? o->token : ""); });
    return opened.get_future().get();
  }
  static std::string Chat(bool stream) {
    return absl::StrCat(R"({"model":"m","messages":[{"role":"user","content":"2+2?"}],"stream":)",
                        stream ? "true" : "false", "}");
  }

  testing::ScriptedUpstream upstream_{Backend};
  std::unique_ptr<HttpHandler> handler_;
  std::unique_ptr<http::HttpServer> front_;
  corral::testing::EventCount handled_;  // requests the handler is done with
  uint16_t port_ = 0;
};

TEST_F(HttpHandlerTest, EveryRefusalHasItsStatusAndOpenAiShape) {
  const std::string token = Open("ep");
  auto r = Call(bhttp::verb::post, "/v1/nothing", token, "{}");
  EXPECT_EQ(r.status, 404);
  EXPECT_THAT(r.body, HasSubstr(R"("code":"not_found")"));
  EXPECT_EQ(Call(bhttp::verb::get, "/v1/chat/completions", token).status, 405);
  // Under /v1/messages the refusal is in Anthropic's shape, so its SDK (and Claude Code) shows it.
  r = Call(bhttp::verb::post, "/v1/messages/batches", token, "{}");
  EXPECT_EQ(r.status, 404);
  EXPECT_THAT(r.body, HasSubstr(R"({"type":"error","error":{"type":"not_found_error")"));
  r = Call(bhttp::verb::get, "/v1/messages", token);
  EXPECT_EQ(r.status, 405);
  EXPECT_THAT(r.body, HasSubstr(R"("type":"error")"));
  r = Call(bhttp::verb::post, "/v1/chat/completions", "", Chat(false));
  EXPECT_EQ(r.status, 401);
  EXPECT_THAT(r.body, HasSubstr(R"("code":"invalid_api_key")"));
  EXPECT_EQ(Call(bhttp::verb::post, "/v1/chat/completions", "ep.forged", Chat(false)).status, 401);
  r = Call(bhttp::verb::post, "/v1/chat/completions", token, "[not json");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("malformed JSON body"));
  ASSERT_THAT(store_->Close("ep", v1::CLOSE_REASON_CLOSED), IsOk());
  r = Call(bhttp::verb::post, "/v1/chat/completions", token, Chat(false));
  EXPECT_EQ(r.status, 410);
  EXPECT_THAT(r.body, HasSubstr(R"("code":"session_closed")"));
  EXPECT_EQ((*store_->Find("ep"))->Snapshot().calls(), 0u);  // nothing refused is recorded
  EXPECT_EQ(metrics_.Request(ChatApi(), 401, -1).Value(), 2);
}

TEST_F(HttpHandlerTest, AWholeAndAStreamedCallAreRelayedRecordedAndJournaled) {
  const std::string token = Open("ep");
  auto whole = Call(bhttp::verb::post, "/v1/chat/completions", token, Chat(false));
  EXPECT_EQ(whole.status, 200);
  EXPECT_THAT(whole.body, HasSubstr(R"("content":"4")"));
  EXPECT_THAT(whole.body, ::testing::Not(HasSubstr("token_ids")));  // captured for the trainer, not the agent
  auto streamed = Call(bhttp::verb::post, "/v1/chat/completions", token, Chat(true));
  EXPECT_EQ(streamed.status, 200);
  EXPECT_THAT(streamed.body, HasSubstr(R"("content":"fo")"));
  EXPECT_THAT(streamed.body, ::testing::EndsWith("data: [DONE]\n\n"));
  const v1::Trajectory t = (*store_->Find("ep"))->Trajectory(v1::TRAJECTORY_FORMAT_CALLS);
  ASSERT_EQ(t.calls_size(), 2);
  EXPECT_EQ(t.calls(0).completion_token_ids_size(), 1);
  EXPECT_EQ(t.calls(0).finish_reason(), "stop");
  EXPECT_EQ(t.calls(1).upstream(), absl::StrCat("127.0.0.1:", upstream_.port()));
  // Both are in the journal: a fresh store loaded from it has them.
  SessionStore reloaded(SessionLimits{}, &signer_, &clock_);
  ASSERT_THAT(journal_->Load(reloaded), IsOkAndHolds(1));
  EXPECT_EQ((*reloaded.Find("ep"))->Trajectory(v1::TRAJECTORY_FORMAT_CALLS).calls_size(), 2);
  // Counted once the handler is done, which can be just after the agent has read the stream's end.
  ASSERT_TRUE(handled_.AwaitAtLeast(2));
  EXPECT_EQ(metrics_.Request(ChatApi(), 200, 0).Value(), 2);
}

// Gemini's API: the key as Google's clients send it (header or query), the model from the path, answers and
// refusals in Google's shapes.
TEST_F(HttpHandlerTest, GeminiCallsAreKeyedAsGooglesClientsSendThemAndAnsweredInItsShape) {
  const std::string token = Open("ep");
  const std::string body = R"({"contents":[{"role":"user","parts":[{"text":"2+2?"}]}]})";
  auto whole = Call(bhttp::verb::post, "/v1beta/models/gemini-x:generateContent", token, body, "x-goog-api-key");
  EXPECT_EQ(whole.status, 200);
  EXPECT_THAT(whole.body, HasSubstr(R"("parts":[{"text":"4"}],"role":"model")"));
  EXPECT_THAT(whole.body, HasSubstr(R"("promptTokenCount":5)"));
  auto streamed =
      Call(bhttp::verb::post, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse&key=" + token, "", body);
  EXPECT_EQ(streamed.status, 200);
  EXPECT_THAT(streamed.body, HasSubstr(R"(data: {"candidates":[{"content":{"parts":[{"text":"fo"}])"));
  EXPECT_THAT(streamed.body, HasSubstr(R"("finishReason":"STOP")"));
  EXPECT_THAT(streamed.body, ::testing::Not(HasSubstr("[DONE]")));
  const v1::Trajectory t = (*store_->Find("ep"))->Trajectory(v1::TRAJECTORY_FORMAT_CALLS);
  ASSERT_EQ(t.calls_size(), 2);
  EXPECT_EQ(t.calls(0).requested_model(), "gemini-x");
  EXPECT_EQ(t.calls(0).endpoint(), "/v1beta/models/{model}:generateContent");
  EXPECT_FALSE(t.calls(0).stream());
  EXPECT_TRUE(t.calls(1).stream());
  EXPECT_EQ(t.calls(0).completion_token_ids_size(), 1);

  auto refused = Call(bhttp::verb::post, "/v1beta/models/gemini-x:streamGenerateContent", token, body);
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(refused.body, HasSubstr(R"("status":"INVALID_ARGUMENT")"));
  EXPECT_THAT(refused.body, HasSubstr("alt=sse"));
  refused = Call(bhttp::verb::post, "/v1beta/models/gemini-x:embedContent", token, body);
  EXPECT_EQ(refused.status, 404);
  EXPECT_THAT(refused.body, HasSubstr(R"({"error":{"code":404,)"));
  refused = Call(bhttp::verb::post, "/v1beta/models/gemini-x:generateContent", "ep.forged", body, "x-goog-api-key");
  EXPECT_EQ(refused.status, 401);
  EXPECT_THAT(refused.body, HasSubstr(R"("status":"UNAUTHENTICATED")"));
  refused = Call(bhttp::verb::post, "/v1beta/models/gemini-x:generateContent", token, R"({"contents":3})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(refused.body, HasSubstr("contents: is required"));
  EXPECT_EQ((*store_->Find("ep"))->Snapshot().calls(), 2u);  // nothing refused is recorded

  auto count = Call(bhttp::verb::post, "/v1beta/models/gemini-x:countTokens", token, body, "x-goog-api-key");
  EXPECT_EQ(count.status, 200);
  EXPECT_THAT(count.body, ::testing::StartsWith(R"({"totalTokens":)"));
  auto models = Call(bhttp::verb::get, "/v1beta/models?key=" + token, "");
  EXPECT_EQ(models.status, 200);
  EXPECT_THAT(models.body, HasSubstr(R"({"models":[)"));
  models = Call(bhttp::verb::get, "/v1/models", token, "", "x-goog-api-key");  // @google/genai's v1
  EXPECT_THAT(models.body, HasSubstr(R"({"models":[)"));
  models = Call(bhttp::verb::get, "/v1/models", token);
  EXPECT_THAT(models.body, HasSubstr(R"("object":"list")"));
}

// A harness sends the model's tool call back re-encoded and under its own id (as Claude Code and OpenCode do):
// the upstream gets the model's own bytes, the record says what was restored, and both turns are one branch.
TEST_F(HttpHandlerTest, AToolCallSentBackReEncodedReachesTheUpstreamAsTheModelWroteItAndContinuesTheBranch) {
  std::mutex mu;
  std::vector<std::string> bodies;
  testing::ScriptedUpstream backend([&](http::Request& req, http::Responder& res) -> asio::awaitable<void> {
    if (req.target() == "/health") {
      co_await res.Send(200, "application/json", "{}");
      co_return;
    }
    size_t n;
    {
      std::lock_guard<std::mutex> lock(mu);
      bodies.push_back(req.body());
      n = bodies.size();
    }
    co_await res.Send(200, "application/json",
                      n == 1 ? R"({"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[)"
                               R"({"id":"call_1","type":"function","function":{"name":"bash","arguments":)"
                               R"("{\"command\": \"echo hi\"}"}}]},"finish_reason":"tool_calls"}]})"
                             : kWhole);
  });
  Start({backend.url()});
  const std::string token = Open("ep");
  EXPECT_EQ(Call(bhttp::verb::post, "/v1/chat/completions", token,
                 R"({"model":"m","messages":[{"role":"user","content":"say hi"}]})")
                .status,
            200);
  const std::string second = R"({"model":"m","messages":[{"role":"user","content":"say hi"},)"
                             R"({"role":"assistant","content":"","tool_calls":[{"id":"toolu_9","type":"function",)"
                             R"("function":{"name":"bash","arguments":"{\"command\":\"echo hi\"}"}}]},)"
                             R"({"role":"tool","tool_call_id":"toolu_9","content":"hi"}]})";
  EXPECT_EQ(Call(bhttp::verb::post, "/v1/chat/completions", token, second).status, 200);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_THAT(bodies[1], HasSubstr(R"("arguments":"{\"command\": \"echo hi\"}")")) << "the model's bytes";
  EXPECT_THAT(bodies[1], HasSubstr(R"("tool_call_id":"call_1")"));
  EXPECT_THAT(bodies[1], ::testing::Not(HasSubstr("toolu_9")));
  const v1::Trajectory t = (*store_->Find("ep"))->Trajectory(v1::TRAJECTORY_FORMAT_CALLS);
  ASSERT_EQ(t.calls_size(), 2);
  ASSERT_EQ(t.calls(1).restored_size(), 2);
  EXPECT_EQ(t.calls(1).restored(0).index(), 1u);
  EXPECT_THAT(t.calls(1).restored(0).changes(), ::testing::ElementsAre("arguments re-encoded", "tool-call ids"));
  EXPECT_EQ(t.calls(1).restored(1).index(), 2u);
  ASSERT_EQ(t.branches_size(), 1) << "the second turn continues the first";
  EXPECT_EQ(t.branches(0).call_ids_size(), 2);
}

TEST_F(HttpHandlerTest, TheCallBudgetEndsWithAChoiceAnAgentStopsOn) {
  const std::string token = Open("ep", /*max_calls=*/1);
  EXPECT_EQ(Call(bhttp::verb::post, "/v1/chat/completions", token, Chat(false)).status, 200);
  auto refused = Call(bhttp::verb::post, "/v1/chat/completions", token, Chat(false));
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(refused.body, HasSubstr(R"("code":"budget_exhausted")"));
  EXPECT_THAT(refused.body, HasSubstr(R"("finish_reason":"length")"));
}

TEST_F(HttpHandlerTest, ADeadUpstreamIsABadGatewayRecordedAsAFailedCall) {
  Start({"http://127.0.0.1:1"});
  const std::string token = Open("ep");
  auto r = Call(bhttp::verb::post, "/v1/chat/completions", token, Chat(false));
  EXPECT_EQ(r.status, 502);
  EXPECT_THAT(r.body, HasSubstr(R"("type":"upstream_error")"));
  const v1::Trajectory t = (*store_->Find("ep"))->Trajectory(v1::TRAJECTORY_FORMAT_CALLS);
  ASSERT_EQ(t.calls_size(), 1);
  EXPECT_EQ(t.calls(0).http_status(), 502);
  EXPECT_THAT(t.calls(0).error(), HasSubstr("no upstream answered"));
}

TEST_F(HttpHandlerTest, AnUpstreamSetToRefuseUnrunnableToolsRefusesInTheDialectsShape) {
  Start({upstream_.url()}, [](UpstreamSpec& u) { u.refuse_unrunnable_tools = true; });
  const std::string token = Open("ep");
  auto responses = Call(bhttp::verb::post, "/v1/responses", token,
                        R"({"model": "m", "input": "hi", "tools": [{"type": "web_search"},
                            {"type": "function", "name": "bash", "parameters": {"type": "object"}}]})");
  EXPECT_EQ(responses.status, 400);
  EXPECT_THAT(responses.body, HasSubstr("tools[0]: a built-in tool cannot be run by a chat-completions upstream "
                                        "('web_search'), and this model's upstream refuses such requests"));
  auto messages = Call(bhttp::verb::post, "/v1/messages", token,
                       R"({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
                           "tools": [{"type": "web_search_20250305", "name": "web_search"}]})");
  EXPECT_EQ(messages.status, 400);
  EXPECT_THAT(messages.body, HasSubstr(R"("type":"error","error":{"type":"invalid_request_error")"));
  EXPECT_THAT(messages.body, HasSubstr("tools[0]: a server tool cannot be run"));
  // Function tools only: nothing is left out, and the call goes through.
  auto plain = Call(bhttp::verb::post, "/v1/responses", token,
                    R"({"model": "m", "input": "hi", "tools": [{"type": "function", "name": "bash"}]})");
  EXPECT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ((*store_->Find("ep"))->Trajectory(v1::TRAJECTORY_FORMAT_CALLS).calls_size(), 1);
}

// The last body the native upstream below was sent.
std::string native_body;

TEST_F(HttpHandlerTest, ANativeCallCarriesThePolicysModelTokenCapAndOverridesAndNothingElseChanges) {
  testing::ScriptedUpstream native([](http::Request& req, http::Responder& res) -> asio::awaitable<void> {
    if (req.target() == "/health") {
      co_await res.Send(200, "application/json", "{}");
      co_return;
    }
    native_body = req.body();
    co_await res.Send(200, "application/json",
                      R"({"id": "r1", "object": "response", "status": "completed", "model": "m", "output": [)"
                      R"({"type": "message", "content": [{"type": "output_text", "text": "4"}]}],)"
                      R"("usage": {"input_tokens": 5, "output_tokens": 1}})");
  });
  Start({native.url()}, [](UpstreamSpec& u) { u.dialects = {"responses"}; });
  const std::string token = OpenWithOverrides("gpt-5");
  auto whole = Call(bhttp::verb::post, "/v1/responses", token,
                    R"({"model": "gpt-5", "input": "2+2?", "max_output_tokens": 1000, "temperature": 1.0,)"
                    R"( "store": false, "tools": [{"type": "web_search"}]})");
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_THAT(whole.body, HasSubstr(R"("output_text")"));  // the upstream's answer, as it came
  EXPECT_EQ(boost::json::parse(native_body),
            boost::json::parse(
                R"({"model": "m", "input": "2+2?", "max_output_tokens": 100, "temperature": 0.5, "store": false,
          "tools": [{"type": "web_search"}]})"));
  const v1::Trajectory t = (*store_->Find("ep"))->Trajectory(v1::TRAJECTORY_FORMAT_CALLS);
  ASSERT_EQ(t.calls_size(), 1);
  EXPECT_EQ(t.calls(0).translation_json(), R"({"path":"native"})");
  EXPECT_EQ(t.calls(0).model(), "m");
  EXPECT_EQ(t.calls(0).usage().completion_tokens(), 1u);
}

// The same for Google's API: the model goes into the path, the settings into generationConfig under its names.
TEST_F(HttpHandlerTest, ANativeGeminiCallCarriesThePolicyInGooglesPlaces) {
  std::string target;
  testing::ScriptedUpstream native([&](http::Request& req, http::Responder& res) -> asio::awaitable<void> {
    if (req.target() == "/health") {
      co_await res.Send(200, "application/json", "{}");
      co_return;
    }
    target = std::string(req.target());
    native_body = req.body();
    co_await res.Send(
        200, "application/json",
        R"({"candidates": [{"content": {"role": "model", "parts": [{"text": "4"}]},)"
        R"("finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1}})");
  });
  Start({native.url()}, [](UpstreamSpec& u) { u.dialects = {"gemini"}; });
  const std::string token = OpenWithOverrides("gemini-x");
  auto whole = Call(bhttp::verb::post, "/v1beta/models/gemini-x:generateContent", token,
                    R"({"contents": [{"role": "user", "parts": [{"text": "2+2?"}]}],)"
                    R"( "generationConfig": {"maxOutputTokens": 1000, "temperature": 1.0, "topK": 3}})",
                    "x-goog-api-key");
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(target, "/v1beta/models/m:generateContent");
  EXPECT_EQ(boost::json::parse(native_body),
            boost::json::parse(R"({"contents": [{"role": "user", "parts": [{"text": "2+2?"}]}],
                                   "generationConfig": {"maxOutputTokens": 100, "temperature": 0.5, "topK": 3}})"));
  const v1::Trajectory t = (*store_->Find("ep"))->Trajectory(v1::TRAJECTORY_FORMAT_CALLS);
  ASSERT_EQ(t.calls_size(), 1);
  EXPECT_EQ(t.calls(0).translation_json(), R"({"path":"native"})");
  EXPECT_EQ(t.calls(0).usage().completion_tokens(), 1u);
}

}  // namespace
}  // namespace corral::proxy
