#include "services/scheduler/episode/reward.h"

#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::RewardSpec RewardOf(v1::RewardFunction function, double tolerance = 0, const std::string& pattern = "") {
  v1::RewardSpec s;
  s.set_function(function);
  s.set_tolerance(tolerance);
  s.set_pattern(pattern);
  return s;
}

double Reward(const v1::RewardSpec& spec, const std::string& answer, const std::string& message) {
  return ComputeReward(spec, answer, message).reward;
}

// ------------------------------------------------------------------------------------------------ EXACT

TEST(ComputeReward, ExactComparesTrimmedStrings) {
  const v1::RewardSpec exact = RewardOf(v1::REWARD_FUNCTION_EXACT);
  EXPECT_EQ(Reward(exact, " Paris\n", "\t Paris  \n"), 1.0);
  EXPECT_EQ(Reward(exact, "Paris", "paris"), 0.0);
  EXPECT_EQ(Reward(exact, "Paris", "Paris."), 0.0);
  const RewardOutcome out = ComputeReward(exact, "Paris", " Paris ");
  EXPECT_THAT(out.details_json, HasSubstr(R"("function":"exact")"));
  EXPECT_THAT(out.details_json, HasSubstr(R"("match":true)"));
}

TEST(ComputeReward, UnspecifiedFunctionIsExact) {
  EXPECT_EQ(Reward(v1::RewardSpec(), "4", " 4 "), 1.0);
  EXPECT_EQ(Reward(v1::RewardSpec(), "4", "The answer is 4"), 0.0);
}

// ---------------------------------------------------------------------------------------------- NUMERIC

TEST(ComputeReward, NumericComparesTheLastNumber) {
  const v1::RewardSpec numeric = RewardOf(v1::REWARD_FUNCTION_NUMERIC);
  EXPECT_EQ(Reward(numeric, "1234.5", "First 12, then 7, finally 1,234.5."), 1.0);
  EXPECT_EQ(Reward(numeric, "12", "12 is wrong; it is 13"), 0.0);
  EXPECT_EQ(Reward(numeric, "-7", "x = -7"), 1.0);
  EXPECT_EQ(Reward(numeric, "1,000", "1000"), 1.0);
  EXPECT_EQ(Reward(numeric, "5", "no number here"), 0.0);
}

TEST(ComputeReward, NumericToleranceIsRelativeToTheAnswer) {
  // Accepted: |x - answer| <= tolerance * max(1, |answer|).
  EXPECT_EQ(Reward(RewardOf(v1::REWARD_FUNCTION_NUMERIC, 0.01), "100", "100.9"), 1.0);
  EXPECT_EQ(Reward(RewardOf(v1::REWARD_FUNCTION_NUMERIC, 0.01), "100", "101.5"), 0.0);
  EXPECT_EQ(Reward(RewardOf(v1::REWARD_FUNCTION_NUMERIC, 0.1), "0.5", "0.59"), 1.0);
  EXPECT_EQ(Reward(RewardOf(v1::REWARD_FUNCTION_NUMERIC, 0.1), "0.5", "0.61"), 0.0);
  // Tolerance 0 means 1e-6.
  EXPECT_EQ(Reward(RewardOf(v1::REWARD_FUNCTION_NUMERIC), "0.3333333", "0.3333334"), 1.0);
  EXPECT_EQ(Reward(RewardOf(v1::REWARD_FUNCTION_NUMERIC), "0.333", "0.334"), 0.0);
}

// ------------------------------------------------------------------------------------------------ GSM8K

TEST(ComputeReward, Gsm8kTakesTheNumberAfterTheLastMarker) {
  const v1::RewardSpec gsm8k = RewardOf(v1::REWARD_FUNCTION_GSM8K);
  EXPECT_EQ(Reward(gsm8k, "1000", "Draft #### 5\nOn reflection... #### 1,000 apples, not 7"), 1.0);
  EXPECT_EQ(Reward(gsm8k, "5", "Draft #### 5\nOn reflection... #### 1,000"), 0.0);
  EXPECT_EQ(Reward(gsm8k, "42", "####$42"), 1.0);
  EXPECT_EQ(Reward(gsm8k, "-3.5", "#### -3.5"), 1.0);
  EXPECT_EQ(Reward(gsm8k, "42", "The answer is 42"), 0.0);  // no marker
  EXPECT_EQ(Reward(gsm8k, "42", "42 ####"), 0.0);           // nothing after the marker
}

// ------------------------------------------------------------------------------------------------ REGEX

TEST(ComputeReward, RegexComparesTheFirstCaptureGroup) {
  const v1::RewardSpec re = RewardOf(v1::REWARD_FUNCTION_REGEX, 0, R"(answer:\s*(\w+))");
  EXPECT_EQ(Reward(re, "yes", "Thinking... answer: yes"), 1.0);
  EXPECT_EQ(Reward(re, "yes", "answer: no"), 0.0);
  EXPECT_EQ(Reward(re, "answer: yes", "answer: yes"), 0.0);  // the group, not the whole match
  EXPECT_EQ(Reward(re, "yes", "no answer given"), 0.0);
}

