// corral-scheduler end to end: real binaries on loopback (fake model, proxy, ratelimiter, sandbox hosts,
// scheduler). Every test checks what the trainer sees (one result per episode, the expected rewards and token
// ids) and that nothing leaked (no sandbox on any host, no open proxy session).
#include <set>

#include "gmock/gmock.h"
#include "libs/api/proto_time.h"
#include "libs/http/prometheus_text.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

using ::testing::HasSubstr;

// An agent that takes `seconds` before doing anything (to be caught mid-run).
v1::Task Slow(const std::string& id, int seconds) {
  v1::Task t = Arithmetic(id, 2, 3, v1::RUNNER_AGENT);
  const std::string agent = t.agent().command().argv(2);
  t.mutable_agent()->mutable_command()->set_argv(0, "sh");
  t.mutable_agent()->mutable_command()->set_argv(1, "-c");
  t.mutable_agent()->mutable_command()->set_argv(2, absl::StrCat("sleep ", seconds, "; exec python3 -c \"$AGENT\""));
  (*t.mutable_agent()->mutable_command()->mutable_env())["AGENT"] = agent;
  return t;
}

std::vector<std::string> Ids(const std::vector<v1::EpisodeResult>& results) {
  std::vector<std::string> ids;
  for (const auto& r : results) ids.push_back(r.ids().episode_id());
  return ids;
}

