// Branching tasks (Task.branch): the tree's arithmetic, the submission checks, and the table's parked children,
// splits, orphans and restarts.
#include <algorithm>

#include "services/scheduler/table/branch_plan.h"
#include "services/scheduler/tests/episode_table_fixture.h"

namespace corral::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing_support::EpisodeTableTest;
using testing_support::Finished;
using testing_support::InfraFailure;
using testing_support::Spec;

v1::BranchSpec Points(std::vector<std::pair<uint32_t, uint32_t>> points) {
  v1::BranchSpec spec;
  for (auto [turn, count] : points) {
    v1::BranchPoint* p = spec.add_at();
    p->set_turn(turn);
    p->set_count(count);
  }
  return spec;
}

TEST(BranchPlanTest, TheLeavesAreTheGroupInMixedRadix) {
  auto plan = PlanBranches(Points({{1, 2}, {3, 3}}), 6);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->counts, ElementsAre(2, 3));
  EXPECT_THAT(plan->Path(0), ElementsAre(0, 0));
  EXPECT_THAT(plan->Path(4), ElementsAre(1, 1));
  EXPECT_THAT(plan->Path(5), ElementsAre(1, 2));
  // The root splits at both levels: at turn 1 into episode 3, at turn 3 into 1 and 2.
  EXPECT_EQ(plan->Level(0), std::nullopt);
  EXPECT_EQ(plan->FirstOwnLevel(0), 0u);
  EXPECT_THAT(plan->Children(0, 0), ElementsAre(3));
  EXPECT_THAT(plan->Children(0, 1), ElementsAre(1, 2));
  // Episode 3 left the root at level 0 and splits at level 1 into 4 and 5.
  EXPECT_EQ(plan->Level(3), 0u);
  EXPECT_EQ(plan->Parent(3), 0u);
  EXPECT_EQ(plan->FirstOwnLevel(3), 1u);
  EXPECT_THAT(plan->Children(3, 1), ElementsAre(4, 5));
  EXPECT_EQ(plan->Parent(5), 3u);
  EXPECT_EQ(plan->Parent(2), 0u);
  EXPECT_EQ(plan->FirstOwnLevel(5), 2u);  // a leaf of the last level splits no more

  v1::BranchInfo info = BranchInfoOf(*plan, "b", 4, 5);
  EXPECT_EQ(info.root_episode_id(), "b:g4:e0");
  EXPECT_EQ(info.parent_episode_id(), "b:g4:e3");
  EXPECT_EQ(info.sibling_index(), 2u);
  EXPECT_THAT(info.path(), ElementsAre(1, 2));
  EXPECT_EQ(BranchInfoOf(*plan, "b", 4, 0).parent_episode_id(), "");
}

TEST(BranchPlanTest, ACountOfZeroTakesTheRestAndBadSpecsAreRefusedByName) {
  auto plan = PlanBranches(Points({{2, 0}}), 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->counts, ElementsAre(8));
  plan = PlanBranches(Points({{1, 2}, {4, 0}}), 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->counts, ElementsAre(2, 4));

  auto refused = [](const v1::BranchSpec& spec, uint32_t group, const std::string& what) {
    auto p = PlanBranches(spec, group);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(p.status().message(), HasSubstr(what));
  };
  refused(v1::BranchSpec(), 4, "at least one branch point");
  refused(Points({{1, 2}, {1, 2}}), 4, "strictly increasing");
  refused(Points({{1, 1}}), 1, "at least 2");
  refused(Points({{1, 0}, {2, 0}}), 4, "at most one point");
  refused(Points({{1, 3}}), 4, "must multiply to the batch's group_size (4)");
  refused(Points({{1, 0}}), 1, "group_size (1)");
  refused(Points({{1, 2}, {2, 2}, {3, 2}, {4, 2}, {5, 2}}), 32, "more than 4");

  v1::Task task;
  task.set_id("t");
  task.set_runner(v1::RUNNER_TOOL_LOOP);
  *task.mutable_branch() = Points({{1, 2}});
  EXPECT_TRUE(CheckBranching(task, 2, 0).ok());
  EXPECT_THAT(CheckBranching(task, 2, 1).message(), HasSubstr("redundancy"));
  EXPECT_THAT(CheckBranching(task, 3, 0).message(), HasSubstr("task 't': branch.at"));
  task.mutable_environment()->set_image("python:3");  // image sandboxes fork too
  EXPECT_TRUE(CheckBranching(task, 2, 0).ok());
  task.clear_environment();
  task.add_mcp_servers()->set_name("m");  // carried into the branches with their state
  EXPECT_TRUE(CheckBranching(task, 2, 0).ok());
  task.clear_mcp_servers();
  task.set_runner(v1::RUNNER_AGENT);
  EXPECT_THAT(CheckBranching(task, 2, 0).message(), HasSubstr("tool_loop"));
}

