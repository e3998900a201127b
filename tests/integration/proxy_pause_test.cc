// Pausing generation around a weight update, against the real corral-proxy and corral-fake-llm processes: an
// aborted stream continued after the resume as one answer whose tokens change version exactly where the
// continuation began; a drain that lets calls in flight finish while new ones wait (a streaming one with
// keepalives); an unstreamed call cut and sent again; bad and stale control requests that change nothing.
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"
#include "libs/http/prometheus_text.h"
#include "tests/integration/proxy_fixture.h"

namespace corral {
namespace {

using ::testing::HasSubstr;
namespace json = boost::json;

json::value ParseJson(absl::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  EXPECT_FALSE(ec) << text;
  return ec ? json::value(json::object()) : v;
}

// The agent's view of an SSE answer: the content it assembles, the chunk ids, the role deltas, the comments.
struct Seen {
  std::string content;
  std::set<std::string> ids;
  int roles = 0;
  int paused_comments = 0;
  bool done = false;
  bool error = false;
};

Seen Parse(const std::string& all) {
  Seen s;
  for (absl::string_view line : absl::StrSplit(all, '\n')) {
    if (absl::StartsWith(line, ": paused")) ++s.paused_comments;
    if (!absl::ConsumePrefix(&line, "data: ")) continue;
    if (line == "[DONE]") {
      s.done = true;
      continue;
    }
    json::object o = ParseJson(line).as_object();
    if (o.contains("error")) s.error = true;
    if (auto* id = o.if_contains("id")) s.ids.insert(std::string(id->as_string()));
    for (const auto& c : o["choices"].as_array()) {
      const json::object& d = c.as_object().at("delta").as_object();
      if (d.contains("role")) ++s.roles;
      if (auto* text = d.if_contains("content"); text != nullptr && text->is_string()) s.content += text->as_string();
    }
  }
  return s;
}

// Counts the chunks that carried a token so far.
int Tokens(const std::string& all) {
  int n = 0;
  const std::string key = "\"content\":\"";
  for (size_t at = all.find(key); at != std::string::npos; at = all.find(key, at + 1)) {
    if (at + key.size() < all.size() && all[at + key.size()] != '"') ++n;
  }
  return n;
}

class ProxyPauseTest : public ProxyFixture {
 protected:
  json::object Stats(const std::string& backend) {
    HttpReply r = Backend(backend, "/admin/stats");
    EXPECT_EQ(r.status, 200) << r.body;
    return ParseJson(r.body).as_object();
  }
  // The proxy's calls held by pauses so far (corral_proxy_paused_calls_total{outcome="held"}).
  double Held() {
    auto text = http::HttpGet(proxy_->ready.metrics, "/metrics");
    if (!text.ok()) return -1;
    auto exposition = http::ParsePrometheusText(*text);
    if (!exposition.ok()) return -1;
    return exposition->Value("corral_proxy_paused_calls_total", {{"outcome", "held"}}).value_or(-1);
  }
};

TEST_F(ProxyPauseTest, AnAbortedStreamContinuesAfterTheResumeAsOneAnswerWhoseTokensChangeVersionThere) {
  const std::string backend = StartBackend();
  StartProxy({backend}, {"--keepalive-interval=100ms"});
  ASSERT_THAT(UpdatePolicy(1), IsOk());
  v1::SessionPolicy policy;
  policy.set_capture_token_ids(true);
  const std::string words = "one two three four five six seven";
  const std::string token = Open("ep-abort", policy);
  bool paused = false;
  std::string all = Stream(token, StreamBody(words, R"({"inter_token_ms":100})"),
                           [&](const std::string&, absl::Duration) { return true; });
  // (The first stream above is the reference: the same answer with no pause.)
  const Seen reference = Parse(all);
  ASSERT_EQ(reference.content, "echo: " + words);

  const std::string token2 = Open("ep-abort-2", policy);
  std::string seen;
  all = Stream(token2, StreamBody(words, R"({"inter_token_ms":100})"), [&](const std::string& piece, absl::Duration) {
    seen += piece;
    if (!paused && Tokens(seen) >= 2) {
      paused = true;
      // The weight update: cut what is upstream, swap the weights, resume at the new version.
      auto p = Pause(v1::PAUSE_MODE_ABORT);
      EXPECT_THAT(p, IsOk());
      if (p.ok()) {
        EXPECT_EQ(p->aborted(), 1u);
        EXPECT_EQ(p->drained(), 0u);
      }
      absl::SleepFor(absl::Milliseconds(350));  // the weight swap: the agent gets keepalives meanwhile
      EXPECT_EQ(Backend(backend, "/admin/version", R"({"version":2})").status, 200);
      auto r = Resume(2);
      EXPECT_THAT(r, IsOk());
      if (r.ok()) {
        EXPECT_EQ(r->version(), 2);
        EXPECT_EQ(r->released(), 1u);
        EXPECT_GE(FromProto(r->paused_for()), absl::Milliseconds(300));
      }
    }
    return true;
  });
  ASSERT_TRUE(paused);
  const Seen s = Parse(all);
  EXPECT_EQ(s.content, "echo: " + words) << all;  // one coherent answer
  EXPECT_EQ(s.roles, 1) << all;
  EXPECT_EQ(s.ids.size(), 1u) << all;
  EXPECT_GE(s.paused_comments, 2) << all;
  EXPECT_TRUE(s.done) << all;
  EXPECT_FALSE(s.error) << all;

  // The backend saw the cut stream end and one continuation, run under version 2, given k tokens.
  json::object stats = Stats(backend);
  EXPECT_GE(stats["aborted_streams"].as_int64(), 1);
  ASSERT_EQ(stats["continuations"].as_array().size(), 1u) << json::serialize(stats);
  const json::object& cont = stats["continuations"].as_array()[0].as_object();
  EXPECT_EQ(cont.at("version").as_int64(), 2);
  const int64_t k = cont.at("continued_from").as_int64();
  EXPECT_GE(k, 2);  // "echo:" plus at least one word had reached the agent

  // The record: the same tokens as without a pause, version 1 up to k, version 2 from k on.
  auto ref = Trajectory("ep-abort");
  auto t = Trajectory("ep-abort-2");
  ASSERT_THAT(ref, IsOk());
  ASSERT_THAT(t, IsOk());
  ASSERT_EQ(t->calls_size(), 1);
  const v1::LlmCall& call = t->calls(0);
  EXPECT_THAT(call.completion_token_ids(), ::testing::ElementsAreArray(ref->calls(0).completion_token_ids()));
  EXPECT_THAT(call.completion_logprobs(), ::testing::ElementsAreArray(ref->calls(0).completion_logprobs()));
  EXPECT_THAT(call.prompt_token_ids(), ::testing::ElementsAreArray(ref->calls(0).prompt_token_ids()));
  EXPECT_EQ(call.usage().completion_tokens(), ref->calls(0).usage().completion_tokens());
  EXPECT_EQ(call.usage().prompt_tokens(), ref->calls(0).usage().prompt_tokens());
  EXPECT_EQ(call.policy_version(), 1);
  ASSERT_EQ(call.version_changes_size(), 1);
  EXPECT_EQ(call.version_changes(0).completion_token(), static_cast<uint32_t>(k));
  EXPECT_EQ(call.version_changes(0).version(), 2);
  EXPECT_EQ(t->messages(call.response_message()).message().content(), "echo: " + words);
}

TEST_F(ProxyPauseTest, ADrainLetsTheCallInFlightFinishWhileNewCallsWaitForTheResume) {
  const std::string backend = StartBackend();
  StartProxy({backend}, {"--keepalive-interval=100ms"});
  const std::string token = Open("ep-drain");
  // A stream in flight (7 tokens, 100 ms apart) when the pause begins.
  std::atomic<bool> started{false};
  std::string inflight;
  std::thread agent([&] {
    inflight = Stream(token, StreamBody("a b c d e f", R"({"inter_token_ms":100})"),
                      [&](const std::string& p, absl::Duration) {
                        if (absl::StrContains(p, "\"content\":\"echo:\"")) started = true;
                        return true;
                      });
  });
  EXPECT_TRUE(testing::WaitUntil([&] { return started.load(); }, absl::Seconds(10)));
  auto p = Pause(v1::PAUSE_MODE_DRAIN);
  agent.join();
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->drained(), 1u);
  EXPECT_EQ(p->aborted(), 0u);
  EXPECT_GE(FromProto(p->waited()), absl::Milliseconds(300));  // it waited for the stream's remaining tokens
  EXPECT_EQ(Parse(inflight).content, "echo: a b c d e f");
  const int64_t requests = Stats(backend)["requests"].as_int64();

