#include "services/scheduler/table/batch_state.h"

#include "gtest/gtest.h"

namespace corral::scheduler {
namespace {

FinishFacts Failed(v1::FailureClass fault, uint32_t attempt = 1, uint32_t max_attempts = 3) {
  return {
      .attempt = attempt, .max_attempts = max_attempts, .status = v1::EPISODE_STATUS_FAILED, .failure_class = fault};
}

TEST(DecideFinishTest, AnInfraFailureWithAttemptsLeftIsRetriedAndTheLastAttemptIsRecorded) {
  EXPECT_EQ(DecideFinish(Failed(v1::FAILURE_CLASS_INFRA, 1, 3)).step, FinishStep::kRetry);
  EXPECT_EQ(DecideFinish(Failed(v1::FAILURE_CLASS_INFRA, 3, 3)).step, FinishStep::kRecord);
}

TEST(DecideFinishTest, TheAgentsFailureIsRecordedUnlessTheBatchReplacesFailures) {
  FinishFacts f = Failed(v1::FAILURE_CLASS_AGENT);
  EXPECT_EQ(DecideFinish(f).step, FinishStep::kRecord);
  f.replace_failures = true;
  EXPECT_EQ(DecideFinish(f).step, FinishStep::kRetry);
  f.status = v1::EPISODE_STATUS_TIMEOUT;
  EXPECT_EQ(DecideFinish(f).step, FinishStep::kRetry);
  f.status = v1::EPISODE_STATUS_FINISHED;  // a reward of 0 is not a failure to replace
  EXPECT_EQ(DecideFinish(f).step, FinishStep::kRecord);
}

TEST(DecideFinishTest, ACancelOrADeadlineIsNeverRetried) {
  for (StopReason reason : {StopReason::kCancelled, StopReason::kDeadline}) {
    FinishFacts f = Failed(v1::FAILURE_CLASS_INFRA);
    f.reason = reason;
    EXPECT_EQ(DecideFinish(f).step, FinishStep::kRecord);
  }
  FinishFacts f = Failed(v1::FAILURE_CLASS_INFRA);
  f.batch_cancelled = true;
  EXPECT_EQ(DecideFinish(f).step, FinishStep::kRecord);
}

TEST(DecideFinishTest, AFinalRunIsRecordedHoweverItEnded) {
  // A trainer-driven environment episode: an infra failure, a drain's requeue or staleness cannot run it again.
  FinishFacts f = Failed(v1::FAILURE_CLASS_INFRA, 1, 3);
  f.final_run = true;
  EXPECT_EQ(DecideFinish(f).step, FinishStep::kRecord);
  f.reason = StopReason::kRequeue;
  EXPECT_EQ(DecideFinish(f).step, FinishStep::kRecord);
  f.reason = StopReason::kNone;
  f.status = v1::EPISODE_STATUS_FINISHED;
  f.too_stale = true;
  EXPECT_EQ(DecideFinish(f).step, FinishStep::kRecord);
  EXPECT_FALSE(DecideFinish(f).give_up_stale);
  f.reason = StopReason::kRedundant;  // an extra of a completed group is still dropped
  EXPECT_EQ(DecideFinish(f).step, FinishStep::kDropRedundant);
}

TEST(DecideFinishTest, ARequeueGoesBackWithoutAnAttemptUnlessTheBatchWasCancelled) {
  FinishFacts f = Failed(v1::FAILURE_CLASS_INFRA, 3, 3);
  f.reason = StopReason::kRequeue;
  EXPECT_EQ(DecideFinish(f).step, FinishStep::kRequeue);
  f.batch_cancelled = true;
  EXPECT_EQ(DecideFinish(f).step, FinishStep::kRecord);
}

TEST(DecideFinishTest, ARedundantExtraIsDroppedWhateverItsResult) {
  FinishFacts f = Failed(v1::FAILURE_CLASS_INFRA);
  f.reason = StopReason::kRedundant;
  EXPECT_EQ(DecideFinish(f).step, FinishStep::kDropRedundant);
}

TEST(DecideFinishTest, AStaleResultRunsAgainUntilTheLastStaleRunIsGivenUp) {
  FinishFacts f{.too_stale = true, .status = v1::EPISODE_STATUS_FINISHED};
  for (uint32_t runs = 0; runs + 1 < kMaxStaleRuns; ++runs) {
    f.stale_runs = runs;
    EXPECT_EQ(DecideFinish(f).step, FinishStep::kStaleRerun) << runs;
  }
  f.stale_runs = kMaxStaleRuns - 1;
  const FinishDecision last = DecideFinish(f);
  EXPECT_EQ(last.step, FinishStep::kRecord);
  EXPECT_TRUE(last.give_up_stale);
  f.stale_runs = 0;
  f.batch_cancelled = true;  // a cancelled batch keeps what it has
  EXPECT_EQ(DecideFinish(f).step, FinishStep::kRecord);
  EXPECT_FALSE(DecideFinish(f).give_up_stale);
}

TEST(MarkTooStaleTest, TheResultBecomesAnInfraFailureWithoutRewardOrTrajectory) {
  v1::EpisodeResult r;
  r.set_status(v1::EPISODE_STATUS_FINISHED);
  r.set_reward(1);
  r.mutable_trajectory()->add_calls();
  MarkTooStale(r, 2);
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_INFRA);
  EXPECT_FALSE(r.has_reward());
  EXPECT_FALSE(r.has_trajectory());
  EXPECT_NE(r.failure_message().find("max_staleness (2)"), std::string::npos);
}

BatchState Batch(uint32_t tasks) {
  BatchState b;
  for (uint32_t t = 0; t < tasks; ++t) b.tasks.push_back(std::make_shared<v1::Task>());
  b.spec.set_group_size(2);
  b.per_group = 2;
  b.episodes.resize(tasks * b.per_group);
  b.groups.resize(tasks);
  return b;
}

TEST(BatchStateTest, AtAddressesEpisodeIOfGroupG) {
  BatchState b = Batch(3);
  b.at(2, 1).attempt = 7;
  EXPECT_EQ(b.episodes[5].attempt, 7u);
}

TEST(BatchStateTest, AStreamIsTerminalOnlyOnceItsInputIsClosed) {
  BatchState b = Batch(1);
  b.spec.set_groups_in_flight(1);
  b.opened = 1;
  EXPECT_FALSE(b.terminal());
  b.input_closed = true;
  EXPECT_TRUE(b.terminal());
  b.running = 1;
  EXPECT_FALSE(b.terminal());
}

TEST(BatchStateTest, ADynamicBatchWantsGroupsUntilItsTargetOrBudget) {
  BatchState b = Batch(4);
  b.spec.set_target_groups(2);
  b.spec.set_max_groups(3);
  EXPECT_EQ(b.budget(), 3u);
  EXPECT_TRUE(b.wants_groups());
  EXPECT_TRUE(b.holds());
  b.opened = 3;
  EXPECT_FALSE(b.wants_groups());  // budget spent
  b.opened = 1;
  b.passed = 2;
  EXPECT_FALSE(b.wants_groups());  // target reached
  b.passed = 0;
  b.closed = true;
  EXPECT_FALSE(b.wants_groups());
}

}  // namespace
}  // namespace corral::scheduler
