// corral-proxy as a real process in front of real corral-fake-llm processes: streaming without buffering,
// keepalives during a long TTFT, retries before the first byte, a backend dying mid-stream, kill -9 and
// restart, bad input, and token ids assembled from a stream.
#include <algorithm>
#include <thread>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/proxy_fixture.h"

namespace corral {
namespace {

using ::testing::HasSubstr;

constexpr char kHello[] = R"({"model":"fake-model","messages":[{"role":"user","content":"hello world"}]})";

class ProxyTest : public ProxyFixture {};

TEST_F(ProxyTest, AStreamIsRelayedChunkByChunkWhileTheBackendStillHolds) {
  StartProxy({StartBackend()});
  const std::string token = Open("ep-nobuffer");
  // The backend sends its first two events, then holds the stream open for an hour: they must reach the
  // client although the stream never ends.
  bool both_seen = false;
  absl::Duration seen_after;
  std::string seen;
  Stream(token, StreamBody("one two three", R"({"stall_after_chunks":2})"),
         [&](const std::string& piece, absl::Duration elapsed) {
           seen += piece;
           if (seen.find("\"content\":\"echo:\"") != std::string::npos) {
             both_seen = true;
             seen_after = elapsed;
             return false;
           }
           return true;
         });
  EXPECT_TRUE(both_seen) << seen;
  EXPECT_LT(seen_after, absl::Seconds(5));
}

TEST_F(ProxyTest, KeepaliveCommentsArriveWhileWaitingForTheFirstToken) {
  StartProxy({StartBackend()}, {"--keepalive-interval=200ms"});
  const std::string token = Open("ep-ttft");
  std::string all = Stream(token, StreamBody("slow start", R"({"ttft_ms":1200})"),
                           [](const std::string&, absl::Duration) { return true; });
  const size_t first_data = all.find("data: ");
  ASSERT_NE(first_data, std::string::npos) << all;
  const std::string before = all.substr(0, first_data);
  size_t keepalives = 0;
  for (size_t at = before.find(": keepalive"); at != std::string::npos; at = before.find(": keepalive", at + 1)) {
    ++keepalives;
  }
  EXPECT_GE(keepalives, 3u) << all;
  EXPECT_THAT(all, HasSubstr("\"content\":\" start\""));
  EXPECT_TRUE(absl::EndsWith(all, "data: [DONE]\n\n")) << all;
}

TEST_F(ProxyTest, ABackend5xxBeforeTheFirstByteIsRetriedOnAnotherUpstream) {
  const std::string good = StartBackend();
  const std::string bad = StartBackend({"--fail-first=1000000"});
  StartProxy({good, bad});
  int retried = 0;
  for (int i = 0; i < 10; ++i) {
    const std::string env = "ep-retry-" + std::to_string(i);
    const std::string token = Open(env);
    HttpReply r = Post("/v1/chat/completions", token, kHello);
    ASSERT_EQ(r.status, 200) << r.body;
    auto t = Trajectory(env);
    ASSERT_THAT(t, IsOk());
    ASSERT_EQ(t->calls_size(), 1);
    EXPECT_EQ(t->calls(0).upstream(), good);
    retried += t->calls(0).upstream_attempts() > 1 ? 1 : 0;
  }
  EXPECT_GT(retried, 0) << "no session was sticky to the failing backend (probability 1/1024)";
}

TEST_F(ProxyTest, ABackendDyingMidStreamGivesTheAgentACleanErrorAndIsRecordedFailed) {
  StartProxy({StartBackend()});
  const std::string token = Open("ep-cut");
  std::string all = Stream(token, StreamBody("a b c d", R"({"disconnect_after_chunks":2})"),
                           [](const std::string&, absl::Duration) { return true; });
  EXPECT_THAT(all, HasSubstr("\"content\":\"echo:\""));  // what came before the cut was relayed
  EXPECT_THAT(all, HasSubstr("\"type\":\"upstream_error\""));
  EXPECT_THAT(all, ::testing::Not(HasSubstr("[DONE]")));
  auto t = Trajectory("ep-cut");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->failed_call_count(), 1u);
  EXPECT_THAT(t->calls(0).error(), HasSubstr("mid-stream"));
}

TEST_F(ProxyTest, NothingRecordedIsLostAcrossKillNineAndRestart) {
  const std::string backend = StartBackend();
  StartProxy({backend});
  v1::SessionPolicy policy;
  policy.set_capture_token_ids(true);
  const std::string token = Open("ep-crash", policy);
  for (const char* q : {"first", "second", "third"}) {
    HttpReply r = Post("/v1/chat/completions", token,
                       absl::StrCat(R"({"model":"fake-model","messages":[{"role":"user","content":")", q, R"("}]})"));
    ASSERT_EQ(r.status, 200) << r.body;
  }
  auto before = Trajectory("ep-crash");
  ASSERT_THAT(before, IsOk());
  ASSERT_NO_FATAL_FAILURE(KillAndRestartProxy({backend}));
  auto after = Trajectory("ep-crash");
  ASSERT_THAT(after, IsOk());
  ASSERT_EQ(after->calls_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(after->calls(i).prompt_token_ids_size(), before->calls(i).prompt_token_ids_size());
    EXPECT_EQ(after->calls(i).completion_token_ids_size(), before->calls(i).completion_token_ids_size());
    EXPECT_EQ(after->calls(i).finish_reason(), "stop");
  }
  EXPECT_EQ(after->messages_size(), before->messages_size());
  // The session is still open: its token works on the restarted proxy, and the new call is call 3.
  EXPECT_EQ(Post("/v1/chat/completions", token, kHello).status, 200);
  auto more = Trajectory("ep-crash");
  ASSERT_THAT(more, IsOk());
  EXPECT_EQ(more->calls(3).call_id(), "ep-crash/3");
}

TEST_F(ProxyTest, BadInputGetsPreciseErrorsAndRecordsNothing) {
  StartProxy({StartBackend()}, {"--max-body-bytes=65536"});
  const std::string token = Open("ep-bad");
  EXPECT_THAT(Post("/v1/chat/completions", token, "{not json").body, HasSubstr("malformed JSON"));
  EXPECT_EQ(Post("/v1/chat/completions", token, "{not json").status, 400);
  EXPECT_EQ(Post("/v1/chat/completions", token, R"({"model":"m","messages":"hi"})").status, 400);
  EXPECT_EQ(Post("/v1/chat/completions", token, R"({"model":7,"messages":[]})").status, 400);
  EXPECT_EQ(Post("/v1/chat/completions", token, "[" + std::string(100000, '1') + "]").status, 413);
  EXPECT_EQ(Post("/v1/chat/completions", token, std::string(200, '[')).status, 400);  // nesting bomb
  EXPECT_EQ(Post("/v2/anything", token, kHello).status, 404);
  EXPECT_EQ(Post("/v1/chat/completions", token, "", boost::beast::http::verb::get).status, 405);
  EXPECT_EQ(Post("/v1/chat/completions", "", kHello).status, 401);
  EXPECT_EQ(Post("/v1/chat/completions", "ep-bad.forgedmac", kHello).status, 401);
  auto t = Trajectory("ep-bad");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->call_count(), 0u);
  // The proxy is healthy after all that, and a closed session answers 410.
  EXPECT_EQ(Post("/v1/chat/completions", token, kHello).status, 200);
  ASSERT_THAT(Close("ep-bad"), IsOk());
  HttpReply late = Post("/v1/chat/completions", token, kHello);
  EXPECT_EQ(late.status, 410);
  EXPECT_THAT(late.body, HasSubstr("session_closed"));
}