TEST(ComputeReward, RegexWithoutGroupComparesTheWholeMatch) {
  const v1::RewardSpec re = RewardOf(v1::REWARD_FUNCTION_REGEX, 0, "[0-9]+");
  EXPECT_EQ(Reward(re, "123", "abc 123 def 456"), 1.0);
  EXPECT_EQ(Reward(re, "456", "abc 123 def 456"), 0.0);  // the first match
}

TEST(ComputeReward, RegexThatDoesNotCompileGivesZero) {
  EXPECT_EQ(Reward(RewardOf(v1::REWARD_FUNCTION_REGEX, 0, "(unclosed"), "x", "(unclosed x"), 0.0);
}

// ------------------------------------------------------------------------------------------- LastNumber

TEST(LastNumber, FindsTheLastNumber) {
  EXPECT_EQ(LastNumber("no digits at all"), std::nullopt);
  EXPECT_EQ(LastNumber(""), std::nullopt);
  EXPECT_EQ(LastNumber("a 1 b 2,500.75 c"), std::optional<double>(2500.75));
  EXPECT_EQ(LastNumber("it is -3"), std::optional<double>(-3));
  EXPECT_EQ(LastNumber("about .5"), std::optional<double>(0.5));
  EXPECT_EQ(LastNumber("1e3"), std::optional<double>(1000));
  EXPECT_EQ(LastNumber("The answer is 42."), std::optional<double>(42));
}

// ---------------------------------------------------------------------------------------- VerifierReward

TEST(VerifierReward, RewardTxtWinsOverJsonAndExitCode) {
  auto out = VerifierReward(std::string(" 0.25\n"), std::string(R"({"reward": 1})"), 0);
  ASSERT_THAT(out, IsOk());
  EXPECT_EQ(out->reward, 0.25);
  EXPECT_TRUE(out->step_rewards.empty());
}

TEST(VerifierReward, RewardJsonWinsOverExitCodeAndGivesStepRewards) {
  const std::string json = R"({"reward": 0.5, "step_rewards": [0.1, 0.4]})";
  auto out = VerifierReward(std::nullopt, json, 1);
  ASSERT_THAT(out, IsOk());
  EXPECT_EQ(out->reward, 0.5);
  EXPECT_THAT(out->step_rewards, ElementsAre(0.1, 0.4));
  EXPECT_EQ(out->details_json, json);
}

TEST(VerifierReward, ExitCodeDecidesWhenNoFileExists) {
  EXPECT_THAT(VerifierReward(std::nullopt, std::nullopt, 0),
              IsOkAndHolds(::testing::Field(&RewardOutcome::reward, 1.0)));
  EXPECT_THAT(VerifierReward(std::nullopt, std::nullopt, 3),
              IsOkAndHolds(::testing::Field(&RewardOutcome::reward, 0.0)));
}

TEST(VerifierReward, MalformedRewardTxtIsInvalidEvenWithOtherSources) {
  EXPECT_THAT(VerifierReward(std::string("passed"), std::string(R"({"reward": 1})"), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reward.txt")));
  EXPECT_THAT(VerifierReward(std::string(""), std::nullopt, 0), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(VerifierReward, MalformedRewardJsonIsInvalid) {
  for (const char* bad : {R"({"score": 1})", R"({"reward": "1"})", "[1]", "not json"}) {
    EXPECT_THAT(VerifierReward(std::nullopt, std::string(bad), 0),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reward.json")))
        << bad;
  }
  EXPECT_THAT(VerifierReward(std::nullopt, std::string(R"({"reward": 1, "step_rewards": [0.5, "x"]})"), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step_rewards")));
}

TEST(VerifierReward, NothingAtAllIsNotFound) {
  EXPECT_THAT(VerifierReward(std::nullopt, std::nullopt, std::nullopt), StatusIs(absl::StatusCode::kNotFound));
}

TEST(StdoutRewardTest, TheLastLineDecidesANumberOrJsonElseTheExitCode) {
  auto r = StdoutReward("collected 3 items\n3 passed\n0.75\n\n", 1);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->reward, 0.75);
  r = StdoutReward("noise\n{\"reward\": 1, \"step_rewards\": [0, 1]}\n", 1);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->reward, 1.0);
  EXPECT_EQ(r->step_rewards, (std::vector<double>{0, 1}));
  r = StdoutReward("3 passed in 0.1s\n", 0);  // a last line that is no reward: the exit code
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->reward, 1.0);
  r = StdoutReward("", 2);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->reward, 0.0);
}

TEST(StdoutRewardTest, AMalformedJsonLineOrNothingAtAllIsAnError) {
  EXPECT_THAT(StdoutReward("{\"score\": 1}\n", 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(StdoutReward("", std::nullopt), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace corral::scheduler
