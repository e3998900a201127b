// Asynchronous RL through the scheduler, with real binaries on loopback: the policy version and generation
// pauses a trainer sets on the scheduler reach the proxy and every episode's result, survive a proxy restart
// (the scheduler pushes them again) and a scheduler restart (journaled), and bad requests change nothing.
#include "gmock/gmock.h"
#include "libs/http/prometheus_text.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

using ::testing::HasSubstr;

v1::Task Sum(const std::string& id, int a, int b) {
  v1::Task t;
  t.set_id(id);
  t.set_prompt(absl::StrCat("What is ", a, " + ", b, "?"));
  t.set_answer(absl::StrCat(a + b));
  t.set_runner(v1::RUNNER_SINGLE_TURN);
  t.mutable_reward()->set_function(v1::REWARD_FUNCTION_GSM8K);
  return t;
}

class SchedulerPolicyTest : public SchedulerFixture {
 protected:
  // One unary call on the scheduler with the cluster token.
  template <class Request, class Response>
  absl::StatusOr<Response> Rpc(grpc::Status (v1::Scheduler::Stub::*method)(grpc::ClientContext*, const Request&,
                                                                           Response*),
                               const Request& request) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    Response response;
    grpc::Status s = ((*scheduler_stub_).*method)(&ctx, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  }
  absl::StatusOr<v1::UpdatePolicyResponse> UpdatePolicy(int64_t version) {
    v1::UpdatePolicyRequest req;
    req.set_version(version);
    return Rpc(&v1::Scheduler::Stub::UpdatePolicy, req);
  }
  absl::StatusOr<v1::PauseGenerationResponse> Pause(v1::PauseMode mode) {
    v1::PauseGenerationRequest req;
    req.set_mode(mode);
    return Rpc(&v1::Scheduler::Stub::PauseGeneration, req);
  }
  absl::StatusOr<v1::ResumeGenerationResponse> Resume(int64_t version) {
    v1::ResumeGenerationRequest req;
    req.set_version(version);
    return Rpc(&v1::Scheduler::Stub::ResumeGeneration, req);
  }
  // A sample of the proxy's metrics (-1 when it cannot be read).
  double ProxyMetric(const std::string& name, const std::map<std::string, std::string>& labels = {}) {
    auto text = http::HttpGet(proxy_->ready.metrics, "/metrics");
    if (!text.ok()) return -1;
    auto exposition = http::ParsePrometheusText(*text);
    if (!exposition.ok()) return -1;
    return exposition->Value(name, labels).value_or(-1);
  }
  // Whether the proxy's metric reaches `want` within 15 s (a restarted proxy is told by the scheduler's re-push).
  bool ProxyMetricBecomes(const std::string& name, double want, const std::map<std::string, std::string>& labels = {}) {
    return testing::WaitUntil([&] { return ProxyMetric(name, labels) == want; }, absl::Seconds(15));
  }
  void RestartProxy() {
    const std::string grpc = proxy_->ready.grpc, http = proxy_->ready.http;
    Kill(proxy_);
    ASSERT_NO_FATAL_FAILURE(StartProxy(grpc, http));
  }
};

TEST_F(SchedulerPolicyTest, TheVersionAndPausesReachEveryEpisodeAndOutliveProxyAndSchedulerRestarts) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8, {"--policy-sync-interval=200ms"}));
  auto updated = UpdatePolicy(3);
  ASSERT_THAT(updated, IsOk());
  EXPECT_EQ(updated->previous_version(), 0);
  EXPECT_EQ(updated->replicas(), 1u);
  EXPECT_THAT(UpdatePolicy(2), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("below the current version 3")));
  EXPECT_THAT(Pause(static_cast<v1::PauseMode>(7)), StatusIs(absl::StatusCode::kInvalidArgument));

  v1::BatchSpec spec;
  spec.set_batch_id("v3");
  spec.set_group_size(2);
  ASSERT_THAT(Submit(spec, {Sum("a", 1, 2), Sum("b", 3, 4)}), IsOk());
  auto results = Results("v3");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 4u);
  for (const auto& r : *results) {
    EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
    EXPECT_EQ(r.first_policy_version(), 3);
    EXPECT_EQ(r.last_policy_version(), 3);
  }

  // A proxy restarted from scratch (version 0) gets the version again from the scheduler.
  ASSERT_NO_FATAL_FAILURE(RestartProxy());
  EXPECT_TRUE(ProxyMetricBecomes("corral_proxy_policy_version", 3)) << ProxyMetric("corral_proxy_policy_version");

  // Paused: a restarted proxy is paused again, and an episode's call waits for the resume.
  auto paused = Pause(v1::PAUSE_MODE_DRAIN);
  ASSERT_THAT(paused, IsOk());
  EXPECT_EQ(paused->replicas(), 1u);
  ASSERT_NO_FATAL_FAILURE(RestartProxy());
  EXPECT_TRUE(ProxyMetricBecomes("corral_proxy_paused", 1));
  spec.set_batch_id("v4");
  spec.set_group_size(1);
  ASSERT_THAT(Submit(spec, {Sum("c", 5, 6)}), IsOk());
  // The episode has started and its call waits at the proxy (nothing finishes while paused).
  EXPECT_TRUE(ProxyMetricBecomes("corral_proxy_paused_calls_total", 1, {{"outcome", "held"}}));
  auto batch = GetBatch("v4");
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->counts().finished(), 0u);
  auto resumed = Resume(4);
  ASSERT_THAT(resumed, IsOk());
  EXPECT_EQ(resumed->version(), 4);
  EXPECT_EQ(resumed->released(), 1u);
  results = Results("v4");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 1u);
  EXPECT_EQ((*results)[0].status(), v1::EPISODE_STATUS_FINISHED) << (*results)[0].failure_message();
  EXPECT_EQ((*results)[0].first_policy_version(), 4);

  // The scheduler's state is journaled: after a restart the version is still 4.
  Stop(*scheduler_);
  ASSERT_NO_FATAL_FAILURE(StartScheduler());
  EXPECT_THAT(UpdatePolicy(3), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("below the current version 4")));
  // And a proxy restarted from scratch gets version 4 from the restarted scheduler.
  ASSERT_NO_FATAL_FAILURE(RestartProxy());
  EXPECT_TRUE(ProxyMetricBecomes("corral_proxy_policy_version", 4)) << ProxyMetric("corral_proxy_policy_version");
}

}  // namespace
}  // namespace corral