  // While paused, an unstreamed and a streamed call wait; the streamed one gets keepalives.
  const std::string token2 = Open("ep-held");
  const std::string token3 = Open("ep-held-stream");
  HttpReply whole;
  std::string streamed;
  std::atomic<bool> commented{false};
  std::thread a([&] {
    whole =
        Post("/v1/chat/completions", token2, R"({"model":"fake-model","messages":[{"role":"user","content":"held"}]})");
  });
  std::thread b([&] {
    streamed = Stream(token3, StreamBody("held too", "{}"), [&](const std::string& piece, absl::Duration) {
      if (absl::StrContains(piece, ": paused")) commented = true;
      return true;
    });
  });
  EXPECT_TRUE(testing::WaitUntil([&] { return commented.load() && Held() >= 2; }, absl::Seconds(10)));
  EXPECT_EQ(Stats(backend)["requests"].as_int64(), requests);  // nothing went upstream while paused
  auto r = Resume(7);
  a.join();
  b.join();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->released(), 2u);
  EXPECT_EQ(whole.status, 200) << whole.body;
  EXPECT_THAT(whole.body, HasSubstr("echo: held"));
  EXPECT_EQ(Parse(streamed).content, "echo: held too") << streamed;
  // A call that waited out the pause ran entirely under the resumed version.
  auto t = Trajectory("ep-held");
  ASSERT_THAT(t, IsOk());
  ASSERT_EQ(t->calls_size(), 1);
  EXPECT_EQ(t->calls(0).policy_version(), 7);
  EXPECT_EQ(t->calls(0).version_changes_size(), 0);
}