TEST_F(SchedulerFixture, FiveHundredMixedEpisodesEndWithTheExpectedRewardsAndTokenIds) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(/*hosts=*/2, /*capacity=*/16));
  std::vector<v1::Task> tasks;
  for (int i = 0; i < 60; ++i) tasks.push_back(Arithmetic(absl::StrCat("st-", i), i, 100 + i, v1::RUNNER_SINGLE_TURN));
  for (int i = 0; i < 50; ++i) tasks.push_back(Arithmetic(absl::StrCat("tl-", i), i, 7 * i, v1::RUNNER_TOOL_LOOP));
  for (int i = 0; i < 15; ++i) tasks.push_back(Arithmetic(absl::StrCat("ag-", i), 3 * i, 11, v1::RUNNER_AGENT));
  v1::BatchSpec spec;
  spec.set_batch_id("mixed");
  spec.set_group_size(4);
  spec.set_seed(99);
  auto batch = Submit(spec, tasks);
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->counts().total(), 500u);

  auto results = Results("mixed", /*whole_groups=*/true);
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 500u);
  std::set<std::string> seen;
  for (const auto& r : *results) {
    SCOPED_TRACE(r.ids().episode_id() + " " + r.failure_message());
    EXPECT_TRUE(seen.insert(r.ids().episode_id()).second) << "delivered twice in one stream";
    ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED);
    EXPECT_EQ(r.reward(), ModelIsWrong(r.ids().seed()) ? 0.0 : 1.0);
    ASSERT_GE(r.trajectory().branches_size(), 1);
    const v1::Branch& branch = r.trajectory().branches(0);
    EXPECT_FALSE(branch.token_ids().empty());
    EXPECT_EQ(branch.token_ids().size(), branch.token_generated().size());
    const v1::Task& task = tasks[r.ids().group_index()];
    EXPECT_EQ(r.ids().task_id(), task.id());
    if (task.runner() == v1::RUNNER_TOOL_LOOP) {
      EXPECT_EQ(r.llm_calls(), 2u);
      EXPECT_EQ(r.tool_calls(), 1u);
      EXPECT_EQ(branch.messages_size(), 4);  // user, assistant (tool call), tool, assistant
      EXPECT_TRUE(r.protections().network_namespace());
    } else if (task.runner() == v1::RUNNER_AGENT) {
      EXPECT_EQ(r.trajectory().call_count(), 1u);
      EXPECT_EQ(r.protections().network_policy(), v1::NETWORK_POLICY_PROXY_ONLY);
      EXPECT_FALSE(r.sandbox_id().empty());
    } else {
      EXPECT_TRUE(r.sandbox_id().empty());
    }
  }
  // Whole groups: each group's results arrive consecutively.
  for (size_t i = 0; i < results->size(); i += 4) {
    for (size_t j = 1; j < 4; ++j) EXPECT_EQ((*results)[i + j].ids().group_id(), (*results)[i].ids().group_id());
  }
  auto acked = Ack(Ids(*results));
  ASSERT_THAT(acked, IsOk());
  EXPECT_EQ(*acked, 500u);
  auto done = GetBatch("mixed");
  ASSERT_THAT(done, IsOk());
  EXPECT_EQ(done->state(), v1::BATCH_STATE_COMPLETE);
  EXPECT_EQ(done->counts().finished(), 500u);
  EXPECT_EQ(done->counts().acked(), 500u);
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(SchedulerFixture, BadInputNamesTheTaskAndFieldAndSubmitsNothing) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  v1::BatchSpec spec;
  spec.set_batch_id("bad");
  v1::Task ok = Arithmetic("fine", 1, 2, v1::RUNNER_SINGLE_TURN);
  v1::Task no_tools = Arithmetic("needs-tools", 1, 2, v1::RUNNER_TOOL_LOOP);
  no_tools.mutable_tool_loop()->clear_tools();
  auto refused = Submit(spec, {ok, no_tools});
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(refused.status().message(), HasSubstr("task 'needs-tools': tool_loop.tools"));
  EXPECT_THAT(GetBatch("bad"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Submit(spec, {}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Submit(spec, {ok, ok}), StatusIs(absl::StatusCode::kInvalidArgument));

  // Idempotent by batch id; other content under the same id is refused.
  spec.set_seed(5);
  auto first = Submit(spec, {ok});
  ASSERT_THAT(first, IsOk());
  auto again = Submit(spec, {ok});
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->create_time().seconds(), first->create_time().seconds());
  EXPECT_THAT(Submit(spec, {Arithmetic("other", 1, 2, v1::RUNNER_SINGLE_TURN)}),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(Results("no-such-batch"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Ack({"bad:g9:e9"}), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SchedulerFixture, TheSameSeedGivesTheSameTaskAndSeedPerEpisode) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  std::vector<v1::Task> tasks;
  for (int i = 0; i < 3; ++i) tasks.push_back(Arithmetic(absl::StrCat("t", i), i, i, v1::RUNNER_SINGLE_TURN));
  std::map<std::string, std::pair<std::string, uint64_t>> by_position[2];
  for (int run = 0; run < 2; ++run) {
    v1::BatchSpec spec;
    spec.set_batch_id(absl::StrCat("det-", run));
    spec.set_group_size(3);
    spec.set_seed(1234);
    ASSERT_THAT(Submit(spec, tasks), IsOk());
    auto results = Results(spec.batch_id());
    ASSERT_THAT(results, IsOk());
    ASSERT_EQ(results->size(), 9u);
    for (const auto& r : *results) {
      by_position[run][absl::StrCat(r.ids().group_index(), "/", r.ids().index_in_group())] = {r.ids().task_id(),
                                                                                              r.ids().seed()};
    }
  }
  EXPECT_EQ(by_position[0], by_position[1]);
  std::set<uint64_t> seeds;
  for (const auto& [pos, v] : by_position[0]) seeds.insert(v.second);
  EXPECT_EQ(seeds.size(), 9u);
}

TEST_F(SchedulerFixture, EveryLlmCallTheSchedulerMakesHoldsAPermitOfTheLlmLimitForItsModel) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8, {"--llm-limit=llm"}));
  std::vector<v1::Task> tasks;
  for (int i = 0; i < 4; ++i) tasks.push_back(Arithmetic(absl::StrCat("s", i), i, 2, v1::RUNNER_SINGLE_TURN));
  for (int i = 0; i < 4; ++i) tasks.push_back(Arithmetic(absl::StrCat("t", i), i, 3, v1::RUNNER_TOOL_LOOP));
  v1::BatchSpec spec;
  spec.set_batch_id("llm-limited");
  spec.set_group_size(2);
  ASSERT_THAT(Submit(spec, tasks), IsOk());
  auto results = Results("llm-limited");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 16u);
  uint64_t calls = 0;
  for (const auto& r : *results) {
    EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
    calls += r.llm_calls();
  }
  EXPECT_EQ(calls, 8u * 1 + 8u * 2);  // single_turn: one call; tool_loop: the tool call and the answer
  auto text = http::HttpGet(limiter_->ready.metrics, "/metrics");
  ASSERT_THAT(text, IsOk());
  auto metrics = http::ParsePrometheusText(*text);
  ASSERT_THAT(metrics, IsOk());
  // One grant of llm/fake-model per call, each given back (the limit allows 2 at once).
  EXPECT_THAT(metrics->Value("corral_ratelimiter_requests_total", {{"limit", "llm"}, {"outcome", "granted"}}),
              IsOkAndHolds(static_cast<double>(calls)));
  EXPECT_THAT(metrics->Value("corral_ratelimiter_permits_in_use", {{"limit", "llm"}}), IsOkAndHolds(0.0));
}

