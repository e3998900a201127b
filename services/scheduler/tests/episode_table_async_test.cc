// The episode table's asynchronous-RL side: group filters, dynamic sampling (target_groups, surplus, budget),
// the group failure policy, staleness (admission, re-runs, withdrawal) and oldest-version-first delivery.
#include <cmath>
#include <set>

#include "services/scheduler/table/episode_table.h"
#include "services/scheduler/table/group_filter.h"
#include "services/scheduler/tests/episode_table_fixture.h"

namespace corral::scheduler {
namespace {

using namespace testing_support;  // NOLINT: the fixture's helpers
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

v1::EpisodeResult Rewarded(double reward, std::optional<int64_t> version = std::nullopt) {
  v1::EpisodeResult r = Finished();
  r.set_reward(reward);
  if (version) {
    r.set_first_policy_version(*version);
    r.set_last_policy_version(*version);
  }
  return r;
}

v1::BatchSpec DropEqual(v1::BatchSpec spec) {
  spec.mutable_group_filter()->set_drop_equal_rewards(true);
  return spec;
}

class EpisodeTableAsyncTest : public EpisodeTableTest {
 protected:
  // Appends tasks named `ids` to a stream.
  absl::StatusOr<v1::Batch> Append(const std::string& batch, std::vector<std::string> ids, bool close = false) {
    std::vector<std::shared_ptr<const v1::Task>> list;
    for (const auto& id : ids) {
      auto t = std::make_shared<v1::Task>();
      t->set_id(id);
      list.push_back(std::move(t));
    }
    absl::StatusOr<v1::Batch> out = absl::UnknownError("done was not called");
    table_->Append(batch, std::move(list), close, [&](absl::StatusOr<v1::Batch> b) { out = std::move(b); });
    return out;
  }
  // Starts the next episode and ends it with `result`.
  void Run(v1::EpisodeResult result) { End(Start(), std::move(result)); }
  v1::GroupCounts Groups(const std::string& batch) { return table_->GetBatch(batch).value().groups(); }
};

TEST(GroupFilterTest, EachBoundActsAndSaysWhy) {
  v1::GroupFilter f;
  EXPECT_FALSE(HasBounds(f));
  EXPECT_EQ(FilterGroup(f, {}), "");
  f.set_drop_equal_rewards(true);
  EXPECT_EQ(FilterGroup(f, {1, 1, 1}), "group filtered: rewards all equal (1)");
  EXPECT_EQ(FilterGroup(f, {0, 1}), "");
  EXPECT_THAT(FilterGroup(f, {}), HasSubstr("no episode of the group finished"));
  v1::GroupFilter g;
  g.set_min_mean_reward(0.2);
  g.set_max_mean_reward(0.8);
  EXPECT_EQ(FilterGroup(g, {1, 1, 1, 0}), "");
  EXPECT_EQ(FilterGroup(g, {1, 1, 0, 0}), "");
  EXPECT_THAT(FilterGroup(g, {1, 1, 1, 1}), HasSubstr("> max_mean_reward 0.8"));
  EXPECT_THAT(FilterGroup(g, {0, 0, 0, 0, 0, 1}), HasSubstr("< min_mean_reward 0.2"));
  v1::GroupFilter s;
  s.set_min_reward_std(0.5);  // {0, 1}: std 0.5 exactly passes
  EXPECT_EQ(FilterGroup(s, {0, 1}), "");
  EXPECT_THAT(FilterGroup(s, {0, 0.5}), HasSubstr("reward std 0.25 < min_reward_std 0.5"));
  v1::GroupFilter r;
  r.set_min_reward_range(0.5);
  EXPECT_THAT(FilterGroup(r, {0.2, 0.4}), HasSubstr("reward range"));
}

TEST_F(EpisodeTableAsyncTest, AFilteredGroupIsHeldThenDeliveredFilteredAndCounted) {
  ASSERT_THAT(Submit(DropEqual(Spec("b", 2)), 2), IsOk());
  Run(Rewarded(1.0));
  EXPECT_TRUE(Deliverable().empty());  // held until its group is decided
  Run(Rewarded(1.0));                  // group 0: {1, 1}
  Run(Rewarded(0.0));
  Run(Rewarded(1.0));  // group 1: {0, 1}
  const std::vector<v1::EpisodeResult> results = Results("b");
  ASSERT_EQ(results.size(), 4u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(results[k].ids().group_index(), 0u);
    EXPECT_EQ(results[k].status(), v1::EPISODE_STATUS_FILTERED);
    EXPECT_EQ(results[k].reward(), 1.0);  // kept
    EXPECT_EQ(results[k].failure_message(), "group filtered: rewards all equal (1)");
  }
  EXPECT_EQ(results[2].status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_EQ(results[3].status(), v1::EPISODE_STATUS_FINISHED);
  const v1::Batch batch = table_->GetBatch("b", /*task_stats=*/true).value();
  EXPECT_EQ(batch.state(), v1::BATCH_STATE_COMPLETE);
  EXPECT_EQ(batch.counts().filtered(), 2u);
  EXPECT_EQ(batch.counts().finished(), 2u);
  EXPECT_EQ(batch.mean_reward(), 0.5);  // of FINISHED episodes only
  EXPECT_EQ(batch.groups().passed(), 1u);
  EXPECT_EQ(batch.groups().filtered(), 1u);
  ASSERT_EQ(batch.task_stats_size(), 2);
  EXPECT_EQ(batch.task_stats(0).task_id(), "t0");
  EXPECT_EQ(batch.task_stats(0).pass_rate(), 1.0);
  EXPECT_FALSE(batch.task_stats(0).passed());
  EXPECT_EQ(batch.task_stats(1).mean_reward(), 0.5);
  EXPECT_TRUE(batch.task_stats(1).passed());
  // The rewrite is journaled under the same result.
  ASSERT_GE(log_.journaled.size(), 2u);
  EXPECT_EQ(log_.journaled[2].first.status(), v1::EPISODE_STATUS_FILTERED);
}

TEST_F(EpisodeTableAsyncTest, DynamicSamplingOpensGroupsUntilTheTargetPassesThenCancelsTheSurplus) {
  v1::BatchSpec spec = DropEqual(Spec("b", 2));
  spec.set_target_groups(2);
  ASSERT_THAT(Submit(spec, 8), IsOk());
  EXPECT_EQ(table_->QueuedCount(), 4u);  // 2 groups at the start (the target)
  EXPECT_EQ(Groups("b").total(), 8u);
  Run(Rewarded(1.0));
  Run(Rewarded(1.0));  // group 0 filtered: the pass rate estimate (1/3) wants 6 in flight
  EXPECT_EQ(Groups("b").filtered(), 1u);
  EXPECT_EQ(table_->QueuedCount(), 2u + 5 * 2u);
  Run(Rewarded(0.0));
  Run(Rewarded(1.0));                     // group 1 passes
  const EpisodeTicket running = Start();  // group 2, e0: running when the target is reached
  EXPECT_EQ(running.ids.group_index(), 2u);
  Run(Rewarded(0.0));  // group 2, e1 ended
  // Groups are started in order; the next ones are 3 and 4.
  const EpisodeTicket g3e0 = Start();
  Run(Rewarded(1.0));
  End(g3e0, Rewarded(0.0));  // group 3 passes: target reached
  EXPECT_EQ(running.control->reason(), StopReason::kRedundant);
  EXPECT_FALSE(table_->HasQueued());
  End(running, Result(v1::EPISODE_STATUS_CANCELLED));
  const v1::Batch batch = table_->GetBatch("b").value();
  EXPECT_EQ(batch.state(), v1::BATCH_STATE_COMPLETE);
  EXPECT_EQ(batch.progress(), 1.0);
  EXPECT_EQ(batch.groups().passed(), 2u);
  EXPECT_EQ(batch.groups().filtered(), 1u);
  EXPECT_EQ(batch.groups().surplus(), 4u);  // 2 (half ended) and 4..6 (queued)
  EXPECT_EQ(batch.groups().started(), 4u);
  EXPECT_EQ(batch.counts().total(), 6u);  // the decided groups' results
  // The surplus group's ended episode is an extra, never delivered; the journal marks it redundant.
  std::set<uint32_t> delivered_groups;
  for (const auto& r : Results("b")) delivered_groups.insert(r.ids().group_index());
  EXPECT_EQ(delivered_groups, (std::set<uint32_t>{0, 1, 3}));
  EXPECT_EQ(log_.journaled.back().first.ids().episode_id(), "b:g2:e1");
  EXPECT_TRUE(log_.journaled.back().second);
}

TEST_F(EpisodeTableAsyncTest, DynamicSamplingStopsAtItsBudget) {
  v1::BatchSpec spec = DropEqual(Spec("b", 1));  // one episode per group: always "all equal"
  spec.set_target_groups(2);
  spec.set_max_groups(3);
  ASSERT_THAT(Submit(spec, 10), IsOk());
  for (int k = 0; k < 3; ++k) Run(Rewarded(1.0));
  EXPECT_FALSE(table_->HasQueued());
  const v1::Batch batch = table_->GetBatch("b").value();
  EXPECT_EQ(batch.state(), v1::BATCH_STATE_COMPLETE);
  EXPECT_EQ(batch.groups().started(), 3u);
  EXPECT_EQ(batch.groups().passed(), 0u);
  EXPECT_EQ(batch.groups().filtered(), 3u);
  EXPECT_EQ(Results("b").size(), 3u);  // reported, not lost
}

TEST_F(EpisodeTableAsyncTest, DropPolicyDropsAGroupWithAFailedEpisode) {
  v1::BatchSpec spec = Spec("b", 2);
  spec.set_group_failure_policy(v1::GROUP_FAILURE_POLICY_DROP);
  ASSERT_THAT(Submit(spec, 1), IsOk());
  Run(Rewarded(1.0));
  Run(Result(v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_AGENT));
  const auto results = Results("b");
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status(), v1::EPISODE_STATUS_FILTERED);
  EXPECT_EQ(results[0].failure_message(), "group dropped: episode 1 ended FAILED");
  EXPECT_EQ(results[1].status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(Groups("b").dropped(), 1u);
  EXPECT_EQ(Groups("b").passed(), 0u);
}

TEST_F(EpisodeTableAsyncTest, ReplacePolicyRunsAnAgentFailureAgain) {
  v1::BatchSpec spec = Spec("b", 1);
  spec.set_group_failure_policy(v1::GROUP_FAILURE_POLICY_REPLACE);
  ASSERT_THAT(Submit(spec, 1), IsOk());
  EXPECT_EQ(End(Start(), Result(v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_VERIFIER)), FinishOutcome::kRetried);
  clock_.Advance(absl::Seconds(5));
  const EpisodeTicket again = Start();
  EXPECT_EQ(again.ids.attempt(), 2u);
  EXPECT_EQ(End(again, Rewarded(1.0)), FinishOutcome::kRecorded);
  EXPECT_EQ(Counts("b").retries(), 1u);
}

TEST_F(EpisodeTableAsyncTest, AResultTooStaleWhenItEndsRunsAgainThenIsGivenUp) {
  v1::BatchSpec spec = Spec("b", 1);
  spec.set_max_staleness(1);
  ASSERT_THAT(Submit(spec, 1), IsOk());
  table_->SetPolicyVersion(3);  // oldest allowed: 2
  EXPECT_EQ(End(Start(), Rewarded(1.0, 1)), FinishOutcome::kRequeued);
  EXPECT_EQ(Counts("b").stale_reruns(), 1u);
  EXPECT_EQ(End(Start(), Rewarded(1.0, 2)), FinishOutcome::kRecorded);  // fresh enough
  ASSERT_EQ(Results("b").size(), 1u);
  EXPECT_EQ(Results("b")[0].first_policy_version(), 2);

  spec.set_batch_id("c");
  ASSERT_THAT(Submit(spec, 1), IsOk());
  for (int k = 0; k < 2; ++k) EXPECT_EQ(End(Start(), Rewarded(1.0, 0)), FinishOutcome::kRequeued);
  EXPECT_EQ(End(Start(), Rewarded(1.0, 0)), FinishOutcome::kRecorded);
  const auto results = Results("c");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(results[0].failure_class(), v1::FAILURE_CLASS_INFRA);
  EXPECT_FALSE(results[0].has_reward());
  EXPECT_THAT(results[0].failure_message(), HasSubstr("max_staleness (1)"));
}

TEST_F(EpisodeTableAsyncTest, AnUpdateWithdrawsUndeliveredStaleResultsOnly) {
  v1::BatchSpec spec = Spec("b", 1);
  spec.set_max_staleness(1);
  ASSERT_THAT(Submit(spec, 3), IsOk());
  Run(Rewarded(1.0, 0));
  Run(Rewarded(0.5, 0));
  Run(Rewarded(0.0, 1));
  table_->MarkDelivered("b:g1:e0");
  table_->SetPolicyVersion(2);  // oldest allowed: 1
  EXPECT_THAT(log_.withdrawn, ElementsAre("b:g0:e0"));
  EXPECT_EQ(Counts("b").stale_reruns(), 1u);
  EXPECT_EQ(Counts("b").finished(), 2u);
  EXPECT_EQ(table_->GetBatch("b")->state(), v1::BATCH_STATE_RUNNING);
  EXPECT_THAT(Deliverable(), UnorderedElementsAre("b:g1:e0", "b:g2:e0"));
  const EpisodeTicket again = Start();
  EXPECT_EQ(again.ids.episode_id(), "b:g0:e0");
  EXPECT_EQ(again.env_id, "b:g0:e0:r2");
  End(again, Rewarded(1.0, 2));
  EXPECT_EQ(table_->GetBatch("b")->state(), v1::BATCH_STATE_COMPLETE);
  EXPECT_EQ(Counts("b").finished(), 3u);
}

TEST_F(EpisodeTableAsyncTest, AdmissionStartsAtMostKPlusOneStepsOfGroups) {
  v1::BatchSpec spec = Spec("b", 2);
  spec.set_max_staleness(0);
  spec.set_step_groups(1);
  table_->SetPolicyVersion(5);
  ASSERT_THAT(Submit(spec, 3), IsOk());
  EXPECT_EQ(table_->GetBatch("b")->spec().base_policy_version(), 5);
  EXPECT_EQ(Start().ids.episode_id(), "b:g0:e0");
  EXPECT_EQ(Start().ids.episode_id(), "b:g0:e1");   // a started group runs whole
  EXPECT_EQ(table_->StartNext(Any), std::nullopt);  // (0 + 1 + 0) x 1 groups
  table_->SetPolicyVersion(6);
  EXPECT_EQ(Start().ids.episode_id(), "b:g1:e0");
  EXPECT_EQ(Groups("b").started(), 2u);
}

TEST_F(EpisodeTableAsyncTest, AFilteredGroupFreesItsAdmissionPlace) {
  v1::BatchSpec spec = DropEqual(Spec("b", 2));
  spec.set_max_staleness(0);
  spec.set_step_groups(1);
  ASSERT_THAT(Submit(spec, 3), IsOk());
  const EpisodeTicket e0 = Start(), e1 = Start();
  EXPECT_EQ(table_->StartNext(Any), std::nullopt) << "group 1 admitted before group 0 was decided";
  End(e0, Rewarded(1.0));
  End(e1, Rewarded(1.0));  // group 0: {1, 1} filtered, neither accepted nor running
  EXPECT_EQ(Start().ids.episode_id(), "b:g1:e0");
}

TEST_F(EpisodeTableAsyncTest, OlderPolicyVersionsAreDeliveredFirst) {
  ASSERT_THAT(Submit(Spec("b", 1), 3), IsOk());
  Run(Rewarded(1.0, 7));
  Run(Rewarded(1.0, 4));
  Run(Rewarded(1.0, 6));
  EXPECT_THAT(Deliverable(), ElementsAre("b:g1:e0", "b:g2:e0", "b:g0:e0"));
  // A page of one: the rest block the cursor at the lowest position left.
  const EpisodeTable::DeliveryPage page = table_->Deliverable("b", 0, {}, false, 1);
  ASSERT_EQ(page.items.size(), 1u);
  EXPECT_EQ(page.items[0].episode_id, "b:g1:e0");
  const uint64_t g0 = page.items[0].position - 1;
  EXPECT_EQ(page.blocked_at, g0);
  // What was sent is skipped.
  const EpisodeTable::DeliveryPage next = table_->Deliverable("b", 0, {page.items[0].position}, false, 10);
  ASSERT_EQ(next.items.size(), 2u);
  EXPECT_EQ(next.items[0].episode_id, "b:g2:e0");
  EXPECT_EQ(next.blocked_at, UINT64_MAX);
}

TEST_F(EpisodeTableAsyncTest, RestoreTakesTheGroupVerdictAgain) {
  v1::BatchSpec spec = DropEqual(Spec("r", 2));
  auto result = [](const std::string& id, double reward) {
    v1::EpisodeResult r = Rewarded(reward);
    r.mutable_ids()->set_episode_id(id);
    return r.SerializeAsString();
  };
  Snapshot snap;
  snap.batches.push_back(Row(spec, clock_.Now()));
  // Journaled before the group's rewrite was: both still FINISHED.
  snap.results.push_back({.seq = 1,
                          .episode_id = "r:g0:e0",
                          .status = v1::EPISODE_STATUS_FINISHED,
                          .reward = 1.0,
                          .result = result("r:g0:e0", 1.0)});
  snap.results.push_back({.seq = 2,
                          .episode_id = "r:g0:e1",
                          .status = v1::EPISODE_STATUS_FINISHED,
                          .reward = 1.0,
                          .result = result("r:g0:e1", 1.0)});
  table_->Restore(snap);
  log_.Commit();
  const auto results = Results("r");
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status(), v1::EPISODE_STATUS_FILTERED);
  EXPECT_EQ(Groups("r").filtered(), 1u);
  EXPECT_EQ(table_->GetBatch("r")->state(), v1::BATCH_STATE_COMPLETE);
}

struct RecordingObserver : TableObserver {
  std::vector<std::string> groups;
  int stale_reruns = 0;
  std::vector<int64_t> staleness;
  void GroupDecided(const char* outcome) override { groups.emplace_back(outcome); }
  void StaleRerun() override { ++stale_reruns; }
  void Delivered(int64_t s) override { staleness.push_back(s); }
};

TEST_F(EpisodeTableAsyncTest, TheObserverHearsVerdictsRerunsAndStalenessAtDelivery) {
  RecordingObserver observer;
  Reset(1000, TableHooks{.observer = &observer});
  v1::BatchSpec spec = DropEqual(Spec("b", 2));
  spec.set_max_staleness(2);
  spec.set_target_groups(1);
  ASSERT_THAT(Submit(spec, 3), IsOk());
  table_->SetPolicyVersion(3);                                          // oldest allowed: 1
  EXPECT_EQ(End(Start(), Rewarded(1.0, 0)), FinishOutcome::kRequeued);  // too stale: runs again
  Run(Rewarded(1.0, 3));
  Run(Rewarded(1.0, 2));  // group 0: {1, 1} filtered
  Run(Rewarded(0.0, 3));
  Run(Rewarded(1.0, 1));  // group 1 passes: target reached
  EXPECT_EQ(observer.stale_reruns, 1);
  EXPECT_THAT(observer.groups, ElementsAre("filtered", "passed", "surplus"));  // group 2 was opened
  for (const std::string& id : Deliverable("b")) table_->MarkDelivered(id);
  table_->MarkDelivered("b:g1:e1");  // again: observed once
  EXPECT_THAT(observer.staleness, UnorderedElementsAre(0, 1, 0, 2));
  table_.reset();
}

TEST_F(EpisodeTableAsyncTest, TheHooksHearNothingOfWhatRestoreReplaysThenHearWhatHappens) {
  RecordingObserver observer;
  int changes = 0;
  Reset(1000, TableHooks{.on_change = [&] { ++changes; }, .observer = &observer});
  v1::BatchSpec spec = DropEqual(Spec("r", 2));
  spec.set_max_staleness(0);
  Snapshot snap;
  snap.batches.push_back(Row(spec, clock_.Now()));
  auto task = std::make_shared<v1::Task>();
  task->set_id("t1");
  snap.batches[0].tasks.push_back(task);
  // Group 0 was decided before the restart (filtered); group 1 has one result from policy version 0, which
  // the restored version 1 makes too stale: the restore withdraws it (a stale re-run, not reported).
  const std::vector<std::pair<std::string, int64_t>> journaled = {{"r:g0:e0", 1}, {"r:g0:e1", 1}, {"r:g1:e0", 0}};
  for (size_t k = 0; k < journaled.size(); ++k) {
    v1::EpisodeResult r = Rewarded(1.0, journaled[k].second);
    r.mutable_ids()->set_episode_id(journaled[k].first);
    snap.results.push_back({.seq = k + 1,
                            .episode_id = journaled[k].first,
                            .status = v1::EPISODE_STATUS_FINISHED,
                            .reward = 1.0,
                            .result = r.SerializeAsString()});
  }
  table_->Restore(snap, 1);
  EXPECT_EQ(changes, 0);
  log_.Commit();  // the verdict's rewrites become durable after the restore: the streams hear of that
  EXPECT_EQ(Groups("r").filtered(), 1u);
  EXPECT_EQ(table_->QueuedCount(), 2u);  // both of group 1: the stale one again
  EXPECT_EQ(observer.stale_reruns, 0);
  EXPECT_THAT(observer.groups, IsEmpty());
  changes = 0;
  Run(Rewarded(1.0, 1));
  Run(Rewarded(0.0, 1));  // group 1 passes, live
  EXPECT_THAT(observer.groups, ElementsAre("passed"));
  EXPECT_GT(changes, 0);
  table_.reset();
}

TEST_F(EpisodeTableAsyncTest, AStreamKeepsKGroupsInFlightTakesAppendedTasksAndEndsOnceItsInputIsClosed) {
  v1::BatchSpec spec = Spec("s", 1);
  spec.set_groups_in_flight(2);
  ASSERT_THAT(Submit(spec, 1), IsOk());
  EXPECT_EQ(table_->QueuedCount(), 1u);
  auto appended = Append("s", {"a", "b", "c"});
  ASSERT_THAT(appended, IsOk());
  EXPECT_EQ(appended->task_count(), 4u);
  EXPECT_TRUE(appended->input_open());
  EXPECT_EQ(table_->QueuedCount(), 2u);  // groups 0 and 1: K in flight
  Run(Rewarded(1.0));                    // group 0 ends: group 2 opens
  EXPECT_EQ(table_->QueuedCount(), 2u);
  const EpisodeTicket g1 = Start(), g2 = Start();
  EXPECT_EQ(g1.ids.group_index(), 1u);
  EXPECT_EQ(g2.ids.group_index(), 2u);
  EXPECT_EQ(table_->StartNext(Any), std::nullopt);  // two in flight
  // Refused, changing nothing: a task id it has, an unknown batch, a journal that fails.
  EXPECT_THAT(Append("s", {"b"}), StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("task 'b'")));
  EXPECT_THAT(Append("nope", {"x"}), StatusIs(absl::StatusCode::kNotFound));
  log_.append_status = absl::InternalError("disk full");
  EXPECT_THAT(Append("s", {"d"}), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("disk full")));
  log_.append_status = absl::OkStatus();
  EXPECT_EQ(table_->GetBatch("s")->task_count(), 4u);
  End(g1, Rewarded(1.0));
  End(g2, Rewarded(0.0));
  const EpisodeTicket g3 = Start();
  EXPECT_EQ(g3.ids.group_index(), 3u);
  // Every task started: still RUNNING while the input is open. Closed, it completes once the last one ends.
  EXPECT_EQ(table_->GetBatch("s")->state(), v1::BATCH_STATE_RUNNING);
  ASSERT_THAT(Append("s", {}, /*close=*/true), IsOk());
  EXPECT_FALSE(table_->GetBatch("s")->input_open());
  EXPECT_EQ(table_->GetBatch("s")->state(), v1::BATCH_STATE_RUNNING);
  EXPECT_THAT(Append("s", {"e"}), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("input is closed")));
  End(g3, Rewarded(1.0));
  EXPECT_EQ(table_->GetBatch("s")->state(), v1::BATCH_STATE_COMPLETE);
  EXPECT_EQ(Counts("s").finished(), 4u);
  EXPECT_THAT(log_.appended, ElementsAre("s@1+3", "s@4+1", "s@4+0 closed"));  // the failed write included

  ASSERT_THAT(Submit(Spec("plain", 1), 1), IsOk());
  EXPECT_THAT(Append("plain", {"x"}), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a stream")));
}

