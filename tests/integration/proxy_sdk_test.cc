// The official openai npm SDK (tests/sdk/openai, installed by scripts/test with `npm ci`) against a real
// corral-proxy and corral-fake-llm: chat with and without streaming, tool calls, completions, models, and the
// proxy's errors surfacing as the SDK's typed errors (401, 410, 400 budget, 400 model).
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/proxy_fixture.h"

namespace corral {
namespace {

class ProxySdkTest : public ProxyFixture {};

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

  auto node = testing::Subprocess::Start(
      {"/usr/bin/env", "CORRAL_BASE_URL=http://" + proxy_->ready.http + "/v1", "CORRAL_TOKEN=" + token,
       "CORRAL_BUDGET_TOKEN=" + budget_token, "CORRAL_CLOSED_TOKEN=" + closed_token, "node", "--test",
       sdk_dir + "/sdk.test.mjs"},
      dir_ + "/node.log");
  ASSERT_THAT(node, IsOk());
  auto code = node->Wait(absl::Seconds(120));
  ASSERT_THAT(code, IsOk());
  EXPECT_EQ(*code, 0) << node->Log();
  EXPECT_THAT(node->Log(), ::testing::HasSubstr("# pass 9"));
  // What the SDK did is in the trajectory: 7 calls succeeded on the chat session (the two errors were refused
  // before reaching it), and the tool result came back as a tool message.
  auto t = Trajectory("sdk-chat");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->call_count(), 6u);
  EXPECT_EQ(t->failed_call_count(), 0u);
}

}  // namespace
}  // namespace corral