TEST_F(SchedulerFixture, AHungAgentEndsTimeoutWithinItsTimeoutAndLeavesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  v1::Task hung = Slow("hung", 1000);
  hung.mutable_timeouts()->mutable_agent()->set_seconds(2);
  v1::BatchSpec spec;
  spec.set_batch_id("hung");
  ASSERT_THAT(Submit(spec, {hung}), IsOk());
  auto results = Results("hung");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 1u);
  const v1::EpisodeResult& r = results->front();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_TIMEOUT) << r.failure_message();
  EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_AGENT);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_AGENT);
  EXPECT_LT(FromProto(r.timings().agent()), absl::Seconds(4));
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(SchedulerFixture, CancelEndsQueuedAndRunningEpisodesCancelledAndCleansUp) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  std::vector<v1::Task> tasks;
  for (int i = 0; i < 3; ++i) tasks.push_back(Slow(absl::StrCat("slow", i), 60));
  v1::BatchSpec spec;
  spec.set_batch_id("cancel");
  spec.set_group_size(4);  // 12 episodes, 4 fit at once
  ASSERT_THAT(Submit(spec, tasks), IsOk());
  ASSERT_TRUE(testing::WaitUntil([&] { return LiveSandboxes(0) == 4; }, absl::Seconds(30)));
  grpc::ClientContext ctx;
  Prepare(ctx);
  v1::CancelRequest cancel;
  cancel.set_batch_id("cancel");
  cancel.set_reason("test");
  v1::CancelResponse resp;
  const grpc::Status cancelled = scheduler_stub_->Cancel(&ctx, cancel, &resp);
  ASSERT_TRUE(cancelled.ok()) << cancelled.error_code() << ": " << cancelled.error_message();
  EXPECT_EQ(resp.cancelled(), 12u);
  auto results = Results("cancel");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 12u);
  for (const auto& r : *results) {
    EXPECT_EQ(r.status(), v1::EPISODE_STATUS_CANCELLED);
    EXPECT_THAT(r.failure_message(), HasSubstr("test"));
  }
  auto batch = GetBatch("cancel");
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->state(), v1::BATCH_STATE_CANCELLED);
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(SchedulerFixture, KillingTheSchedulerMidBatchLosesNothingAndRedeliversOnlyUnacked) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  std::vector<v1::Task> tasks;
  for (int i = 0; i < 4; ++i) tasks.push_back(Arithmetic(absl::StrCat("quick", i), i, 1, v1::RUNNER_SINGLE_TURN));
  for (int i = 0; i < 4; ++i) tasks.push_back(Slow(absl::StrCat("slow", i), 3));
  v1::BatchSpec spec;
  spec.set_batch_id("crash");
  spec.set_group_size(2);
  ASSERT_THAT(Submit(spec, tasks), IsOk());
  // The quick episodes end first; acknowledge what is there, then kill -9 while the slow ones run.
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        auto b = GetBatch("crash");
        return b.ok() && b->counts().finished() >= 8 && b->counts().running() > 0;
      },
      absl::Seconds(60)));
  grpc::ClientContext ctx;
  Prepare(ctx);
  v1::StreamResultsRequest req;
  req.set_batch_id("crash");
  auto reader = scheduler_stub_->StreamResults(&ctx, req);
  std::vector<std::string> acked;
  v1::StreamResultsResponse msg;
  while (acked.size() < 8 && reader->Read(&msg)) {
    if (msg.has_result()) acked.push_back(msg.result().ids().episode_id());
  }
  ctx.TryCancel();
  (void)reader->Finish();
  ASSERT_THAT(Ack(acked), IsOk());
  scheduler_->process.Signal(SIGKILL);
  ASSERT_THAT(scheduler_->process.Wait(absl::Seconds(10)), IsOk());
  scheduler_.reset();
  ASSERT_NO_FATAL_FAILURE(StartScheduler());

  auto results = Results("crash");
  ASSERT_THAT(results, IsOk());
  const std::vector<std::string> ids = Ids(*results);
  const std::set<std::string> redelivered(ids.begin(), ids.end());
  for (const auto& id : acked) EXPECT_EQ(redelivered.count(id), 0u) << id << " was acknowledged";
  EXPECT_EQ(results->size() + acked.size(), 16u);
  for (const auto& r : *results) EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  auto batch = GetBatch("crash");
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->counts().finished(), 16u);
  ASSERT_THAT(Ack(Ids(*results)), IsOk());
  EXPECT_TRUE(NothingLeaked());
}

}  // namespace
}  // namespace corral