TEST_F(ProxyTest, ConcurrentCallsCannotOverrunMaxCalls) {
  StartProxy({StartBackend()});
  v1::SessionPolicy policy;
  policy.mutable_budget()->set_max_calls(3);
  const std::string token = Open("ep-race", policy);
  std::vector<int> statuses(12, 0);
  std::vector<std::thread> agents;
  for (size_t i = 0; i < statuses.size(); ++i) {
    agents.emplace_back([&, i] {
      statuses[i] = Post("/v1/chat/completions", token,
                         R"({"model":"fake-model","messages":[{"role":"user","content":"x"}],"fake":{"ttft_ms":300}})")
                        .status;
    });
  }
  for (auto& a : agents) a.join();
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 200), 3);
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 400), 9);
  auto t = Trajectory("ep-race");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->call_count(), 3u);
}

// `record: false`, a gateway: calls are relayed (whole and streamed), counted against max_calls and metered, and
// nothing of them is kept: GetTrajectory is refused by name, and a restart finds the session with no calls.
TEST_F(ProxyTest, AProxyThatRecordsNothingRelaysCountsAndMetersButKeepsNoTrajectory) {
  const std::string backend = StartBackend();
  StartProxy({backend}, {"--record=false"});
  v1::SessionPolicy policy;
  policy.mutable_budget()->set_max_calls(3);
  const std::string token = Open("ep-gateway", policy);
  HttpReply whole = Post("/v1/chat/completions", token, kHello);
  EXPECT_EQ(whole.status, 200);
  EXPECT_THAT(whole.body, HasSubstr("echo:"));
  const std::string streamed =
      Stream(token, StreamBody("one two", "{}"), [](const std::string&, absl::Duration) { return true; });
  EXPECT_THAT(streamed, HasSubstr("data: [DONE]"));
  EXPECT_EQ(Post("/v1/chat/completions", token, kHello).status, 200);
  HttpReply over = Post("/v1/chat/completions", token, kHello);
  EXPECT_EQ(over.status, 400);
  EXPECT_THAT(over.body, HasSubstr("budget_exhausted"));
  auto t = Trajectory("ep-gateway");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(t.status().message(), HasSubstr("record: false"));
  v1::ListSessionsRequest list;
  auto listed = Rpc(&v1::Proxy::Stub::ListSessions, list);
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->sessions_size(), 1);
  EXPECT_EQ(listed->sessions(0).calls(), 3u);
  EXPECT_GT(listed->sessions(0).usage().completion_tokens(), 0u);
  // Nothing of the calls was journaled: the restarted proxy (recording now) has the session and none of them.
  ASSERT_NO_FATAL_FAILURE(KillAndRestartProxy({backend}));
  auto after = Trajectory("ep-gateway");
  ASSERT_THAT(after, IsOk());
  EXPECT_EQ(after->call_count(), 0u);
}

