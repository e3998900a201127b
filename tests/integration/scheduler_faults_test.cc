// corral-scheduler under faults, with real binaries: a sandbox host killed -9 mid-batch, each service killed -9
// and restarted, a host drained. Each asserts that every episode ends exactly once with
// the reward it should have and that nothing is left behind.
#include <functional>
#include <set>

#include "gmock/gmock.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

// A tool_loop task whose python tool first sleeps `sleep_s` (so the batch is caught mid-run).
v1::Task SlowToolLoop(const std::string& id, int a, int b, double sleep_s) {
  v1::Task t;
  t.set_id(id);
  t.set_prompt(absl::StrCat("What is ", a, " + ", b, "?"));
  t.set_answer(absl::StrCat(a + b));
  t.set_runner(v1::RUNNER_TOOL_LOOP);
  t.mutable_llm()->set_seed_sampling(true);
  t.mutable_reward()->set_function(v1::REWARD_FUNCTION_NUMERIC);
  v1::ToolSpec* tool = t.mutable_tool_loop()->add_tools();
  tool->set_name("python");
  tool->set_kind(v1::TOOL_KIND_CODE_INTERPRETER);
  // The sleep rides in the sandbox's environment: every python the tool starts imports it via sitecustomize.
  v1::InlineFile* f = t.mutable_environment()->add_files();
  f->set_path("workspace/sitecustomize.py");
  f->set_content(absl::StrCat("import time\ntime.sleep(", sleep_s, ")\n"));
  (*t.mutable_environment()->mutable_env())["PYTHONPATH"] = "/workspace";
  return t;
}

std::vector<v1::Task> Tasks(int n, double sleep_s) {
  std::vector<v1::Task> tasks;
  for (int i = 0; i < n; ++i) tasks.push_back(SlowToolLoop(absl::StrCat("t", i), i, 10, sleep_s));
  return tasks;
}

// Every episode of the batch delivered once, FINISHED, with the reward the model's seed rule gives.
void ExpectAllFinishedCorrectly(const std::vector<v1::EpisodeResult>& results, size_t expected) {
  ASSERT_EQ(results.size(), expected);
  std::set<std::string> ids;
  for (const auto& r : results) {
    SCOPED_TRACE(r.ids().episode_id() + ": " + r.failure_message());
    EXPECT_TRUE(ids.insert(r.ids().episode_id()).second);
    ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED);
    EXPECT_EQ(r.reward(), ModelIsWrong(r.ids().seed()) ? 0.0 : 1.0);
  }
}

TEST_F(SchedulerFixture, KillingOneOfTwoHostsRetriesItsEpisodesOnTheOther) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(/*hosts=*/2, /*capacity=*/6));
  v1::BatchSpec spec;
  spec.set_batch_id("host-kill");
  spec.set_group_size(4);
  ASSERT_THAT(Submit(spec, Tasks(6, 1.5)), IsOk());
  // Episodes running there, not sandboxes (a warm or a finishing one would count too); each takes 1.5 s, so
  // none ends between this look and the kill.
  int running_there = 0;
  ASSERT_TRUE(testing::WaitUntil([&] { return (running_there = RunningOn("it-1")) >= 3; }, absl::Seconds(30)));
  Kill(hosts_[1].service);
  auto results = Results("host-kill");
  ASSERT_THAT(results, IsOk());
  ExpectAllFinishedCorrectly(*results, 24);
  int retried = 0;
  for (const auto& r : *results) {
    EXPECT_EQ(r.host_id(), "it-0") << r.ids().episode_id() << " ran on the dead host";
    retried += r.ids().attempt() > 1;
  }
  EXPECT_GE(retried, running_there);
  auto batch = GetBatch("host-kill");
  ASSERT_THAT(batch, IsOk());
  EXPECT_GE(batch->counts().retries(), static_cast<uint32_t>(running_there));
  EXPECT_TRUE(NothingLeaked());
}

