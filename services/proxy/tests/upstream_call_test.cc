// UpstreamCall on its own, over a scripted upstream on loopback: a whole answer recorded and counted, a refusal
// kept as the upstream gave it, a call held by a pause that keeps a streaming agent company and fails when the
// agent leaves, and a call a pause cut before it answered, sent again after the resume. The clock is fake; the
// gate's and the dispatcher's waits are real but short.
#include "services/proxy/upstream_call.h"

#include <atomic>
#include <future>

#include "absl/strings/match.h"
#include "boost/asio/this_coro.hpp"
#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/event_count.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "prometheus/registry.h"
#include "services/proxy/tests/proxy_core.h"
#include "services/proxy/tests/proxy_test_support.h"

namespace corral::proxy {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using ::testing::HasSubstr;

constexpr char kWholeReply[] =
    R"({"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant",)"
    R"("content":"4"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}})";

// An agent at the other end of a streamed call: counts the keepalive comments, and leaves when told.
class FakeAgent final : public AgentLink {
 public:
  asio::awaitable<bool> Comment(absl::string_view) override {
    comments.Add();
    co_return stays.load();
  }
  corral::testing::EventCount comments;
  std::atomic<bool> stays = true;
};

class UpstreamCallTest : public ::testing::Test, protected testing::ProxyCore {
 protected:
  // The upstream: each request is counted, then answered by `answer` (which may wait).
  void Start(http::Handler answer) {
    upstream_ = std::make_unique<testing::ScriptedUpstream>(
        [this, answer](http::Request& req, http::Responder& res) -> asio::awaitable<void> {
          if (req.target() != "/health") requests_.Add();
          co_await answer(req, res);
        });
    BuildCore({*ParseUpstreamUrl(upstream_->url())}, RelayOptions{.connect_timeout = absl::Seconds(1),
                                                                  .keepalive_interval = absl::Milliseconds(20),
                                                                  .retry_backoff = absl::Milliseconds(1)});
    metrics_.SetUpstreams({pool_->all()[0]->spec.name});
    v1::OpenSessionRequest open;
    open.set_env_id("ep");
    std::promise<std::string> token;
    ledger_->Open(open, [&](absl::StatusOr<SessionLedger::Opened> o) { token.set_value(o.ok() ? o->token : ""); });
    session_ = *store_->Authenticate(token.get_future().get());
  }
  void TearDown() override {
    if (dispatcher_ != nullptr) dispatcher_->Shutdown();
  }

  // A chat call of the session, its slot taken, as the handler makes it.
  CallRequest Request(bool stream) {
    CallRequest c;
    c.session = session_;
    EXPECT_TRUE(c.session->TryBeginCall());
    c.api = &ChatApi();
    c.body = json::parse(absl::StrCat(R"({"model":"m","messages":[{"role":"user","content":"2+2?"}],"stream":)",
                                      stream ? "true" : "false", "}"))
                 .as_object();
    c.rewrite.model = c.rewrite.requested_model = "m";
    c.rewrite.stream = stream;
    c.received = clock_.Now();
    return c;
  }
  // How a finished call went, read before the call is destroyed.
  struct Outcome {
    UpstreamCall::Opened opened = UpstreamCall::Opened::kFailed;
    std::optional<std::string> answer_id;
    std::optional<CallError> error;
    std::string refusal;
    bool recorded = false;
  };