TEST_F(ProxyTest, TokenIdsAndLogprobsFromAStreamEqualThoseOfTheSameReplyUnstreamed) {
  StartProxy({StartBackend()});
  v1::SessionPolicy policy;
  policy.set_capture_token_ids(true);
  policy.set_capture_logprobs(true);
  const std::string token = Open("ep-tokens", policy);
  HttpReply whole = Post("/v1/chat/completions", token,
                         R"({"model":"fake-model","messages":[{"role":"user","content":"the same words"}]})");
  ASSERT_EQ(whole.status, 200);
  EXPECT_THAT(whole.body, ::testing::Not(HasSubstr("token_ids")));  // stripped: the agent did not ask
  Stream(token, StreamBody("the same words"), [](const std::string&, absl::Duration) { return true; });
  auto t = Trajectory("ep-tokens");
  ASSERT_THAT(t, IsOk());
  ASSERT_EQ(t->calls_size(), 2);
  const v1::LlmCall &a = t->calls(0), &b = t->calls(1);
  EXPECT_FALSE(a.stream());
  EXPECT_TRUE(b.stream());
  ASSERT_EQ(a.completion_token_ids_size(), 4);  // "echo:", " the", " same", " words"
  EXPECT_THAT(b.completion_token_ids(), ::testing::ElementsAreArray(a.completion_token_ids()));
  EXPECT_THAT(b.completion_logprobs(), ::testing::ElementsAreArray(a.completion_logprobs()));
  EXPECT_THAT(b.prompt_token_ids(), ::testing::ElementsAreArray(a.prompt_token_ids()));
  EXPECT_EQ(b.usage().completion_tokens(), 4u);  // from the usage chunk the proxy asked for
  EXPECT_EQ(t->messages(t->calls(1).response_message()).message().content(), "echo: the same words");
}

