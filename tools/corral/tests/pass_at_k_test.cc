#include "tools/corral/pass_at_k.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace corral::cli {
namespace {

using ::testing::DoubleNear;
using ::testing::HasSubstr;

v1::EpisodeResult Result(const std::string& task, v1::EpisodeStatus status, double reward) {
  v1::EpisodeResult r;
  r.mutable_ids()->set_task_id(task);
  r.set_status(status);
  r.set_reward(reward);
  return r;
}

TEST(PassAtK, IsTheUnbiasedEstimator) {
  EXPECT_DOUBLE_EQ(PassAtK(10, 0, 1), 0.0);
  EXPECT_DOUBLE_EQ(PassAtK(10, 3, 1), 0.3);  // pass@1 is the pass rate
  EXPECT_DOUBLE_EQ(PassAtK(4, 1, 4), 1.0);   // one pass among all n attempts
  // 1 - C(3, 2) / C(5, 2) = 1 - 3/10
  EXPECT_THAT(PassAtK(5, 2, 2), DoubleNear(0.7, 1e-12));
  EXPECT_DOUBLE_EQ(PassAtK(5, 4, 2), 1.0);  // fewer failures than k: every k-subset holds a pass
  EXPECT_DOUBLE_EQ(PassAtK(0, 0, 1), 0.0);
}

TEST(EvalTally, CountsPassesByThresholdAndUnfinishedAttemptsAsErrors) {
  EvalTally tally(1.0);
  tally.Add(Result("a", v1::EPISODE_STATUS_FINISHED, 1.0));
  tally.Add(Result("a", v1::EPISODE_STATUS_FINISHED, 0.5));  // below the threshold
  tally.Add(Result("b", v1::EPISODE_STATUS_FAILED, 0.0));
  tally.Add(Result("b", v1::EPISODE_STATUS_FINISHED, 0.0));
  const auto& a = tally.tasks().at("a");
  EXPECT_EQ(a.attempts, 2);
  EXPECT_EQ(a.passed, 1);
  EXPECT_EQ(a.errors, 0);
  const auto& b = tally.tasks().at("b");
  EXPECT_EQ(b.passed, 0);
  EXPECT_EQ(b.errors, 1);
  EXPECT_DOUBLE_EQ(tally.Overall(1), 0.25);  // (0.5 + 0) / 2
  EXPECT_DOUBLE_EQ(tally.Overall(2), 0.5);   // (1 + 0) / 2
  const std::string table = tally.Table({1, 2});
  EXPECT_THAT(table, HasSubstr("pass@1"));
  EXPECT_THAT(table, HasSubstr("overall (2 tasks)"));
  EXPECT_THAT(table, HasSubstr("0.250"));
  EXPECT_EQ(tally.Json({1, 2}),
            R"({"threshold":1E0,"tasks":[{"task":"a","attempts":2,"passed":1,"errors":0,"pass_at":{"1":5E-1,"2":1E0}},)"
            R"({"task":"b","attempts":2,"passed":0,"errors":1,"pass_at":{"1":0E0,"2":0E0}}],)"
            R"("overall":{"1":2.5E-1,"2":5E-1}})");
}

TEST(EvalTally, ALowerThresholdPassesPartialRewards) {
  EvalTally tally(0.5);
  tally.Add(Result("a", v1::EPISODE_STATUS_FINISHED, 0.5));
  EXPECT_EQ(tally.tasks().at("a").passed, 1);
}

}  // namespace
}  // namespace corral::cli