// Each service killed -9 mid-batch and restarted a second later, with the default attempts (3) and back-off:
// every episode ends FINISHED — the restart costs time, not episodes — and nothing is left behind.
class RestartTest : public SchedulerFixture {
 protected:
  static constexpr absl::Duration kOutage = absl::Seconds(1);

  // A cluster with the default retries, running 4 groups of 4 tool_loop episodes of a second each; returns once
  // `busy` says they are under way.
  void StartBatch(const std::string& batch_id, const std::function<bool()>& busy) {
    ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8, {"--retry-backoff=2s"}));
    v1::BatchSpec spec;
    spec.set_batch_id(batch_id);
    spec.set_group_size(4);
    ASSERT_THAT(Submit(spec, Tasks(4, 1.0)), IsOk());
    ASSERT_TRUE(testing::WaitUntil(busy, absl::Seconds(30)));
  }
  void ExpectEveryEpisodeFinished(const std::string& batch_id) {
    auto results = Results(batch_id);
    ASSERT_THAT(results, IsOk());
    ExpectAllFinishedCorrectly(*results, 16);
    EXPECT_TRUE(NothingLeaked());
  }
};

TEST_F(RestartTest, KillingTheProxyMidBatchAndRestartingItCostsNoEpisode) {
  ASSERT_NO_FATAL_FAILURE(StartBatch("proxy-kill", [&] { return LiveSandboxes(0) >= 4; }));
  const std::string grpc = proxy_->ready.grpc, http = proxy_->ready.http;
  Kill(proxy_);
  absl::SleepFor(kOutage);  // the outage itself, not a wait for an event
  ASSERT_NO_FATAL_FAILURE(StartProxy(grpc, http));
  ExpectEveryEpisodeFinished("proxy-kill");
}

TEST_F(RestartTest, KillingTheRatelimiterMidBatchAndRestartingItCostsNoEpisode) {
  ASSERT_NO_FATAL_FAILURE(StartBatch("limiter-restart", [&] { return LiveSandboxes(0) >= 4; }));
  const std::string grpc = limiter_->ready.grpc;
  Kill(limiter_);
  absl::SleepFor(kOutage);
  ASSERT_NO_FATAL_FAILURE(StartLimiter(grpc));
  ExpectEveryEpisodeFinished("limiter-restart");
  auto batch = GetBatch("limiter-restart");
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->counts().retries(), 0u) << "tool permits asked during the outage waited for the limiter";
}

TEST_F(RestartTest, KillingTheOnlySandboxHostMidBatchAndRestartingItCostsNoEpisodeAndLeavesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartBatch("host-restart", [&] { return RunningOn("it-0") >= 4; }));
  const std::string grpc = hosts_[0].service->ready.grpc;
  Kill(hosts_[0].service);
  absl::SleepFor(kOutage);
  ASSERT_NO_FATAL_FAILURE(RestartHost(0, grpc));
  EXPECT_THAT(hosts_[0].service->process.Log(), ::testing::HasSubstr("removed what a previous run left of"));
  ExpectEveryEpisodeFinished("host-restart");
  // Teardowns finish in the background once a sandbox is deleted.
  EXPECT_TRUE(testing::WaitUntil([&] { return static_cast<bool>(NothingOnTheMachine(0)); }, absl::Seconds(30)))
      << NothingOnTheMachine(0).message();
}