// Asynchronous RL: the trainer says the weights changed while a call streams; the recorded call says which of its
// tokens came before and after, and the trajectory's token view carries each token's version.
TEST_F(ProxyTest, APolicyUpdateMidStreamSplitsTheCallsTokensByVersion) {
  StartProxy({StartBackend()});
  auto first = UpdatePolicy(3);
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(first->previous_version(), 0);
  v1::SessionPolicy policy;
  policy.set_capture_token_ids(true);
  const std::string token = Open("ep-versions", policy);
  // Six tokens, 150 ms apart: after the second token reaches the agent, the version moves to 4.
  int content_chunks = 0;  // chunks with a token (not the empty content of a role chunk)
  bool updated = false;
  Stream(token, StreamBody("one two three four five", R"({"inter_token_ms":150})"),
         [&](const std::string& piece, absl::Duration) {
           const std::string key = "\"content\":\"";
           for (size_t at = piece.find(key); at != std::string::npos; at = piece.find(key, at + 1)) {
             if (at + key.size() < piece.size() && piece[at + key.size()] != '"') ++content_chunks;
           }
           if (content_chunks >= 2 && !updated) {
             updated = true;
             auto moved = UpdatePolicy(4);
             EXPECT_THAT(moved, IsOk());
           }
           return true;
         });
  ASSERT_TRUE(updated);
  auto t = Trajectory("ep-versions", v1::TRAJECTORY_FORMAT_CALLS);
  ASSERT_THAT(t, IsOk());
  ASSERT_EQ(t->calls_size(), 1);
  const v1::LlmCall& call = t->calls(0);
  EXPECT_EQ(call.policy_version(), 3);
  ASSERT_EQ(call.version_changes_size(), 1);
  const uint32_t split = call.version_changes(0).completion_token();
  EXPECT_EQ(call.version_changes(0).version(), 4);
  EXPECT_GE(split, 2u);  // at least the two tokens the agent had seen are version 3's
  EXPECT_LT(split, static_cast<uint32_t>(call.completion_token_ids_size()));  // and the stream went on under 4
  EXPECT_EQ(t->first_policy_version(), 3);
  EXPECT_EQ(t->last_policy_version(), 4);
  auto view = Trajectory("ep-versions", v1::TRAJECTORY_FORMAT_TRAJECTORY);
  ASSERT_THAT(view, IsOk());
  const v1::Branch& b = view->branches(0);
  ASSERT_EQ(b.token_versions_size(), b.token_ids_size());
  const int prompt = call.prompt_token_ids_size();
  for (int i = 0; i < b.token_versions_size(); ++i) {
    const int64_t want = i < prompt ? -1 : (i - prompt < static_cast<int>(split) ? 3 : 4);
    EXPECT_EQ(b.token_versions(i), want) << "token " << i;
  }
  // Versions only move forward; the same version again is a retry.
  EXPECT_THAT(UpdatePolicy(2),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("below the current version 4")));
  EXPECT_THAT(UpdatePolicy(-1), StatusIs(absl::StatusCode::kInvalidArgument));
  auto again = UpdatePolicy(4);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->previous_version(), 4);
}

}  // namespace
}  // namespace corral
