#include "libs/api/pagination.h"

#include <map>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral {
namespace {

TEST(PaginationTest, PagesFollowTheTokenSkipFilteredItemsAndEndWithAnEmptyToken) {
  const std::vector<std::string> items = {"a", "b", "c", "d", "e", "f"};
  auto not_c = [](const std::string& s) { return s != "c"; };
  auto key = [](const std::string& s) { return s; };
  std::vector<std::string> seen;
  std::string token;
  std::vector<std::string> tokens;
  do {
    token = FillPage(items, token, 2, key, not_c, [&](const std::string& s) { seen.push_back(s); });
    tokens.push_back(token);
  } while (!token.empty());
  EXPECT_THAT(seen, ::testing::ElementsAre("a", "b", "d", "e", "f"));
  EXPECT_THAT(tokens, ::testing::ElementsAre("b", "e", ""));
  // A page that ends exactly at the last matching item has no next token.
  seen.clear();
  EXPECT_EQ(FillPage(items, "d", 2, key, not_c, [&](const std::string& s) { seen.push_back(s); }), "");
  EXPECT_THAT(seen, ::testing::ElementsAre("e", "f"));
}

TEST(PaginationTest, PageSizeRuleAndLabelSelectors) {
  EXPECT_THAT(PageSize(0), IsOkAndHolds(100));
  EXPECT_THAT(PageSize(5000), IsOkAndHolds(1000));
  EXPECT_THAT(PageSize(-1), StatusIs(absl::StatusCode::kInvalidArgument));
  const std::map<std::string, std::string> labels = {{"episode", "e1"}, {"group", "g"}};
  EXPECT_TRUE(MatchesLabels(std::map<std::string, std::string>{}, labels));
  EXPECT_TRUE(MatchesLabels(std::map<std::string, std::string>{{"group", "g"}}, labels));
  EXPECT_FALSE(MatchesLabels(std::map<std::string, std::string>{{"group", "h"}}, labels));
  EXPECT_FALSE(MatchesLabels(std::map<std::string, std::string>{{"other", "g"}}, labels));
}

}  // namespace
}  // namespace corral
