#include "tools/corral/upstream_model.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::cli {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Served = std::optional<std::vector<std::string>>;

TEST(ChooseModelTest, TheOnlyModelServedIsTheDefault) {
  auto choice = ChooseModel(Served({"Qwen/Qwen3-8B"}), "", "", "http://127.0.0.1:8000");
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->model, "Qwen/Qwen3-8B");
  EXPECT_THAT(choice->note, HasSubstr("the one model"));
}

TEST(ChooseModelTest, SeveralModelsWithoutAChoiceSayWhatToPass) {
  auto choice = ChooseModel(Served({"a", "b"}), "", "", "http://u:1");
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->model, "");
  EXPECT_THAT(choice->note, AllOf(HasSubstr("a, b"), HasSubstr("--model NAME")));
  choice = ChooseModel(Served({"a", "b"}), "", "b", "http://u:1");
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->model, "b");
}

TEST(ChooseModelTest, AModelTheUpstreamDoesNotServeIsRefusedNamingWhatItServes) {
  EXPECT_THAT(ChooseModel(Served({"a", "b"}), "", "c", "http://u:1"),
              StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("--model c"), HasSubstr("a, b"))));
}

TEST(ChooseModelTest, AnUpstreamThatCannotBeAskedKeepsTheRequestedModelOrNone) {
  auto choice = ChooseModel(std::nullopt, "connection refused", "m", "http://u:1");
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->model, "m");
  choice = ChooseModel(std::nullopt, "connection refused", "", "http://u:1");
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->model, "");
  EXPECT_THAT(choice->note, HasSubstr("connection refused"));
}

}  // namespace
}  // namespace corral::cli