TEST_F(ProxyPauseTest, ADrainPastAbortAfterCutsWhatStillStreamsAndContinuesItAfterTheResume) {
  const std::string backend = StartBackend();
  StartProxy({backend});
  const std::string token = Open("ep-abort-after");
  const std::string words = "a b c d e f g h i j";
  std::atomic<bool> started{false};
  std::string all;
  std::thread agent([&] {
    // 11 tokens, 200 ms apart: a drain would wait about two seconds for it.
    all = Stream(token, StreamBody(words, R"({"inter_token_ms":200})"), [&](const std::string& p, absl::Duration) {
      if (absl::StrContains(p, "\"content\":\"echo:\"")) started = true;
      return true;
    });
  });
  EXPECT_TRUE(testing::WaitUntil([&] { return started.load(); }, absl::Seconds(10)));
  auto p = Pause(v1::PAUSE_MODE_DRAIN, 0, absl::Milliseconds(300));
  auto r = Resume(std::nullopt);
  agent.join();
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->aborted(), 1u);  // cut at abort_after, not drained
  EXPECT_EQ(p->drained(), 0u);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->released(), 1u);
  EXPECT_EQ(Parse(all).content, "echo: " + words) << all;
  EXPECT_EQ(Stats(backend)["continuations"].as_array().size(), 1u);
}

TEST_F(ProxyPauseTest, AnUnstreamedCallCutByAPauseIsSentAgainWholeAfterTheResume) {
  const std::string backend = StartBackend();
  StartProxy({backend});
  const std::string token = Open("ep-whole");
  HttpReply whole;
  std::thread agent([&] {
    whole = Post("/v1/chat/completions", token,
                 R"({"model":"fake-model","messages":[{"role":"user","content":"slow"}],"fake":{"ttft_ms":1500}})");
  });
  EXPECT_TRUE(testing::WaitUntil([&] { return Stats(backend)["requests"].as_int64() >= 1; }, absl::Seconds(10)));
  auto p = Pause(v1::PAUSE_MODE_ABORT);
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->aborted(), 1u);
  auto r = Resume(3);
  agent.join();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(whole.status, 200) << whole.body;
  EXPECT_THAT(whole.body, HasSubstr("echo: slow"));
  EXPECT_EQ(Stats(backend)["requests"].as_int64(), 2);
  auto t = Trajectory("ep-whole");
  ASSERT_THAT(t, IsOk());
  ASSERT_EQ(t->calls_size(), 1);
  EXPECT_EQ(t->calls(0).policy_version(), 3);
}

TEST_F(ProxyPauseTest, BadAndStaleControlRequestsChangeNothing) {
  StartProxy({StartBackend()});
  EXPECT_THAT(Pause(static_cast<v1::PauseMode>(9)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("PauseMode")));
  ASSERT_THAT(UpdatePolicy(5), IsOk());
  ASSERT_THAT(Pause(v1::PAUSE_MODE_DRAIN, /*sequence=*/10), IsOk());
  // A lower version is refused, and the proxy stays paused.
  EXPECT_THAT(Resume(4, 11), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("below the current version 5")));
  // A late re-push (lower sequence) changes nothing: still paused, still version 5.
  auto stale = Resume(6, 9);
  ASSERT_THAT(stale, IsOk());
  EXPECT_EQ(stale->version(), 5);
  EXPECT_FALSE(stale->has_paused_for());
  auto resumed = Resume(6, 12);
  ASSERT_THAT(resumed, IsOk());
  EXPECT_EQ(resumed->version(), 6);
  EXPECT_TRUE(resumed->has_paused_for());
  // Not paused: a resume only moves the version.
  auto again = Resume(std::nullopt, 13);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->version(), 6);
  EXPECT_FALSE(again->has_paused_for());
}

}  // namespace
}  // namespace corral