TEST_F(SchedulerFixture, DrainingAHostMovesItsEpisodesAndResumeUndoesIt) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(/*hosts=*/2, /*capacity=*/4));
  v1::BatchSpec spec;
  spec.set_batch_id("drain");
  spec.set_group_size(4);
  ASSERT_THAT(Submit(spec, Tasks(4, 2.0)), IsOk());
  ASSERT_TRUE(testing::WaitUntil([&] { return LiveSandboxes(0) >= 2; }, absl::Seconds(30)));
  grpc::ClientContext ctx;
  Prepare(ctx, absl::Seconds(60));
  v1::DrainRequest drain;
  drain.set_host("it-0");
  drain.mutable_grace()->set_nanos(100'000'000);
  v1::DrainResponse drained;
  ASSERT_TRUE(scheduler_stub_->Drain(&ctx, drain, &drained).ok());
  EXPECT_GE(drained.requeued(), 1u);
  EXPECT_EQ(LiveSandboxes(0), 0);  // Drain returns once nothing runs there

  grpc::ClientContext lctx;
  Prepare(lctx);
  v1::ListHostsResponse hosts;
  ASSERT_TRUE(scheduler_stub_->ListHosts(&lctx, v1::ListHostsRequest(), &hosts).ok());
  ASSERT_EQ(hosts.hosts_size(), 2);
  std::map<std::string, v1::HostState> states;
  for (const auto& h : hosts.hosts()) states[h.host_id()] = h.state();
  EXPECT_EQ(states["it-0"], v1::HOST_STATE_DRAINING);
  EXPECT_EQ(states["it-1"], v1::HOST_STATE_HEALTHY);

  auto results = Results("drain");
  ASSERT_THAT(results, IsOk());
  ExpectAllFinishedCorrectly(*results, 16);
  for (const auto& r : *results) EXPECT_EQ(r.host_id(), "it-1");
  auto batch = GetBatch("drain");
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->counts().retries(), 0u) << "a drain is not an attempt";

  grpc::ClientContext rctx;
  Prepare(rctx);
  drain.set_resume(true);
  ASSERT_TRUE(scheduler_stub_->Drain(&rctx, drain, &drained).ok());
  grpc::ClientContext l2;
  Prepare(l2);
  ASSERT_TRUE(scheduler_stub_->ListHosts(&l2, v1::ListHostsRequest(), &hosts).ok());
  for (const auto& h : hosts.hosts()) EXPECT_EQ(h.state(), v1::HOST_STATE_HEALTHY) << h.host_id();
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(SchedulerFixture, HostsFoundThroughDnsRunEpisodes) {
  use_dns_ = true;
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  v1::BatchSpec spec;
  spec.set_batch_id("dns");
  spec.set_group_size(2);
  ASSERT_THAT(Submit(spec, Tasks(2, 0)), IsOk());
  auto results = Results("dns");
  ASSERT_THAT(results, IsOk());
  ExpectAllFinishedCorrectly(*results, 4);
  grpc::ClientContext ctx;
  Prepare(ctx);
  v1::ListHostsResponse hosts;
  ASSERT_TRUE(scheduler_stub_->ListHosts(&ctx, v1::ListHostsRequest(), &hosts).ok());
  bool healthy_dns_host = false;
  for (const auto& h : hosts.hosts()) {
    healthy_dns_host |=
        h.source() == v1::HOST_SOURCE_DNS && h.state() == v1::HOST_STATE_HEALTHY && h.host_id() == "it-0";
  }
  EXPECT_TRUE(healthy_dns_host);
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(SchedulerFixture, DrainingTheSchedulerRefusesSubmitUntilResumed) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  grpc::ClientContext ctx;
  Prepare(ctx);
  v1::DrainRequest drain;
  v1::DrainResponse drained;
  ASSERT_TRUE(scheduler_stub_->Drain(&ctx, drain, &drained).ok());
  v1::BatchSpec spec;
  spec.set_batch_id("after-drain");
  EXPECT_THAT(Submit(spec, Tasks(1, 0)), StatusIs(absl::StatusCode::kFailedPrecondition));
  grpc::ClientContext rctx;
  Prepare(rctx);
  drain.set_resume(true);
  ASSERT_TRUE(scheduler_stub_->Drain(&rctx, drain, &drained).ok());
  ASSERT_THAT(Submit(spec, Tasks(1, 0)), IsOk());
  auto results = Results("after-drain");
  ASSERT_THAT(results, IsOk());
  ExpectAllFinishedCorrectly(*results, 1);
}

}  // namespace
}  // namespace corral
