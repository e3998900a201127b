#include "services/proxy/quotas.h"

#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/proxy/config.h"
#include "yaml-cpp/yaml.h"

namespace corral::proxy {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

TEST(EstimateTokensTest, ChargesThePromptByItsBytesAndTheCompletionByItsLimitPerChoice) {
  const json::object body = json::parse(R"({"max_tokens": 100, "n": 2})").as_object();
  EXPECT_EQ(EstimateTokens(body, 400, 1024), 100 + 1 + 200);
  // max_completion_tokens (the newer name) wins; without either the default stands for the completion.
  EXPECT_EQ(EstimateTokens(json::parse(R"({"max_completion_tokens": 7, "max_tokens": 100})").as_object(), 0, 1024), 8);
  EXPECT_EQ(EstimateTokens(json::object{}, 40, 1024), 10 + 1 + 1024);
  // Garbage in the fields is ignored, never trusted: negative, strings, an absurd n.
  EXPECT_EQ(EstimateTokens(json::parse(R"({"max_tokens": -5, "n": "x"})").as_object(), 0, 64), 65);
  EXPECT_EQ(EstimateTokens(json::parse(R"({"max_tokens": 10, "n": 1000000})").as_object(), 0, 64), 1 + 10 * 128);
}

TEST(QuotaKeyTest, ModelPlaceholderIsTheModelsName) {
  EXPECT_EQ(QuotaKey({.requests = "rpm", .key = "{model}"}, "judge-7b"), "judge-7b");
  EXPECT_EQ(QuotaKey({.requests = "rpm", .key = "team-a"}, "judge-7b"), "team-a");
  EXPECT_EQ(QuotaKey({.requests = "rpm"}, "judge-7b"), "");
}

// The proxy's configuration as a YAML file gives it.
absl::Status Load(const std::string& yaml, Config* config) {
  ConfigSchema schema("corral-proxy", "");
  RegisterConfig(schema, config);
  if (absl::Status s = schema.ApplyYaml(YAML::Load(yaml), "proxy.yaml"); !s.ok()) return s;
  return ValidateConfig(*config);
}

TEST(QuotaConfigTest, UpstreamsAndModelsNameTheirLimits) {
  Config c;
  ASSERT_THAT(Load(R"(
ratelimiter: 127.0.0.1:7400
quota_max_wait: 30s
upstreams:
  - {url: http://127.0.0.1:8000/v1, name: judge, quota: {requests: judge_rpm, tokens: judge_tpm, concurrency: judge_conc}}
  - http://127.0.0.1:8001
model_quotas:
  teacher: {tokens: teacher_tpm, key: "{model}"}
)",
                   &c),
              IsOk());
  ASSERT_EQ(c.upstreams.size(), 2u);
  EXPECT_EQ(c.upstreams[0].quota.requests, "judge_rpm");
  EXPECT_EQ(c.upstreams[0].quota.tokens, "judge_tpm");
  EXPECT_EQ(c.upstreams[0].quota.concurrency, "judge_conc");
  EXPECT_TRUE(c.upstreams[1].quota.empty());
  EXPECT_EQ(c.model_quotas.at("teacher").tokens, "teacher_tpm");
  EXPECT_EQ(c.model_quotas.at("teacher").key, "{model}");
  EXPECT_EQ(c.quota.max_wait, absl::Seconds(30));
  EXPECT_TRUE(c.has_quotas());
}

TEST(QuotaConfigTest, BadQuotasAreClearErrors) {
  const struct {
    const char* yaml;
    const char* error;
  } cases[] = {
      {"upstreams: [{url: http://127.0.0.1:8000, quota: {requests: rpm}}]\n", "ratelimiter must name"},
      {"ratelimiter: 127.0.0.1:7400\nupstreams: [{url: http://127.0.0.1:8000, quota: {rpm: x}}]\n",
       "unknown key 'rpm'"},
      {"ratelimiter: 127.0.0.1:7400\nupstreams: [http://127.0.0.1:8000]\nmodel_quotas: {m: {tokens: a/b}}\n",
       "not a limit name"},
      {"ratelimiter: 127.0.0.1:7400\nupstreams: [http://127.0.0.1:8000]\nmodel_quotas: {m: {key: x}}\n",
       "names no limit"},
      {"ratelimiter: nowhere\nupstreams: [http://127.0.0.1:8000]\n", "ratelimiter"},
  };
  for (const auto& c : cases) {
    Config config;
    EXPECT_THAT(Load(c.yaml, &config), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.error))) << c.yaml;
  }
}

TEST(UpstreamConfigTest, DialectsNameTheAgentApisAnUpstreamServesItself) {
  Config c;
  ASSERT_THAT(Load("upstreams:\n  - {url: http://127.0.0.1:8000, dialects: [responses, messages]}\n"
                   "  - http://127.0.0.1:8001\n",
                   &c),
              IsOk());
  EXPECT_THAT(c.upstreams[0].dialects, ::testing::ElementsAre("responses", "messages"));
  EXPECT_FALSE(c.upstreams[0].refuse_unrunnable_tools);
  Config refusing;
  ASSERT_THAT(Load("upstreams: [{url: http://127.0.0.1:8000, unrunnable_tools: refuse}]\n", &refusing), IsOk());
  EXPECT_TRUE(refusing.upstreams[0].refuse_unrunnable_tools);
  EXPECT_THAT(Load("upstreams: [{url: http://127.0.0.1:8000, unrunnable_tools: drop}]\n", &refusing),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be refuse or leave_out, not 'drop'")));
  EXPECT_TRUE(c.upstreams[1].dialects.empty());
  Config bad;
  EXPECT_THAT(Load("upstreams: [{url: http://127.0.0.1:8000, dialects: [chat]}]\n", &bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'chat' is not an agent API (responses, messages, gemini)")));
}

}  // namespace
}  // namespace corral::proxy
