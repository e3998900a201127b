// The official openai, Anthropic and Google GenAI npm SDKs (tests/sdk/*, installed by scripts/test with `npm ci`)
// against a real corral-proxy and corral-fake-llm: plain and streamed calls, tool calls, completions, models, and
// the proxy's errors surfacing as each SDK's typed errors.
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/proxy_fixture.h"

namespace corral {
namespace {

class ProxySdkTest : public ProxyFixture {
 protected:
  // Runs tests/sdk/<name>/sdk.test.mjs with `env` (VAR=value); expects every one of its `tests` to pass. On the
  // Node.js the SDK's directory pins, when it pins one (node_modules/.bin/node), else the machine's.
  void RunNodeTests(const std::string& name, std::vector<std::string> env, int tests) {
    const std::string sdk_dir = std::string(CORRAL_SOURCE_DIR) + "/tests/sdk/" + name;
    std::vector<std::string> argv = {"/usr/bin/env"};
    argv.insert(argv.end(), env.begin(), env.end());
    const std::string pinned = sdk_dir + "/node_modules/.bin/node";
    argv.push_back(std::filesystem::exists(pinned) ? pinned : "node");
    argv.push_back("--test");
    argv.push_back(sdk_dir + "/sdk.test.mjs");
    auto node = testing::Subprocess::Start(argv, dir_ + "/node-" + name + ".log");
    ASSERT_THAT(node, IsOk());
    auto code = node->Wait(absl::Seconds(120));
    ASSERT_THAT(code, IsOk());
    EXPECT_EQ(*code, 0) << node->Log();
    EXPECT_THAT(node->Log(), ::testing::HasSubstr(absl::StrCat("# pass ", tests)));
  }
};

TEST_F(ProxySdkTest, TheOfficialOpenAiNodeSdkWorksAgainstTheProxy) {
  const std::string sdk_dir = std::string(CORRAL_SOURCE_DIR) + "/tests/sdk/openai";
  ASSERT_TRUE(std::filesystem::exists(sdk_dir + "/node_modules/openai"))
      << "run `npm ci --prefix tests/sdk/openai` (scripts/test does)";
  StartProxy({StartBackend()});
  v1::SessionPolicy chat;
  (*chat.mutable_model_aliases())["*"] = "fake-model";
  chat.set_capture_token_ids(true);
  const std::string token = Open("sdk-chat", chat);
  v1::SessionPolicy budget;
  budget.add_allowed_models("fake-model");
  (*budget.mutable_model_aliases())["m"] = "fake-model";
  budget.mutable_budget()->set_max_calls(1);
  const std::string budget_token = Open("sdk-budget", budget);
  const std::string closed_token = Open("sdk-closed");
  ASSERT_THAT(Close("sdk-closed"), IsOk());

  ASSERT_NO_FATAL_FAILURE(RunNodeTests("openai",
                                       {"CORRAL_BASE_URL=http://" + proxy_->ready.http + "/v1", "CORRAL_TOKEN=" + token,
                                        "CORRAL_BUDGET_TOKEN=" + budget_token, "CORRAL_CLOSED_TOKEN=" + closed_token},
                                       13));
  // What the SDK did is in the trajectory: 6 chat and completions calls and 4 Responses calls succeeded on the
  // chat session (the errors were refused before reaching it), recorded under the route the SDK called.
  auto t = Trajectory("sdk-chat");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->call_count(), 10u);
  EXPECT_EQ(t->failed_call_count(), 0u);
  int responses = 0;
  for (const v1::LlmCall& call : t->calls()) responses += call.endpoint() == "/v1/responses" ? 1 : 0;
  EXPECT_EQ(responses, 4);
}

TEST_F(ProxySdkTest, TheOfficialAnthropicNodeSdkWorksAgainstTheMessagesApi) {
  const std::string sdk_dir = std::string(CORRAL_SOURCE_DIR) + "/tests/sdk/anthropic";
  ASSERT_TRUE(std::filesystem::exists(sdk_dir + "/node_modules/@anthropic-ai/sdk"))
      << "run `npm ci --prefix tests/sdk/anthropic` (scripts/test does)";
  StartProxy({StartBackend()});
  v1::SessionPolicy policy;
  (*policy.mutable_model_aliases())["*"] = "fake-model";
  policy.set_capture_token_ids(true);
  const std::string token = Open("sdk-claude", policy);
  const std::string closed_token = Open("sdk-claude-closed");
  ASSERT_THAT(Close("sdk-claude-closed"), IsOk());

  ASSERT_NO_FATAL_FAILURE(RunNodeTests("anthropic",
                                       {"CORRAL_ANTHROPIC_BASE_URL=http://" + proxy_->ready.http,
                                        "CORRAL_TOKEN=" + token, "CORRAL_CLOSED_TOKEN=" + closed_token},
                                       9));
  // Recorded as chat calls, as any other: the 7 that reached the model (the refused ones and count_tokens never
  // did), with their token ids, the tool result as a tool message; the server tool left out, and said so.
  auto t = Trajectory("sdk-claude");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->call_count(), 7u);
  EXPECT_EQ(t->failed_call_count(), 0u);
  ASSERT_EQ(t->calls_size(), 7);
  int noted = 0;
  for (const v1::LlmCall& call : t->calls()) {
    EXPECT_EQ(call.endpoint(), "/v1/messages");
    EXPECT_FALSE(call.completion_token_ids().empty());
    if (call.translation_json().find("web_search_20250305") != std::string::npos) ++noted;
  }
  EXPECT_EQ(noted, 1);
  // The system prompt became a system message, the tool result a tool message.
  auto branches = Trajectory("sdk-claude", v1::TRAJECTORY_FORMAT_TRAJECTORY);
  ASSERT_THAT(branches, IsOk());
  std::set<std::string> roles;
  for (const v1::Branch& b : branches->branches()) {
    for (const v1::TrajectoryMessage& m : b.messages()) roles.insert(m.message().role());
  }
  EXPECT_EQ(roles, (std::set<std::string>{"system", "user", "assistant", "tool"}));
}

