// What an episode cost, as the totals count it and a price table prices it; its model usage from its trajectory.
#include "services/scheduler/table/usage_totals.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"
#include "libs/core/testing/status_matchers.h"
#include "services/scheduler/episode/episode_usage.h"
#include "yaml-cpp/yaml.h"

namespace corral::scheduler {
namespace {

v1::LlmCall Call(v1::CallRole role, const std::string& model, uint64_t prompt, uint64_t cached, uint64_t completion,
                 absl::Duration took) {
  v1::LlmCall c;
  c.set_role(role);
  c.set_model(model);
  c.mutable_usage()->set_prompt_tokens(prompt);
  c.mutable_usage()->set_cached_prompt_tokens(cached);
  c.mutable_usage()->set_completion_tokens(completion);
  ToProto(absl::FromUnixSeconds(100), c.mutable_timings()->mutable_received());
  ToProto(absl::FromUnixSeconds(100) + took, c.mutable_timings()->mutable_done());
  return c;
}

TEST(EpisodeUsageTest, ModelUsageSumsTheCallsInAllByRoleAndByModelFromTheGivenOne) {
  v1::Trajectory t;
  *t.add_calls() = Call(v1::CALL_ROLE_AGENT, "m1", 100, 0, 10, absl::Seconds(1));  // a branch's shared prefix
  *t.add_calls() = Call(v1::CALL_ROLE_AGENT, "m1", 200, 150, 20, absl::Seconds(2));
  *t.add_calls() = Call(v1::CALL_ROLE_AUXILIARY, "m2", 50, 0, 5, absl::Milliseconds(500));
  const v1::ModelUsage own = ModelUsageOf(t, 1, t.calls_size());
  EXPECT_EQ(own.calls(), 2u);
  EXPECT_EQ(own.prompt_tokens(), 250u);
  EXPECT_EQ(own.cached_prompt_tokens(), 150u);
  EXPECT_EQ(own.completion_tokens(), 25u);
  EXPECT_EQ(FromProto(own.wait_time()), absl::Milliseconds(2500));
  ASSERT_EQ(own.by_role_size(), 2);
  EXPECT_EQ(own.by_role(0).role(), v1::CALL_ROLE_AGENT);
  EXPECT_EQ(own.by_role(0).prompt_tokens(), 200u);
  EXPECT_EQ(own.by_role(1).role(), v1::CALL_ROLE_AUXILIARY);
  EXPECT_EQ(own.by_role(1).completion_tokens(), 5u);
  ASSERT_EQ(own.by_model_size(), 2);
  EXPECT_EQ(own.by_model(1).model(), "m2");
  EXPECT_EQ(ModelUsageOf(t, 0, 1).prompt_tokens(), 100u);
  EXPECT_EQ(ModelUsageOf(t, 2, 99).calls(), 1u);  // clamped to the calls there are
}

TEST(EpisodeUsageTest, ToolUsageListsEachToolByName) {
  const v1::ToolUsage u =
      ToolUsageOf({{"python", {2, absl::Seconds(3)}}, {"env:step", {1, absl::Seconds(1)}}}, absl::Seconds(4));
  EXPECT_EQ(u.calls(), 3u);
  EXPECT_EQ(FromProto(u.time()), absl::Seconds(4));
  ASSERT_EQ(u.by_tool_size(), 2);
  EXPECT_EQ(u.by_tool(0).name(), "env:step");
  EXPECT_EQ(u.by_tool(1).calls(), 2u);
}

v1::EpisodeUsage Usage() {
  v1::EpisodeUsage u;
  ToProto(absl::Seconds(3600), u.mutable_sandbox()->mutable_cpu_time());
  u.mutable_sandbox()->set_memory_gib_seconds(7200);
  ToProto(absl::Seconds(10), u.mutable_sandbox()->mutable_wall_time());
  v1::ModelUsage& m = *u.mutable_model();
  m.set_calls(2);
  m.set_prompt_tokens(3'000'000);
  m.set_completion_tokens(1'000'000);
  v1::NamedModelUsage* named = m.add_by_model();
  named->set_model("big");
  named->set_prompt_tokens(2'000'000);
  named->set_cached_prompt_tokens(1'000'000);
  named->set_completion_tokens(1'000'000);
  named = m.add_by_model();
  named->set_model("small");
  named->set_prompt_tokens(1'000'000);
  return u;
}

TEST(UsageTotalsTest, APriceTablePricesSandboxTimeAndEachModelsTokens) {
  auto prices = PriceTableFromYaml(YAML::Load(R"(
cpu_hour: 1.0
gib_hour: 0.5
models:
  big: {prompt: 2.0, completion: 8.0, cached: 0.5}
  "*": {prompt: 0.1, completion: 0.1}
)"));
  ASSERT_THAT(prices, IsOk());
  // 1 CPU-hour, 2 GiB-hours; big: 1M uncached at 2 + 1M cached at 0.5 + 1M completion at 8; small as "*".
  EXPECT_DOUBLE_EQ(*CostOf(Usage(), *prices), 1.0 + 1.0 + 2.0 + 0.5 + 8.0 + 0.1);
  EXPECT_EQ(CostOf(Usage(), PriceTable{}), std::nullopt);
  // A verifier in a sandbox of its own adds its CPU; one in the episode's sandbox is already in it.
  v1::EpisodeUsage with_verifier = Usage();
  ToProto(absl::Seconds(1800), with_verifier.mutable_verifier()->mutable_cpu_time());
  EXPECT_DOUBLE_EQ(*CostOf(with_verifier, *prices), 12.6 + 0.5);
  with_verifier.mutable_verifier()->set_in_episode_sandbox(true);
  EXPECT_DOUBLE_EQ(*CostOf(with_verifier, *prices), 12.6);
}

TEST(UsageTotalsTest, BadPriceTablesAreRefusedNamingTheKey) {
  EXPECT_THAT(PriceTableFromYaml(YAML::Load("cpu_hour: -1")), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(PriceTableFromYaml(YAML::Load("cpu_hour: lots")).status().message(),
              ::testing::HasSubstr("prices.cpu_hour"));
  EXPECT_THAT(PriceTableFromYaml(YAML::Load("models: {m: {input: 1}}")).status().message(),
              ::testing::HasSubstr("unknown key 'input'"));
  EXPECT_THAT(PriceTableFromYaml(YAML::Load("per_gpu: 1")), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(PriceTableFromYaml(YAML::Load("[1, 2]")), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(PriceTableFromYaml(YAML::Load("{}"))->empty());
}

TEST(UsageTotalsTest, TotalsAddAnEpisodesOwnUsageAndSubtractItBack) {
  v1::EpisodeUsage u = Usage();
  u.set_cost(2.5);
  UsageTotals t = UsageTotalsOf(u);
  EXPECT_EQ(t.episodes, 1u);
  EXPECT_EQ(t.measured, 1u);
  EXPECT_DOUBLE_EQ(t.cpu_seconds, 3600);
  EXPECT_DOUBLE_EQ(t.sandbox_seconds, 10);
  EXPECT_EQ(t.prompt_tokens, 3'000'000u);
  UsageTotals sum;
  sum += t;
  sum += UsageTotalsOf(v1::EpisodeUsage{});  // no sandbox: counted, not measured
  EXPECT_EQ(sum.episodes, 2u);
  EXPECT_EQ(sum.measured, 1u);
  EXPECT_EQ(sum.priced, 1u);
  v1::UsageTotals proto;
  UsageTotalsToProto(sum, &proto);
  EXPECT_DOUBLE_EQ(proto.cost(), 2.5);
  sum -= t;
  UsageTotalsToProto(sum, &proto);
  EXPECT_EQ(proto.episodes(), 1u);
  v1::UsageTotals unpriced;
  UsageTotalsToProto(sum, &unpriced);
  EXPECT_FALSE(unpriced.has_cost());  // no episode had a cost: none is reported
  // A leased sandbox of a sandbox API, priced by its sandbox time alone.
  auto prices = PriceTableFromYaml(YAML::Load("cpu_hour: 2.0"));
  EXPECT_DOUBLE_EQ(SandboxUsageTotals(Usage().sandbox(), *prices).cost, 2.0);
}

}  // namespace
}  // namespace corral::scheduler
