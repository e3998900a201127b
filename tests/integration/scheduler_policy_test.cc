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
  absl::StatusOr<v1::UpdatePolicyResponse> UpdatePolicy(int64_t version) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::UpdatePolicyRequest req;
    req.set_version(version);
    v1::UpdatePolicyResponse resp;
    grpc::Status s = scheduler_stub_->UpdatePolicy(&ctx, req, &resp);
    if (!s.ok()) return FromGrpcStatus(s);
    return resp;
  }
  absl::StatusOr<v1::PauseGenerationResponse> Pause(v1::PauseMode mode) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::PauseGenerationRequest req;
    req.set_mode(mode);
    v1::PauseGenerationResponse resp;
    grpc::Status s = scheduler_stub_->PauseGeneration(&ctx, req, &resp);
    if (!s.ok()) return FromGrpcStatus(s);
    return resp;
  }
  absl::StatusOr<v1::ResumeGenerationResponse> Resume(int64_t version) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::ResumeGenerationRequest req;
    req.set_version(version);
    v1::ResumeGenerationResponse resp;
    grpc::Status s = scheduler_stub_->ResumeGeneration(&ctx, req, &resp);
    if (!s.ok()) return FromGrpcStatus(s);
    return resp;
  }
  // The proxy's gauge `name`, once it reads `want` (within 15 s); the last value read otherwise.
  double AwaitProxyGauge(const std::string& name, double want) {
    double last = -1;
    for (const absl::Time until = absl::Now() + absl::Seconds(15); absl::Now() < until;) {
      auto text = http::HttpGet(proxy_->ready.metrics, "/metrics");
      if (text.ok()) {
        auto value = http::ParsePrometheusText(*text).value().Value(name);
        if (value.ok()) last = *value;
        if (last == want) return last;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return last;
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
  EXPECT_EQ(AwaitProxyGauge("corral_proxy_policy_version", 3), 3);

  // Paused: a restarted proxy is paused again, and an episode's call waits for the resume.
  auto paused = Pause(v1::PAUSE_MODE_DRAIN);
  ASSERT_THAT(paused, IsOk());
  EXPECT_EQ(paused->replicas(), 1u);
  ASSERT_NO_FATAL_FAILURE(RestartProxy());
  EXPECT_EQ(AwaitProxyGauge("corral_proxy_paused", 1), 1);
  spec.set_batch_id("v4");
  spec.set_group_size(1);
  ASSERT_THAT(Submit(spec, {Sum("c", 5, 6)}), IsOk());
  // The episode has started and its call waits at the proxy (nothing finishes while paused).
  for (const absl::Time until = absl::Now() + absl::Seconds(15); absl::Now() < until;) {
    auto held = http::HttpGet(proxy_->ready.metrics, "/metrics");
    if (held.ok() && http::ParsePrometheusText(*held).value().Value("corral_proxy_paused_calls_total",
                                                                    {{"outcome", "held"}}).value_or(0) >= 1) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
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
  EXPECT_EQ(AwaitProxyGauge("corral_proxy_paused", 0), 0);
}

}  // namespace
}  // namespace corral
