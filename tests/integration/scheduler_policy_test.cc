// Asynchronous RL through the scheduler, with real binaries on loopback: the policy version and generation
// pauses a trainer sets on the scheduler reach the proxy and every episode's result, survive a proxy restart
// (the scheduler pushes them again) and a scheduler restart (journaled), and bad requests change nothing.
#include <map>
#include <set>

#include "gmock/gmock.h"
#include "libs/http/prometheus_text.h"
#include "services/scheduler/table/submission.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

using ::testing::HasSubstr;

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
  // A sample of the proxy's (or the scheduler's) metrics (-1 when it cannot be read).
  double ProxyMetric(const std::string& name, const std::map<std::string, std::string>& labels = {},
                     const testing::RunningService* service = nullptr) {
    auto text = http::HttpGet((service != nullptr ? *service : *proxy_).ready.metrics, "/metrics");
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
  EXPECT_THAT(UpdatePolicy(2),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("below the current version 3")));
  EXPECT_THAT(Pause(static_cast<v1::PauseMode>(7)), StatusIs(absl::StatusCode::kInvalidArgument));

  v1::BatchSpec spec;
  spec.set_batch_id("v3");
  spec.set_group_size(2);
  ASSERT_THAT(
      Submit(spec, {Arithmetic("a", 1, 2, v1::RUNNER_SINGLE_TURN), Arithmetic("b", 3, 4, v1::RUNNER_SINGLE_TURN)}),
      IsOk());
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
  ASSERT_THAT(Submit(spec, {Arithmetic("c", 5, 6, v1::RUNNER_SINGLE_TURN)}), IsOk());
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
  EXPECT_THAT(UpdatePolicy(3),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("below the current version 4")));
  // And a proxy restarted from scratch gets version 4 from the restarted scheduler.
  ASSERT_NO_FATAL_FAILURE(RestartProxy());
  EXPECT_TRUE(ProxyMetricBecomes("corral_proxy_policy_version", 4)) << ProxyMetric("corral_proxy_policy_version");
}

// Whether group g of a batch with `seed` passes drop_equal_rewards: the fake model is wrong for one sampling seed
// in four (with seed_sampling, each episode's calls use the episode's seed).
bool GroupPasses(uint64_t seed, uint32_t g, uint32_t group_size) {
  std::set<bool> wrong;
  for (uint32_t i = 0; i < group_size; ++i) wrong.insert(ModelIsWrong(scheduler::EpisodeSeed(seed, g, i)));
  return wrong.size() > 1;
}