  corral::testing::EventCount requests_;
  std::unique_ptr<testing::ScriptedUpstream> upstream_;
  std::shared_ptr<Session> session_;
  FakeAgent agent_;
};

http::Handler Whole(int status, std::string body) {
  return [=](http::Request&, http::Responder& res) -> asio::awaitable<void> {
    co_await res.Send(status, "application/json", body);
  };
}

TEST_F(UpstreamCallTest, AWholeAnswerIsReadRecordedAndCountedByItsRoute) {
  Start(Whole(200, kWholeReply));
  auto run = [this]() -> asio::awaitable<Outcome> {
    Outcome o;
    UpstreamCall call(Parts(), Request(false), co_await asio::this_coro::executor);
    o.opened = co_await call.Open(agent_);
    if (auto whole = co_await call.Whole(agent_)) o.answer_id = std::string(whole->answer.at("id").as_string());
    EXPECT_THAT(co_await call.Record(), IsOk());
    o.recorded = call.recorded();
    co_return o;
  };
  Outcome o = io_.RunSync(run());
  EXPECT_EQ(o.opened, UpstreamCall::Opened::kAnswering);
  EXPECT_EQ(o.answer_id, "c1");
  EXPECT_TRUE(o.recorded);
  EXPECT_EQ(session_->used().calls, 1u);
  EXPECT_EQ(metrics_.Request(ChatApi(), 200, 0).Value(), 1);  // counted when the call ended
}

TEST_F(UpstreamCallTest, ARefusalIsKeptAsTheUpstreamGaveItAndRecordedFailed) {
  Start(Whole(400, R"({"error":{"message":"context too long","type":"invalid_request_error"}})"));
  auto run = [this]() -> asio::awaitable<Outcome> {
    Outcome o;
    UpstreamCall call(Parts(), Request(false), co_await asio::this_coro::executor);
    o.opened = co_await call.Open(agent_);
    o.error = call.error();
    o.refusal = call.refusal();
    o.recorded = call.recorded();
    co_return o;
  };
  Outcome o = io_.RunSync(run());
  EXPECT_EQ(o.opened, UpstreamCall::Opened::kRefused);
  ASSERT_TRUE(o.error.has_value());
  EXPECT_EQ(o.error->http_status, 400);
  EXPECT_THAT(o.refusal, HasSubstr("context too long"));
  EXPECT_TRUE(o.recorded);
  EXPECT_EQ(metrics_.Request(ChatApi(), 400, 0).Value(), 1);
}

TEST_F(UpstreamCallTest, APausedStreamingCallKeepsTheAgentCompanyAndFailsWhenTheAgentLeaves) {
  Start(Whole(200, kWholeReply));
  v1::PauseGenerationRequest pause;
  pause.set_sequence(1);
  pause.set_mode(v1::PAUSE_MODE_DRAIN);
  ASSERT_TRUE(gate_.Pause(pause));
  auto run = [this]() -> asio::awaitable<Outcome> {
    Outcome o;
    UpstreamCall call(Parts(), Request(/*stream=*/true), co_await asio::this_coro::executor);
    o.opened = co_await call.Open(agent_);
    o.error = call.error();
    o.recorded = call.recorded();
    co_return o;
  };
  std::future<Outcome> running = asio::co_spawn(io_.context(), run(), asio::use_future);
  ASSERT_TRUE(agent_.comments.AwaitAtLeast(3));
  EXPECT_EQ(requests_.value(), 0);  // held at the gate, nothing sent
  agent_.stays = false;             // the agent hung up
  Outcome o = running.get();
  EXPECT_EQ(o.opened, UpstreamCall::Opened::kFailed);
  ASSERT_TRUE(o.error.has_value());
  EXPECT_EQ(o.error->http_status, 499);
  EXPECT_TRUE(o.recorded);
  EXPECT_EQ(requests_.value(), 0);
}

TEST_F(UpstreamCallTest, ACallAPauseCutsBeforeItAnsweredIsSentAgainAfterTheResume) {
  // The first request is held upstream until the pause cuts it; the one sent after the resume is answered.
  Start([this](http::Request&, http::Responder& res) -> asio::awaitable<void> {
    if (requests_.value() == 1) co_await testing::HangUntilTheServerStops();
    co_await res.Send(200, "application/json", kWholeReply);
  });
  auto run = [this]() -> asio::awaitable<Outcome> {
    Outcome o;
    UpstreamCall call(Parts(), Request(false), co_await asio::this_coro::executor);
    o.opened = co_await call.Open(agent_);
    if (auto whole = co_await call.Whole(agent_)) o.answer_id = std::string(whole->answer.at("id").as_string());
    EXPECT_THAT(co_await call.Record(), IsOk());
    co_return o;
  };
  std::future<Outcome> running = asio::co_spawn(io_.context(), run(), asio::use_future);
  ASSERT_TRUE(requests_.AwaitAtLeast(1));
  v1::PauseGenerationRequest pause;
  pause.set_sequence(1);
  pause.set_mode(v1::PAUSE_MODE_ABORT);
  ASSERT_TRUE(gate_.Pause(pause));
  ASSERT_TRUE(gate_.AwaitHeld(1, absl::Seconds(10)));  // the cut call waits at the gate again
  EXPECT_EQ(gate_.Counts().aborted(), 1u);
  clock_.Advance(absl::Seconds(2));
  v1::ResumeGenerationRequest resume;
  resume.set_sequence(2);
  ASSERT_THAT(gate_.Resume(resume), IsOk());
  Outcome o = running.get();
  EXPECT_EQ(o.opened, UpstreamCall::Opened::kAnswering);
  EXPECT_EQ(o.answer_id, "c1");
  EXPECT_EQ(requests_.value(), 2);
  EXPECT_EQ(metrics_.calls_aborted.Value(), 1);
  EXPECT_EQ(metrics_.calls_continued.Value(), 1);
  EXPECT_EQ(session_->used().calls, 1u);  // one call, sent twice
}

}  // namespace
}  // namespace corral::proxy
