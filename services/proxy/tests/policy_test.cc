#include "services/proxy/policy.h"

#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::proxy {
namespace {

namespace json = boost::json;

json::object Body(const std::string& text) { return json::parse(text).as_object(); }

TEST(PolicyTest, AliasesAllowListCapsOverridesAndCapture) {
  v1::SessionPolicy p;
  p.add_allowed_models("Qwen/Qwen3-8B");
  (*p.mutable_model_aliases())["*"] = "Qwen/Qwen3-8B";
  p.mutable_sampling_caps()->set_max_tokens(100);
  p.mutable_sampling_overrides()->set_temperature(1.0);
  p.mutable_sampling_overrides()->set_extra_body_json(R"({"chat_template_kwargs": {"enable_thinking": false}})");
  p.set_capture_token_ids(true);
  p.set_capture_logprobs(true);
  json::object body = Body(R"({"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],
                               "max_tokens":4096,"temperature":0.2,"stream":true})");
  PolicyOutcome out = ApplyPolicy(p, {}, /*chat=*/true, body);
  ASSERT_EQ(out.refusal, Refusal::kNone) << out.message;
  EXPECT_EQ(out.rewrite.requested_model, "gpt-4o");
  EXPECT_EQ(body["model"].as_string(), "Qwen/Qwen3-8B");
  EXPECT_EQ(body["max_tokens"].as_int64(), 100);
  EXPECT_EQ(body["temperature"].as_double(), 1.0);
  EXPECT_TRUE(body["chat_template_kwargs"].is_object());
  EXPECT_TRUE(body["return_token_ids"].as_bool());
  EXPECT_TRUE(body["logprobs"].as_bool());
  EXPECT_TRUE(out.rewrite.strip_token_ids);
  EXPECT_TRUE(out.rewrite.strip_logprobs);
  EXPECT_TRUE(out.rewrite.strip_usage_chunk);
  EXPECT_TRUE(body["stream_options"].as_object()["include_usage"].as_bool());
}

TEST(PolicyTest, BudgetsRefuseAndLowerMaxTokensToWhatIsLeft) {
  v1::SessionPolicy p;
  p.mutable_budget()->set_max_calls(3);
  p.mutable_budget()->set_max_completion_tokens(50);
  json::object body = Body(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  PolicyOutcome out = ApplyPolicy(p, BudgetUse{1, 10, 40}, true, body);
  ASSERT_EQ(out.refusal, Refusal::kNone);
  EXPECT_EQ(body["max_tokens"].as_int64(), 10);  // inserted: 50 - 40 left
  json::object again = Body(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(ApplyPolicy(p, BudgetUse{3, 0, 0}, true, again).refusal, Refusal::kBudgetExhausted);
  EXPECT_EQ(ApplyPolicy(p, BudgetUse{0, 0, 50}, true, again).refusal, Refusal::kBudgetExhausted);
}

TEST(PolicyTest, MalformedRequestsAndDisallowedModelsAreRefused) {
  v1::SessionPolicy p;
  p.add_allowed_models("m");
  for (const char* bad : {R"({"messages":[{"role":"user","content":"x"}]})", R"({"model":5,"messages":[]})",
                          R"({"model":"m","messages":"hi"})", R"({"model":"m","messages":[{"content":"x"}]})",
                          R"({"model":"m","messages":[{"role":"user"}],"stream":"yes"})",
                          R"({"model":"m","messages":[{"role":"user"}],"max_tokens":"many"})"}) {
    json::object body = Body(bad);
    EXPECT_EQ(ApplyPolicy(p, {}, true, body).refusal, Refusal::kBadRequest) << bad;
  }
  json::object other = Body(R"({"model":"other","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(ApplyPolicy(p, {}, true, other).refusal, Refusal::kModelNotAllowed);
  json::object completion = Body(R"({"model":"m","prompt":["a","b"]})");
  EXPECT_EQ(ApplyPolicy(p, {}, false, completion).refusal, Refusal::kBadRequest);
}

TEST(PolicyTest, CapturingTokenIdsNeutralisesTheAgentsNarrowingKnobsAndSaysWhichUnlessTheTaskKeepsThem) {
  const std::string sent = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0.7,
      "top_p":0.95,"top_k":20,"min_p":0.05,"presence_penalty":1.5,"repetition_penalty":1.05,"logit_bias":null})";
  v1::SessionPolicy p;
  p.set_capture_token_ids(true);
  json::object body = Body(sent);
  PolicyOutcome out = ApplyPolicy(p, {}, /*chat=*/true, body);
  ASSERT_EQ(out.refusal, Refusal::kNone) << out.message;
  for (const char* knob : kNarrowingKnobs) EXPECT_FALSE(body.contains(knob)) << knob;
  EXPECT_EQ(body["temperature"].as_double(), 0.7) << "the temperature is the agent's";
  EXPECT_EQ(json::parse(out.rewrite.neutralized_json),
            json::parse(R"({"top_p":0.95,"top_k":20,"min_p":0.05,"presence_penalty":1.5,"repetition_penalty":1.05})"));
  EXPECT_THAT(out.rewrite.removed_keys, ::testing::Contains("logit_bias"));
  // The trainer's own override still applies.
  p.mutable_sampling_overrides()->set_top_p(0.9);
  body = Body(sent);
  ApplyPolicy(p, {}, /*chat=*/true, body);
  EXPECT_EQ(body["top_p"].as_double(), 0.9);
  EXPECT_FALSE(body.contains("top_k"));
  // A task that needs the agent's sampling keeps it; without token capture nothing changes by default.
  p.clear_sampling_overrides();
  p.set_neutralize_sampling(false);
  body = Body(sent);
  out = ApplyPolicy(p, {}, /*chat=*/true, body);
  EXPECT_EQ(body["top_k"].as_int64(), 20);
  EXPECT_TRUE(out.rewrite.neutralized_json.empty());
  v1::SessionPolicy plain;
  body = Body(sent);
  ApplyPolicy(plain, {}, /*chat=*/true, body);
  EXPECT_EQ(body["top_p"].as_double(), 0.95);
  plain.set_neutralize_sampling(true);
  body = Body(sent);
  ApplyPolicy(plain, {}, /*chat=*/true, body);
  EXPECT_FALSE(body.contains("top_p"));
}

TEST(PolicyTest, APolicyThatContradictsItselfIsInvalid) {
  v1::SessionPolicy p;
  p.add_allowed_models("m");
  (*p.mutable_model_aliases())["gpt"] = "other";
  EXPECT_THAT(ValidatePolicy(p), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("allowed_models")));
  v1::SessionPolicy q;
  q.mutable_sampling_overrides()->set_extra_body_json("[1,2]");
  EXPECT_THAT(ValidatePolicy(q), StatusIs(absl::StatusCode::kInvalidArgument));
  v1::SessionPolicy r;
  r.add_role_rules()->set_role(v1::CALL_ROLE_AUXILIARY);
  EXPECT_THAT(ValidatePolicy(r), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("role_rules[0]")));
}