TEST_F(SchedulerPolicyTest, DynamicSamplingDeliversTheTargetGroupsAndReportsTheFilteredOnes) {
  // One group's episodes at a time (single-turn episodes hold no sandbox slot): groups are decided in order, so
  // the groups opened follow the pass rate of the seed's groups, not the order in which a loaded machine ends them
  // (four filtered decisions before the first pass would, rightly, open every group).
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8, {"--max-concurrent-episodes=4"}));
  // A seed whose first two groups are filtered, so that the target needs over-sampling.
  uint64_t seed = 1;
  while (GroupPasses(seed, 0, 4) || GroupPasses(seed, 1, 4)) ++seed;
  v1::BatchSpec spec;
  spec.set_batch_id("dapo");
  spec.set_group_size(4);
  spec.set_seed(seed);
  spec.mutable_group_filter()->set_drop_equal_rewards(true);
  spec.set_target_groups(3);
  std::vector<v1::Task> tasks;
  for (int i = 0; i < 16; ++i) {
    tasks.push_back(Arithmetic(absl::StrCat("t", i), i, i + 1, v1::RUNNER_SINGLE_TURN));
  }
  ASSERT_THAT(Submit(spec, tasks), IsOk());
  auto results = Results("dapo", /*whole_groups=*/true);
  ASSERT_THAT(results, IsOk());
  // Results come group by group; a group is all FINISHED (passed) or all FILTERED (its rewards were equal:
  // the fake model is wrong for one sampling seed in four).
  std::map<uint32_t, std::vector<v1::EpisodeResult>> groups;
  for (const auto& r : *results) groups[r.ids().group_index()].push_back(r);
  int passed = 0, filtered = 0;
  for (const auto& [g, members] : groups) {
    ASSERT_EQ(members.size(), 4u) << "group " << g;
    std::set<double> rewards;
    for (const auto& m : members) rewards.insert(m.reward());
    EXPECT_EQ(members[0].status() == v1::EPISODE_STATUS_FINISHED, GroupPasses(seed, g, 4)) << "group " << g;
    if (members[0].status() == v1::EPISODE_STATUS_FINISHED) {
      ++passed;
      EXPECT_GT(rewards.size(), 1u) << "group " << g;
      for (const auto& m : members) EXPECT_EQ(m.status(), v1::EPISODE_STATUS_FINISHED) << m.failure_message();
    } else {
      ++filtered;
      EXPECT_EQ(rewards.size(), 1u) << "group " << g;
      for (const auto& m : members) {
        EXPECT_EQ(m.status(), v1::EPISODE_STATUS_FILTERED);
        EXPECT_THAT(m.failure_message(), HasSubstr("rewards all equal"));
      }
    }
  }
  EXPECT_EQ(passed, 3);
  EXPECT_GE(filtered, 2);
  grpc::ClientContext ctx;
  Prepare(ctx);
  v1::GetBatchRequest req;
  req.set_batch_id("dapo");
  req.set_task_stats(true);
  v1::Batch batch;
  ASSERT_TRUE(scheduler_stub_->GetBatch(&ctx, req, &batch).ok());
  EXPECT_EQ(batch.state(), v1::BATCH_STATE_COMPLETE);
  EXPECT_EQ(batch.groups().passed(), 3u);
  EXPECT_EQ(batch.groups().filtered(), static_cast<uint32_t>(filtered));
  EXPECT_EQ(batch.counts().filtered(), 4u * filtered);
  // Decided groups were started; surplus ones may have been opened without starting.
  EXPECT_EQ(batch.groups().passed() + batch.groups().filtered(), static_cast<uint32_t>(passed + filtered));
  EXPECT_LE(batch.groups().passed() + batch.groups().filtered(), batch.groups().started());
  EXPECT_LE(batch.groups().started(), batch.groups().passed() + batch.groups().filtered() + batch.groups().surplus());
  EXPECT_LT(batch.groups().started(), 16u);  // over-sampling stopped at the target
  EXPECT_GE(batch.task_stats_size(), static_cast<int>(batch.groups().started()));  // opened ones, surplus too
  std::map<std::string, bool> verdicts;                                            // task -> passed, from the results
  for (const auto& [g, members] : groups)
    verdicts[members[0].ids().task_id()] = members[0].status() == v1::EPISODE_STATUS_FINISHED;
  int judged = 0;
  for (const v1::TaskStats& t : batch.task_stats()) {
    if (!t.has_passed()) continue;  // surplus: no verdict
    ++judged;
    ASSERT_TRUE(verdicts.count(t.task_id())) << t.task_id();
    EXPECT_EQ(t.passed(), verdicts[t.task_id()]) << t.task_id();
  }
  EXPECT_EQ(judged, passed + filtered);
  EXPECT_EQ(ProxyMetric("corral_scheduler_groups_total", {{"outcome", "passed"}}, &*scheduler_), 3);
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(SchedulerPolicyTest, StalenessAdmissionStartsOneGroupPerPolicyVersionAtZeroStaleness) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  ASSERT_THAT(UpdatePolicy(10), IsOk());
  v1::BatchSpec spec;
  spec.set_batch_id("sync");
  spec.set_group_size(2);
  spec.set_max_staleness(0);  // on-policy: each group runs entirely under the version the trainer is at
  spec.set_step_groups(1);
  std::vector<v1::Task> tasks;
  for (int i = 0; i < 3; ++i) tasks.push_back(Arithmetic(absl::StrCat("t", i), i, 1, v1::RUNNER_SINGLE_TURN));
  ASSERT_THAT(Submit(spec, tasks), IsOk());
  for (int step = 0; step < 3; ++step) {
    auto taken = Results("sync", /*whole_groups=*/true, absl::Minutes(2), /*limit=*/2);
    ASSERT_THAT(taken, IsOk());
    const std::vector<v1::EpisodeResult>& group = *taken;
    ASSERT_EQ(group.size(), 2u) << "step " << step;
    for (const auto& r : group) {
      EXPECT_EQ(r.ids().group_index(), static_cast<uint32_t>(step));
      EXPECT_EQ(r.first_policy_version(), 10 + step);
      EXPECT_EQ(r.last_policy_version(), 10 + step);
    }
    auto batch = GetBatch("sync");
    ASSERT_THAT(batch, IsOk());
    EXPECT_EQ(batch->groups().started(), static_cast<uint32_t>(step + 1)) << "admission let a group start early";
    ASSERT_THAT(Ack({group[0].ids().episode_id(), group[1].ids().episode_id()}), IsOk());
    ASSERT_THAT(UpdatePolicy(11 + step), IsOk());  // the trainer's step: the next group is admitted
  }
  auto batch = GetBatch("sync");
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->state(), v1::BATCH_STATE_COMPLETE);
  EXPECT_EQ(batch->counts().stale_reruns(), 0u);
  EXPECT_EQ(ProxyMetric("corral_scheduler_delivered_staleness_count", {}, &*scheduler_), 6);
  EXPECT_EQ(ProxyMetric("corral_scheduler_delivered_staleness_bucket", {{"le", "0"}}, &*scheduler_), 6);
}

