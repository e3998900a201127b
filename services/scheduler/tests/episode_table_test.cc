#include "services/scheduler/table/episode_table.h"

#include "services/scheduler/tests/episode_table_fixture.h"

namespace corral::scheduler {
namespace {

using namespace testing_support;  // NOLINT: the fixture's helpers

TEST_F(EpisodeTableTest, SubmitThenGetBatchCountsTasksTimesGroupSize) {
  ASSERT_THAT(Submit(Spec("b", 4), 3), IsOk());
  auto batch = table_->GetBatch("b");
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->state(), v1::BATCH_STATE_RUNNING);
  EXPECT_EQ(batch->task_count(), 3u);
  EXPECT_EQ(batch->counts().total(), 12u);
  EXPECT_EQ(batch->counts().queued(), 12u);
  EXPECT_EQ(batch->spec().seed(), 7u);
  EXPECT_THAT(log_.batches, ElementsAre("b"));
  EXPECT_THAT(table_->GetBatch("other"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(EpisodeTableTest, ResubmitWithSameDigestReturnsTheExistingBatch) {
  ASSERT_THAT(Submit(Spec("b", 2), 1, "d1"), IsOk());
  Start();
  auto again = Submit(Spec("b", 2), 1, "d1");
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->counts().running(), 1u);  // the existing batch, not a new one
  EXPECT_THAT(log_.batches, ElementsAre("b"));
  EXPECT_THAT(Submit(Spec("b", 2), 1, "d2"), StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST_F(EpisodeTableTest, SubmitBeyondMaxPendingIsResourceExhausted) {
  Reset(5);
  ASSERT_THAT(Submit(Spec("a", 2), 2), IsOk());                                             // 4 pending
  EXPECT_THAT(Submit(Spec("b", 1, 1), 1), StatusIs(absl::StatusCode::kResourceExhausted));  // extras count
  EXPECT_THAT(table_->GetBatch("b"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Submit(Spec("c", 1), 1), IsOk());  // exactly 5
  End(Start(), Finished());
  EXPECT_THAT(Submit(Spec("d", 1), 1), IsOk());  // an ended episode frees its place
}

TEST_F(EpisodeTableTest, StartNextByPriorityThenSubmissionOrder) {
  ASSERT_THAT(Submit(Spec("low1", 2), 1), IsOk());
  ASSERT_THAT(Submit(Spec("high", 1, 0, /*priority=*/5), 1), IsOk());
  ASSERT_THAT(Submit(Spec("low2", 1), 1), IsOk());
  std::vector<std::string> order;
  while (auto t = table_->StartNext(Any)) order.push_back(t->ids.episode_id());
  EXPECT_THAT(order, ElementsAre("high:g0:e0", "low1:g0:e0", "low1:g0:e1", "low2:g0:e0"));
  EXPECT_FALSE(table_->HasQueued());
}

TEST_F(EpisodeTableTest, StartNextFillsTheTicketAndJournalsTheStart) {
  ASSERT_THAT(Submit(Spec("b", 2), 2), IsOk());
  const EpisodeTicket t = Start();
  EXPECT_EQ(t.ids.episode_id(), "b:g0:e0");
  EXPECT_EQ(t.ids.task_id(), "t0");
  EXPECT_EQ(t.ids.seed(), EpisodeSeed(7, 0, 0));
  EXPECT_EQ(t.ids.attempt(), 1u);
  EXPECT_EQ(t.env_id, "b:g0:e0:r1");
  EXPECT_EQ(t.max_attempts, 3u);
  EXPECT_THAT(log_.started, ElementsAre(Pair("b:g0:e0", 1u)));
  EXPECT_EQ(Counts("b").running(), 1u);
}

TEST_F(EpisodeTableTest, StartNextOnlyTakesWhatEligibleAccepts) {
  ASSERT_THAT(Submit(Spec("b", 1), 2), IsOk());
  auto t = table_->StartNext([](const v1::Task& task) { return task.id() == "t1"; });
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->ids.episode_id(), "b:g1:e0");
  EXPECT_EQ(table_->StartNext([](const v1::Task&) { return false; }), std::nullopt);
  EXPECT_EQ(table_->QueuedCount(), 1u);
}

TEST_F(EpisodeTableTest, FinishedResultIsDeliverableUntilAcked) {
  ASSERT_THAT(Submit(Spec("b", 1), 1), IsOk());
  EXPECT_EQ(End(Start(), Finished()), FinishOutcome::kRecorded);
  const auto items = table_->Deliverable("b", 0, {}, false, 10).items;
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].episode_id, "b:g0:e0");
  ASSERT_EQ(Results("b").size(), 1u);
  EXPECT_EQ(Results("b")[0].status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_EQ(Results("b")[0].cursor(), std::to_string(items[0].position));
  EXPECT_EQ(table_->GetBatch("b")->state(), v1::BATCH_STATE_COMPLETE);
  EXPECT_EQ(table_->GetBatch("b")->mean_reward(), 1.0);

  EXPECT_THAT(table_->Ack({"b:g0:e0"}), IsOkAndHolds(1u));
  EXPECT_TRUE(Deliverable().empty());
  EXPECT_THAT(table_->Ack({"b:g0:e0"}), IsOkAndHolds(0u));
  EXPECT_THAT(log_.acked, ElementsAre("b:g0:e0"));
  EXPECT_EQ(Counts("b").acked(), 1u);
}

TEST_F(EpisodeTableTest, AckOfUnknownEpisodeIsNotFound) {
  ASSERT_THAT(Submit(Spec("b", 1), 1), IsOk());
  for (const char* unknown : {"nope:g0:e0", "b:g1:e0", "b:g0:e1", "garbage"}) {
    EXPECT_THAT(table_->Ack({unknown}), StatusIs(absl::StatusCode::kNotFound)) << unknown;
  }
  EXPECT_THAT(table_->Ack({}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(EpisodeTableTest, AckOfEpisodeWithoutResultAcksNothing) {
  ASSERT_THAT(Submit(Spec("b", 2), 1), IsOk());
  End(Start(), Finished());
  EXPECT_THAT(table_->Ack({"b:g0:e0", "b:g0:e1"}), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Deliverable(), ElementsAre("b:g0:e0"));
  EXPECT_TRUE(log_.acked.empty());
  EXPECT_EQ(Counts("b").acked(), 0u);
}

TEST_F(EpisodeTableTest, InfraFailureWithAttemptsLeftIsRequeued) {
  v1::BatchSpec spec = Spec("b", 1);
  spec.set_max_attempts(2);
  ASSERT_THAT(Submit(spec, 1), IsOk());
  EXPECT_EQ(End(Start(), InfraFailure()), FinishOutcome::kRetried);
  EXPECT_THAT(log_.run_ended, ElementsAre(Pair("b:g0:e0", 2u)));
  EXPECT_EQ(Counts("b").retries(), 1u);
  EXPECT_EQ(Counts("b").queued(), 1u);
  EXPECT_TRUE(Deliverable().empty());
  // The retry waits out its back-off (3 s by default, jittered by a quarter) before it may start.
  EXPECT_FALSE(table_->StartNext(Any).has_value());
  clock_.Advance(absl::Milliseconds(2200));
  EXPECT_FALSE(table_->StartNext(Any).has_value());
  clock_.Advance(absl::Milliseconds(1600));

  const EpisodeTicket second = Start();
  EXPECT_EQ(second.ids.attempt(), 2u);
  EXPECT_EQ(second.env_id, "b:g0:e0:r2");
  EXPECT_EQ(End(second, InfraFailure()), FinishOutcome::kRecorded);  // attempts exhausted
  EXPECT_EQ(Counts("b").failed(), 1u);
  ASSERT_EQ(Results("b").size(), 1u);
  EXPECT_EQ(Results("b")[0].status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(Results("b")[0].ids().attempt(), 2u);
}

TEST_F(EpisodeTableTest, AgentFailureIsNotRetried) {
  ASSERT_THAT(Submit(Spec("b", 1), 1), IsOk());
  EXPECT_EQ(End(Start(), Result(v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_AGENT)), FinishOutcome::kRecorded);
  EXPECT_EQ(Counts("b").retries(), 0u);
  EXPECT_EQ(Counts("b").failed(), 1u);
}

TEST_F(EpisodeTableTest, QueuedExtraIsDroppedWhenItsGroupCompletes) {
  ASSERT_THAT(Submit(Spec("b", 2, 1), 1), IsOk());
  EXPECT_EQ(Counts("b").total(), 2u);
  const EpisodeTicket e0 = Start(), e1 = Start();
  End(e0, Finished());
  End(e1, Finished());
  EXPECT_EQ(Counts("b").redundant_cancelled(), 1u);
  EXPECT_EQ(Counts("b").finished(), 2u);
  EXPECT_EQ(table_->GetBatch("b")->state(), v1::BATCH_STATE_COMPLETE);
  EXPECT_FALSE(table_->HasQueued());
  EXPECT_THAT(Deliverable(), ElementsAre("b:g0:e0", "b:g0:e1"));
  EXPECT_THAT(table_->Ack({"b:g0:e2"}), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(EpisodeTableTest, RunningExtraIsStoppedAsRedundantWhenItsGroupCompletes) {
  ASSERT_THAT(Submit(Spec("b", 2, 1), 1), IsOk());
  const EpisodeTicket e0 = Start(), e1 = Start(), e2 = Start();
  End(e1, Finished());
  EXPECT_FALSE(e2.control->stopped());
  End(e0, Finished());
  EXPECT_EQ(e2.control->reason(), StopReason::kRedundant);
  EXPECT_EQ(End(e2, Result(v1::EPISODE_STATUS_CANCELLED)), FinishOutcome::kDropped);
  EXPECT_EQ(Counts("b").redundant_cancelled(), 1u);
  EXPECT_EQ(Counts("b").cancelled(), 0u);
  EXPECT_THAT(log_.results, ElementsAre("b:g0:e1", "b:g0:e0"));
  EXPECT_THAT(Deliverable(), ElementsAre("b:g0:e1", "b:g0:e0"));
}

TEST_F(EpisodeTableTest, BatchEndTimeIsSetWhenTheLastRunningExtraIsDropped) {
  ASSERT_THAT(Submit(Spec("b", 1, 1), 1), IsOk());
  const EpisodeTicket e0 = Start(), e1 = Start();
  End(e0, Finished());
  End(e1, Result(v1::EPISODE_STATUS_CANCELLED));
  EXPECT_EQ(table_->GetBatch("b")->state(), v1::BATCH_STATE_COMPLETE);
  EXPECT_TRUE(table_->GetBatch("b")->has_end_time());
}

TEST_F(EpisodeTableTest, CancelBatchEndsQueuedAtOnceAndStopsRunning) {
  ASSERT_THAT(Submit(Spec("b", 3), 1), IsOk());
  const EpisodeTicket running = Start();
  EXPECT_THAT(Cancel(CancelBatch("b")), IsOkAndHolds(3u));
  EXPECT_EQ(running.control->reason(), StopReason::kCancelled);
  EXPECT_EQ(running.control->message(), "cancelled: user");
  EXPECT_EQ(Counts("b").cancelled(), 2u);
  EXPECT_EQ(Counts("b").running(), 1u);
  EXPECT_EQ(table_->GetBatch("b")->state(), v1::BATCH_STATE_CANCELLED);
  EXPECT_THAT(log_.cancelled, ElementsAre("b"));
  EXPECT_THAT(Deliverable(), ElementsAre("b:g0:e1", "b:g0:e2"));
  for (const v1::EpisodeResult& r : Results("b")) {
    EXPECT_EQ(r.status(), v1::EPISODE_STATUS_CANCELLED);
    EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_QUEUE);
  }
  EXPECT_FALSE(table_->HasQueued());
  EXPECT_EQ(End(running, Result(v1::EPISODE_STATUS_CANCELLED)), FinishOutcome::kRecorded);
  EXPECT_EQ(Counts("b").cancelled(), 3u);
}

TEST_F(EpisodeTableTest, CancelOfUnknownTargetIsNotFound) {
  ASSERT_THAT(Submit(Spec("b", 1), 1), IsOk());
  EXPECT_THAT(Cancel(CancelBatch("nope")), StatusIs(absl::StatusCode::kNotFound));
  v1::CancelRequest group;
  group.set_group_id("b:g9");
  EXPECT_THAT(Cancel(group), StatusIs(absl::StatusCode::kNotFound));
  v1::CancelRequest malformed;
  malformed.set_episode_id("b:g0");
  EXPECT_THAT(Cancel(malformed), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Cancel(v1::CancelRequest()), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Counts("b").queued(), 1u);
}

TEST_F(EpisodeTableTest, CancelThatCompletesAGroupStopsItsRunningExtraAsRedundant) {
  ASSERT_THAT(Submit(Spec("b", 1, 1), 1), IsOk());
  const EpisodeTicket e0 = Start(), e1 = Start();
  ASSERT_EQ(End(e0, InfraFailure()), FinishOutcome::kRetried);  // e0 queued again while the extra e1 runs
  v1::CancelRequest one;
  one.set_episode_id("b:g0:e0");
  EXPECT_THAT(Cancel(one), IsOkAndHolds(1u));
  EXPECT_EQ(e1.control->reason(), StopReason::kRedundant);
}

TEST_F(EpisodeTableTest, WholeGroupsAreDeliveredOnlyOnceCompleteAndConsecutively) {
  ASSERT_THAT(Submit(Spec("b", 2), 2), IsOk());
  const EpisodeTicket g0e0 = Start(), g0e1 = Start(), g1e0 = Start(), g1e1 = Start();
  End(g0e0, Finished());
  End(g1e0, Finished());
  EXPECT_TRUE(Deliverable("b", 0, true).empty());
  EXPECT_THAT(Deliverable("b", 0, false), ElementsAre("b:g0:e0", "b:g1:e0"));
  End(g1e1, Finished());
  const auto g1 = table_->Deliverable("b", 0, {}, true, 10).items;
  ASSERT_EQ(g1.size(), 2u);
  EXPECT_EQ(g1[0].position, g1[1].position);
  EXPECT_THAT(Deliverable("b", 0, true), ElementsAre("b:g1:e0", "b:g1:e1"));
  End(g0e1, Finished());
  EXPECT_THAT(Deliverable("b", 0, true), ElementsAre("b:g1:e0", "b:g1:e1", "b:g0:e0", "b:g0:e1"));
  EXPECT_THAT(Deliverable("b", g1[0].position, true), ElementsAre("b:g0:e0", "b:g0:e1"));
}

TEST_F(EpisodeTableTest, ResultsBecomeVisibleOnlyOnceCommitted) {
  hold_commits_ = true;
  ASSERT_THAT(Submit(Spec("b", 1), 1), IsOk());
  End(Start(), Finished());
  EXPECT_EQ(Counts("b").finished(), 1u);
  EXPECT_TRUE(Deliverable().empty());
  EXPECT_TRUE(Deliverable("b", 0, true).empty());
  EXPECT_FALSE(table_->StreamComplete("b", 100, false));
  EXPECT_THAT(table_->Ack({"b:g0:e0"}), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_EQ(log_.uncommitted.size(), 1u);
  log_.Commit();
  EXPECT_THAT(Deliverable(), ElementsAre("b:g0:e0"));
  EXPECT_THAT(Deliverable("b", 0, true), ElementsAre("b:g0:e0"));
}

TEST_F(EpisodeTableTest, ATrainerDrivenEpisodesResultReachesItsTrainerOnceJournaled) {
  std::vector<v1::EpisodeResult> heard;
  Reset(1000, TableHooks{.on_driven_result = [&](const v1::EpisodeResult& r) { heard.push_back(r); }});
  auto driven = [](v1::Task& t) { t.mutable_env_server()->set_trainer_driven(true); };
  hold_commits_ = true;
  ASSERT_THAT(Submit(Spec("plain", 1), 1), IsOk());
  v1::BatchSpec retried = Spec("driven", 1);
  retried.set_max_attempts(2);
  ASSERT_THAT(Submit(retried, 1, "digest", driven), IsOk());
  End(Start(), Finished());
  EXPECT_EQ(End(Start(), InfraFailure()), FinishOutcome::kRetried);
  log_.Commit();
  EXPECT_TRUE(heard.empty()) << "a plain episode's result, and a retry, are not for a trainer";
  clock_.Advance(absl::Seconds(5));
  End(Start(), Finished());
  EXPECT_TRUE(heard.empty()) << "not before the journal has it";
  log_.Commit();
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].ids().episode_id(), "driven:g0:e0");
  EXPECT_EQ(heard[0].ids().attempt(), 2u);
  EXPECT_FALSE(heard[0].cursor().empty());
  // An episode cancelled while queued ends without a run: its trainer hears it all the same.
  hold_commits_ = false;
  ASSERT_THAT(Submit(Spec("queued", 1), 1, "digest", driven), IsOk());
  ASSERT_THAT(Cancel(CancelBatch("queued")), IsOkAndHolds(1u));
  ASSERT_EQ(heard.size(), 2u);
  EXPECT_EQ(heard[1].ids().episode_id(), "queued:g0:e0");
  EXPECT_EQ(heard[1].status(), v1::EPISODE_STATUS_CANCELLED);
}

TEST_F(EpisodeTableTest, StreamCompleteOnceTerminalAndEverythingSent) {
  ASSERT_THAT(Submit(Spec("b", 2), 1), IsOk());
  const EpisodeTicket e0 = Start(), e1 = Start();
  End(e0, Finished());
  EXPECT_FALSE(table_->StreamComplete("b", 100, false));  // not terminal
  End(e1, Finished());
  const auto items = table_->Deliverable("b", 0, {}, false, 10).items;
  ASSERT_EQ(items.size(), 2u);
  EXPECT_FALSE(table_->StreamComplete("b", items[0].position, false));
  EXPECT_TRUE(table_->StreamComplete("b", items[1].position, false));
  EXPECT_FALSE(table_->StreamComplete("b", items[0].position, true));  // the group completed at items[1]
  EXPECT_TRUE(table_->StreamComplete("b", items[1].position, true));
  EXPECT_FALSE(table_->StreamComplete("nope", 100, false));
  ASSERT_THAT(table_->Ack({"b:g0:e0", "b:g0:e1"}), IsOkAndHolds(2u));
  EXPECT_TRUE(table_->StreamComplete("b", 0, false));
}

TEST_F(EpisodeTableTest, RestoreRequeuesUnendedEpisodesAndKeepsResults) {
  v1::EpisodeResult unacked = Result(v1::EPISODE_STATUS_FINISHED);
  unacked.set_reward(0.0);
  unacked.mutable_ids()->set_episode_id("old:g0:e1");
  Snapshot snap;
  snap.batches.push_back(Row(Spec("old", 3), clock_.Now() - absl::Hours(1)));
  snap.results.push_back(
      {.seq = 4, .episode_id = "old:g0:e0", .status = v1::EPISODE_STATUS_FINISHED, .reward = 1.0, .acked = true});
  snap.results.push_back({.seq = 5,
                          .episode_id = "old:g0:e1",
                          .status = v1::EPISODE_STATUS_FINISHED,
                          .reward = 0.0,
                          .result = unacked.SerializeAsString()});
  snap.runs.push_back({.episode_id = "old:g0:e2", .attempt = 2, .runs = 3});
  table_->Restore(snap);

  EXPECT_EQ(table_->QueuedCount(), 1u);
  EXPECT_EQ(table_->LastPosition(), 5u);
  const auto items = table_->Deliverable("", 0, {}, false, 10).items;
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].episode_id, "old:g0:e1");
  EXPECT_EQ(items[0].position, 5u);
  EXPECT_EQ(items[0].result, unacked.SerializeAsString());
  EXPECT_THAT(table_->Ack({"old:g0:e0"}), IsOkAndHolds(0u));  // acked before the restart
  EXPECT_EQ(Counts("old").finished(), 2u);
  EXPECT_EQ(Counts("old").acked(), 1u);
  EXPECT_EQ(table_->GetBatch("old")->mean_reward(), 0.5);

  const EpisodeTicket t = Start();
  EXPECT_EQ(t.ids.episode_id(), "old:g0:e2");
  EXPECT_EQ(t.ids.attempt(), 2u);
  EXPECT_EQ(t.env_id, "old:g0:e2:r4");
  End(t, Finished());
  EXPECT_EQ(table_->LastPosition(), 6u);
  EXPECT_EQ(table_->GetBatch("old")->state(), v1::BATCH_STATE_COMPLETE);
}

TEST_F(EpisodeTableTest, RestoreOfACancelledBatchStartsNothing) {
  Snapshot snap;
  snap.batches.push_back(Row(Spec("gone", 2), clock_.Now(), /*cancelled=*/true));
  snap.results.push_back({.seq = 1,
                          .episode_id = "gone:g0:e0",
                          .status = v1::EPISODE_STATUS_CANCELLED,
                          .result = Result(v1::EPISODE_STATUS_CANCELLED).SerializeAsString()});
  snap.runs.push_back({.episode_id = "gone:g0:e1", .attempt = 1, .runs = 1});
  table_->Restore(snap);
  EXPECT_EQ(table_->StartNext(Any), std::nullopt);
  EXPECT_EQ(Counts("gone").cancelled(), 2u);
}

TEST_F(EpisodeTableTest, ExpireDeadlinesEndsQueuedEpisodesAsTimeoutAndStopsRunningOnes) {
  v1::BatchSpec spec = Spec("b", 3);
  ToProto(clock_.Now() + absl::Seconds(10), spec.mutable_deadline());
  ASSERT_THAT(Submit(spec, 1), IsOk());
  const EpisodeTicket running = Start();
  EXPECT_EQ(running.batch_deadline, clock_.Now() + absl::Seconds(10));

  table_->ExpireDeadlines();
  EXPECT_EQ(Counts("b").queued(), 2u);  // not yet
  clock_.Advance(absl::Seconds(11));
  table_->ExpireDeadlines();
  log_.Commit();
  EXPECT_EQ(Counts("b").timeout(), 2u);
  EXPECT_EQ(Counts("b").queued(), 0u);
  EXPECT_EQ(running.control->reason(), StopReason::kDeadline);
  ASSERT_EQ(Results("b").size(), 2u);
  for (const v1::EpisodeResult& r : Results("b")) {
    EXPECT_EQ(r.status(), v1::EPISODE_STATUS_TIMEOUT);
    EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_DEADLINE);
    EXPECT_EQ(FromProto(r.timings().queue()), absl::Seconds(11));
  }
}

TEST_F(EpisodeTableTest, ListBatchesNewestFirstWithPaging) {
  for (const char* id : {"a", "b", "c"}) ASSERT_THAT(Submit(Spec(id, 1), 1), IsOk());
  auto ids = [](const v1::ListBatchesResponse& page) {
    std::vector<std::string> out;
    for (const auto& b : page.batches()) out.push_back(b.batch_id());
    return out;
  };
  v1::ListBatchesRequest req;
  req.set_page_size(2);
  auto first = table_->ListBatches(req);
  ASSERT_THAT(first, IsOk());
  EXPECT_THAT(ids(*first), ElementsAre("c", "b"));
  ASSERT_FALSE(first->next_page_token().empty());
  req.set_page_token(first->next_page_token());
  auto second = table_->ListBatches(req);
  ASSERT_THAT(second, IsOk());
  EXPECT_THAT(ids(*second), ElementsAre("a"));
  EXPECT_EQ(second->next_page_token(), "");

  ASSERT_THAT(Cancel(CancelBatch("b")), IsOk());
  v1::ListBatchesRequest cancelled;
  cancelled.set_state(v1::BATCH_STATE_CANCELLED);
  EXPECT_THAT(table_->ListBatches(cancelled),
              IsOkAndHolds(::testing::Property(&v1::ListBatchesResponse::batches_size, 1)));
  req.set_page_token("bogus");
  EXPECT_THAT(table_->ListBatches(req), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace corral::scheduler