TEST_F(EpisodeTableAsyncTest, ARestoredStreamReopensItsGroupsInFlight) {
  v1::BatchSpec spec = Spec("s", 1);
  spec.set_groups_in_flight(2);
  Snapshot snap;
  snap.batches.push_back(Row(spec, clock_.Now()));
  for (const char* id : {"t1", "t2"}) {
    auto task = std::make_shared<v1::Task>();
    task->set_id(id);
    snap.batches.back().tasks.push_back(task);
  }
  v1::EpisodeResult done = Rewarded(1.0);
  done.mutable_ids()->set_episode_id("s:g0:e0");
  snap.results.push_back({.seq = 1,
                          .episode_id = "s:g0:e0",
                          .status = v1::EPISODE_STATUS_FINISHED,
                          .reward = 1.0,
                          .result = done.SerializeAsString()});
  table_->Restore(snap);
  EXPECT_EQ(table_->QueuedCount(), 2u);  // groups 1 and 2
  EXPECT_TRUE(table_->GetBatch("s")->input_open());
  snap.batches.back().input_closed = true;
  snap.batches.back().spec.set_batch_id("closed");
  snap.results.clear();
  Reset(1000);
  table_->Restore(snap);
  EXPECT_FALSE(table_->GetBatch("closed")->input_open());
}

TEST(AsyncSpecTest, BadFieldsAreRefused) {
  v1::BatchSpec s;
  s.set_step_groups(2);
  EXPECT_THAT(ValidateAsyncSpec(s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs spec.max_staleness")));
  s.set_max_staleness(1);
  EXPECT_THAT(ValidateAsyncSpec(s), IsOk());
  s.set_max_groups(4);
  EXPECT_THAT(ValidateAsyncSpec(s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs spec.target_groups")));
  s.set_target_groups(5);
  EXPECT_THAT(ValidateAsyncSpec(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least")));
  s.set_max_groups(0);
  s.mutable_group_filter()->set_min_mean_reward(0.9);
  s.mutable_group_filter()->set_max_mean_reward(0.1);
  EXPECT_THAT(ValidateAsyncSpec(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("min_mean_reward")));
  s.mutable_group_filter()->set_max_mean_reward(std::nan(""));
  EXPECT_THAT(ValidateAsyncSpec(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("finite")));
  s.clear_group_filter();
  s.set_group_failure_policy(static_cast<v1::GroupFailurePolicy>(9));
  EXPECT_THAT(ValidateAsyncSpec(s), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace corral::scheduler