TEST_F(SchedulerPolicyTest, PausedTimeDoesNotCountAgainstTheAgentTimeout) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  ASSERT_THAT(Pause(v1::PAUSE_MODE_DRAIN), IsOk());
  // Both agents get 3 s; generation stays paused for longer than that while their calls wait at the proxy.
  v1::BatchSpec spec;
  spec.set_batch_id("held");
  std::vector<v1::Task> tasks = {Arithmetic("single", 1, 2, v1::RUNNER_SINGLE_TURN),
                                 Arithmetic("agent", 3, 4, v1::RUNNER_AGENT)};
  for (v1::Task& t : tasks) t.mutable_timeouts()->mutable_agent()->set_seconds(3);
  ASSERT_THAT(Submit(spec, tasks), IsOk());
  ASSERT_TRUE(ProxyMetricBecomes("corral_proxy_paused_calls_total", 2, {{"outcome", "held"}}));
  absl::SleepFor(absl::Seconds(4));  // the pause itself is what is tested: longer than the agents' timeout
  ASSERT_THAT(Resume(1), IsOk());
  auto results = Results("held");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 2u);
  for (const auto& r : *results) {
    EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.ids().task_id() << ": " << r.failure_message();
    EXPECT_EQ(r.first_policy_version(), 1);
  }

  // Without a pause the timeout still acts, in generation time: an agent that never ends is stopped.
  v1::Task stuck = Arithmetic("stuck", 5, 6, v1::RUNNER_AGENT);
  stuck.mutable_agent()->mutable_command()->clear_argv();
  for (const char* arg : {"sleep", "600"}) stuck.mutable_agent()->mutable_command()->add_argv(arg);
  stuck.mutable_timeouts()->mutable_agent()->set_seconds(2);
  spec.set_batch_id("stuck");
  ASSERT_THAT(Submit(spec, {stuck}), IsOk());
  results = Results("stuck");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 1u);
  EXPECT_EQ((*results)[0].status(), v1::EPISODE_STATUS_TIMEOUT);
  EXPECT_EQ((*results)[0].failed_phase(), v1::EPISODE_PHASE_AGENT);
  EXPECT_THAT((*results)[0].failure_message(), HasSubstr("ran past its timeout (2s) and was killed"));
  EXPECT_TRUE(NothingLeaked());
}

}  // namespace
}  // namespace corral