using Served = std::optional<std::vector<std::string>>;

TEST(SessionModelTest, TheRequestedThenTheDefaultThenTheOnlyModelServed) {
  const v1::SessionPolicy p;
  EXPECT_THAT(ResolveSessionModel(p, "a", "b", Served({"a", "b"})), IsOkAndHolds(std::string("a")));
  EXPECT_THAT(ResolveSessionModel(p, "", "b", Served({"a", "b"})), IsOkAndHolds(std::string("b")));
  EXPECT_THAT(ResolveSessionModel(p, "", "", Served({"only"})), IsOkAndHolds(std::string("only")));
  EXPECT_THAT(ResolveSessionModel(p, "", "", Served({"a", "b"})), IsOkAndHolds(std::string("")));
  EXPECT_THAT(ResolveSessionModel(p, "", "", std::nullopt), IsOkAndHolds(std::string("")));
}

TEST(SessionModelTest, AModelNoUpstreamServesIsRefusedNamingWhatIsServedUnlessAnAliasMapsIt) {
  v1::SessionPolicy p;
  EXPECT_THAT(
      ResolveSessionModel(p, "gpt-4o", "", Served({"Qwen/Qwen3-8B", "m2"})),
      StatusIs(absl::StatusCode::kInvalidArgument,
               ::testing::HasSubstr("model 'gpt-4o' is not served by the upstream; it serves: Qwen/Qwen3-8B, m2")));
  EXPECT_THAT(ResolveSessionModel(p, "gpt-4o", "", std::nullopt),
              IsOkAndHolds(std::string("gpt-4o")));  // not known yet
  p.add_allowed_models("Qwen/Qwen3-8B");             // "*" maps what the allow-list leaves out, as at call time
  (*p.mutable_model_aliases())["*"] = "Qwen/Qwen3-8B";
  EXPECT_THAT(ResolveSessionModel(p, "gpt-4o", "", Served({"Qwen/Qwen3-8B"})), IsOkAndHolds(std::string("gpt-4o")));
}

TEST(SessionModelTest, ACallThatNamesNoModelGetsTheSessions) {
  const v1::SessionPolicy p;
  json::object body = Body(R"({"messages":[{"role":"user","content":"hi"}]})");
  PolicyOutcome out = ApplyPolicy(p, {}, /*chat=*/true, body, "Qwen/Qwen3-8B");
  ASSERT_EQ(out.refusal, Refusal::kNone) << out.message;
  EXPECT_EQ(body["model"].as_string(), "Qwen/Qwen3-8B");
  body = Body(R"({"model":"","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(ApplyPolicy(p, {}, true, body, "").refusal, Refusal::kBadRequest);  // no session model either
}

}  // namespace
}  // namespace corral::proxy