TEST_F(ProxySdkTest, TheOfficialGoogleGenAiNodeSdkWorksAgainstTheGeminiApi) {
  const std::string sdk_dir = std::string(CORRAL_SOURCE_DIR) + "/tests/sdk/gemini";
  ASSERT_TRUE(std::filesystem::exists(sdk_dir + "/node_modules/@google/genai"))
      << "run `npm ci --prefix tests/sdk/gemini` (scripts/test does)";
  StartProxy({StartBackend()});
  v1::SessionPolicy policy;
  (*policy.mutable_model_aliases())["*"] = "fake-model";
  policy.set_capture_token_ids(true);
  const std::string token = Open("sdk-gemini", policy);
  const std::string closed_token = Open("sdk-gemini-closed");
  ASSERT_THAT(Close("sdk-gemini-closed"), IsOk());

  ASSERT_NO_FATAL_FAILURE(RunNodeTests("gemini",
                                       {"CORRAL_GEMINI_BASE_URL=http://" + proxy_->ready.http, "CORRAL_TOKEN=" + token,
                                        "CORRAL_CLOSED_TOKEN=" + closed_token},
                                       9));
  // Recorded as chat calls: the 6 that reached the model (countTokens, the list and the refusals did not), each
  // with its token ids and the model the path named; the function response as a tool message; the built-in tool
  // left out, and said so.
  auto t = Trajectory("sdk-gemini");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->failed_call_count(), 0u);
  ASSERT_EQ(t->calls_size(), 6);
  int noted = 0, streamed = 0;
  for (const v1::LlmCall& call : t->calls()) {
    EXPECT_THAT(call.endpoint(), ::testing::StartsWith("/v1/models/{model}:"));  // the SDK calls v1
    EXPECT_EQ(call.requested_model(), "gemini-2.5-pro");
    EXPECT_FALSE(call.completion_token_ids().empty());
    if (call.translation_json().find("googleSearch") != std::string::npos) ++noted;
    if (call.stream()) ++streamed;
  }
  EXPECT_EQ(noted, 1);
  EXPECT_EQ(streamed, 2);
  auto branches = Trajectory("sdk-gemini", v1::TRAJECTORY_FORMAT_TRAJECTORY);
  ASSERT_THAT(branches, IsOk());
  std::set<std::string> roles;
  for (const v1::Branch& b : branches->branches()) {
    for (const v1::TrajectoryMessage& m : b.messages()) roles.insert(m.message().role());
  }
  EXPECT_EQ(roles, (std::set<std::string>{"system", "user", "assistant", "tool"}));
}

}  // namespace
}  // namespace corral