class BranchTableTest : public EpisodeTableTest {
 protected:
  // One branching task: `points` over groups of `group`.
  void SubmitBranching(const std::string& id, uint32_t group, std::vector<std::pair<uint32_t, uint32_t>> points) {
    ASSERT_TRUE(Submit(Spec(id, group), 1, "d", [&](v1::Task& t) {
                  t.set_runner(v1::RUNNER_TOOL_LOOP);
                  *t.mutable_branch() = Points(points);
                }).ok());
  }
  std::vector<std::string> Ids(const std::vector<EpisodeTicket>& tickets) {
    std::vector<std::string> out;
    for (const auto& t : tickets) out.push_back(t.ids.episode_id());
    return out;
  }
};

TEST_F(BranchTableTest, OnlyTheRootIsQueuedAndItsSplitStartsTheChildrenAsFinalRuns) {
  SubmitBranching("b", 4, {{1, 2}, {3, 2}});
  EXPECT_EQ(Counts("b").queued(), 4u);   // the children are waiting, counted as queued
  EXPECT_EQ(table_->QueuedCount(), 1u);  // but only the root can start
  const EpisodeTicket root = Start();
  EXPECT_EQ(root.ids.episode_id(), "b:g0:e0");
  ASSERT_TRUE(root.branch_plan.has_value());
  EXPECT_THAT(root.branch_plan->counts, ElementsAre(2, 2));
  EXPECT_EQ(table_->StartNext(testing_support::Any), std::nullopt);

  const std::vector<EpisodeTicket> first = table_->Branch(root, 0);
  EXPECT_THAT(Ids(first), ElementsAre("b:g0:e2"));
  EXPECT_TRUE(root.control->final());
  EXPECT_TRUE(first[0].control->final());
  EXPECT_EQ(first[0].env_id, "b:g0:e2:r1");
  EXPECT_EQ(log_.started.back(), std::make_pair(std::string("b:g0:e2"), 1u));
  EXPECT_THAT(Ids(table_->Branch(root, 0)), IsEmpty());  // a level splits once
  const std::vector<EpisodeTicket> second = table_->Branch(first[0], 1);
  EXPECT_THAT(Ids(second), ElementsAre("b:g0:e3"));
  EXPECT_THAT(Ids(table_->Branch(root, 1)), ElementsAre("b:g0:e1"));
  EXPECT_EQ(Counts("b").running(), 4u);

  // A final run that fails as infra is recorded, not retried: its state cannot be rebuilt.
  EXPECT_EQ(End(second[0], InfraFailure()), FinishOutcome::kRecorded);
  End(root, Finished());
  End(first[0], Finished());
  EXPECT_EQ(table_->GetBatch("b")->state(), v1::BATCH_STATE_RUNNING);
}

