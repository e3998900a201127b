#include "libs/api/ids.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral {
namespace {

using ::testing::HasSubstr;

TEST(ValidateLabels, OneRuleAndOneMessageForEveryKindOfLabel) {
  EXPECT_THAT(
      ValidateLabels("labels", std::map<std::string, std::string>{{"corral.episode", "b:g0:e0"}, {"a/b-c_d", ""}}),
      IsOk());
  EXPECT_THAT(ValidateLabels("spec.labels", std::map<std::string, std::string>{{"Upper", "x"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("spec.labels: key 'Upper' must be 1-63 characters of [a-z0-9_./-]")));
  EXPECT_THAT(ValidateLabels("labels", std::map<std::string, std::string>{{"", "x"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("labels: key ''")));
  EXPECT_THAT(ValidateLabels("labels", std::map<std::string, std::string>{{std::string(64, 'a'), "x"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be 1-63 characters")));
  EXPECT_THAT(ValidateLabels("labels", std::map<std::string, std::string>{{"k", std::string(257, 'v')}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("labels['k'] is 257 bytes; at most 256")));
}

}  // namespace
}  // namespace corral
