#include "services/ratelimiter/limit_spec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "yaml-cpp/yaml.h"

namespace corral::ratelimiter {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

TEST(ParseLimitsYaml, ReadsConcurrencyRateAndTemplates) {
  auto specs =
      ParseLimitsYaml(YAML::Load("- name: code_exec/{language}\n  kind: concurrency\n  permits: 64\n"
                                 "- {name: llm_tokens, kind: rate, rate_per_s: 5000, burst: 20000}\n"
                                 "- {name: calls, kind: rate, rate_per_s: 2.5}\n"));
  ASSERT_THAT(specs, IsOkAndHolds(SizeIs(3)));
  EXPECT_EQ((*specs)[0].name, "code_exec");
  EXPECT_EQ((*specs)[0].key_template, "{language}");
  EXPECT_EQ((*specs)[0].permits, 64);
  EXPECT_EQ((*specs)[1].kind, LimitKind::kRate);
  EXPECT_EQ((*specs)[1].burst, 20000);
  EXPECT_EQ((*specs)[2].burst, 3);  // default: ceil(rate)
}

TEST(ParseLimitsYaml, RejectsBadEntriesNamingTheLine) {
  EXPECT_THAT(ParseLimitsYaml(YAML::Load("- {name: a, permits: 1}\n")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing kind")));
  EXPECT_THAT(ParseLimitsYaml(YAML::Load("- {name: a, kind: concurrency, permits: 0}\n")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("permits")));
  EXPECT_THAT(ParseLimitsYaml(YAML::Load("- {name: a, kind: rate, rate_per_s: -1}\n")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rate_per_s")));
  EXPECT_THAT(ParseLimitsYaml(YAML::Load("- {name: a, kind: concurrency, permits: lots}\n")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("wrong type")));
  EXPECT_THAT(ParseLimitsYaml(YAML::Load("- {name: a, kind: concurrency, permits: 1, colour: red}\n")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown field 'colour'")));
  EXPECT_THAT(ParseLimitsYaml(
                  YAML::Load("- {name: a, kind: concurrency, permits: 1}\n- {name: a, kind: rate, rate_per_s: 1}\n")),
              StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("line 2"), HasSubstr("duplicate"))));
  EXPECT_THAT(ParseLimitsYaml(YAML::Load("- {name: 'bad name', kind: concurrency, permits: 1}\n")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("A-Za-z0-9")));
  EXPECT_THAT(ParseLimitsYaml(YAML::Load("- {name: a/lang, kind: concurrency, permits: 1}\n")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("{language}")));
  EXPECT_THAT(ParseLimitsYaml(YAML::Load("{name: a}")), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ValidateKey, RejectsEmptyLongAndNonPrintableKeys) {
  EXPECT_THAT(ValidateKey("python"), IsOk());
  EXPECT_THAT(ValidateKey(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateKey(std::string(129, 'a')), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateKey("a b"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateKey(std::string("a\0b", 3)), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace corral::ratelimiter