TEST_F(BranchTableTest, ARootThatEndsBeforeSplittingEndsItsWholeTreeAsItEnded) {
  SubmitBranching("b", 4, {{1, 2}, {3, 2}});
  const EpisodeTicket root = Start();
  v1::EpisodeResult failed = testing_support::Result(v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_AGENT);
  failed.set_failed_phase(v1::EPISODE_PHASE_AGENT);
  failed.set_failure_message("LLM call: HTTP 400: bad request");
  EXPECT_EQ(End(root, failed), FinishOutcome::kRecorded);
  const auto results = Results("b");
  ASSERT_EQ(results.size(), 4u);
  for (const auto& r : results) {
    EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FAILED) << r.ids().episode_id();
    EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_AGENT);
    if (r.ids().index_in_group() == 0) continue;
    EXPECT_THAT(r.failure_message(), HasSubstr("its branch never started"));
    EXPECT_THAT(r.failure_message(), HasSubstr("HTTP 400"));
    EXPECT_EQ(r.branch().root_episode_id(), "b:g0:e0");
  }
  EXPECT_EQ(table_->GetBatch("b")->state(), v1::BATCH_STATE_COMPLETE);
}

TEST_F(BranchTableTest, AnInfraFailureBeforeTheSplitRetriesTheRootAndItsChildrenKeepWaiting) {
  SubmitBranching("b", 2, {{2, 2}});
  const EpisodeTicket root = Start();
  EXPECT_EQ(End(root, InfraFailure()), FinishOutcome::kRetried);
  EXPECT_EQ(Counts("b").queued(), 2u);
  clock_.Advance(absl::Minutes(5));
  const EpisodeTicket again = Start();
  EXPECT_EQ(again.ids.attempt(), 2u);
  EXPECT_THAT(Ids(table_->Branch(again, 0)), ElementsAre("b:g0:e1"));
}

TEST_F(BranchTableTest, CancellingTheBatchEndsWaitingChildrenAndASplitSkipsThem) {
  SubmitBranching("b", 3, {{1, 3}});
  const EpisodeTicket root = Start();
  v1::CancelRequest one;
  one.set_episode_id("b:g0:e2");
  EXPECT_THAT(Cancel(one), IsOkAndHolds(1u));
  EXPECT_THAT(Ids(table_->Branch(root, 0)), ElementsAre("b:g0:e1"));
  EXPECT_EQ(Counts("b").cancelled(), 1u);
}

TEST_F(BranchTableTest, ARestartBeforeTheSplitRunsTheRootAgainAndAfterItEndsTheRest) {
  v1::BranchSpec branch = Points({{1, 2}});
  auto row = [&](const std::string& id) {
    Snapshot::BatchRow r = testing_support::Row(Spec(id, 2), clock_.Now());
    auto task = std::make_shared<v1::Task>(*r.tasks[0]);
    task->set_runner(v1::RUNNER_TOOL_LOOP);
    *task->mutable_branch() = branch;
    r.tasks[0] = task;
    return r;
  };
  Snapshot snap;
  snap.batches.push_back(row("before"));
  snap.batches.push_back(row("after"));
  snap.runs.push_back({.episode_id = "before:g0:e0", .attempt = 1, .runs = 1, .running = true});
  snap.runs.push_back({.episode_id = "after:g0:e0", .attempt = 1, .runs = 1, .running = true});
  snap.runs.push_back({.episode_id = "after:g0:e1", .attempt = 1, .runs = 1, .running = true});
  table_->Restore(snap);
  log_.Commit();

  EXPECT_EQ(table_->QueuedCount(), 1u);
  const EpisodeTicket root = Start();
  EXPECT_EQ(root.ids.episode_id(), "before:g0:e0");
  EXPECT_THAT(Ids(table_->Branch(root, 0)), ElementsAre("before:g0:e1"));

  const auto results = Results("after");
  ASSERT_EQ(results.size(), 2u);
  for (const auto& r : results) {
    EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FAILED);
    EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_INFRA);
    EXPECT_THAT(r.failure_message(), HasSubstr("restarted after this episode's group had branched"));
  }
}

}  // namespace
}  // namespace corral::scheduler
