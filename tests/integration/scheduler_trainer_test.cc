// Trainer-driven episodes over gRPC on a real cluster (OpenEnvironment, StepEnvironment, CloseEnvironment): the
// trainer's steps and rewards, bad calls refused, a crash heard by the step and never retried, the idle timeout, an
// Open that goes away, a scheduler killed meanwhile.
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "libs/api/proto_time.h"
#include "tests/integration/environment_drill.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

using namespace drill_test;  // NOLINT: the drill task
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class TrainerDrivenTest : public SchedulerFixture {
 protected:
  absl::StatusOr<v1::OpenEnvironmentResponse> Open(const v1::OpenEnvironmentRequest& request,
                                                   absl::Duration timeout = absl::Seconds(60)) {
    grpc::ClientContext ctx;
    Prepare(ctx, timeout);
    v1::OpenEnvironmentResponse out;
    grpc::Status s = scheduler_stub_->OpenEnvironment(&ctx, request, &out);
    if (!s.ok()) return FromGrpcStatus(s);
    return out;
  }
  absl::StatusOr<v1::EnvironmentStep> Step(const std::string& episode_id, const std::string& action_json) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::StepEnvironmentRequest req;
    req.set_episode_id(episode_id);
    req.set_action_json(action_json);
    v1::StepEnvironmentResponse out;
    grpc::Status s = scheduler_stub_->StepEnvironment(&ctx, req, &out);
    if (!s.ok()) return FromGrpcStatus(s);
    return out.step();
  }
  absl::StatusOr<v1::EpisodeResult> Close(const std::string& episode_id) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::CloseEnvironmentRequest req;
    req.set_episode_id(episode_id);
    v1::EpisodeResult out;
    grpc::Status s = scheduler_stub_->CloseEnvironment(&ctx, req, &out);
    if (!s.ok()) return FromGrpcStatus(s);
    return out;
  }
  static v1::OpenEnvironmentRequest Request(const std::string& batch_id, const std::string& fault = "") {
    v1::OpenEnvironmentRequest r;
    *r.mutable_task() = Drill("drill", false, fault);
    r.mutable_task()->clear_runner();
    r.mutable_spec()->set_batch_id(batch_id);
    return r;
  }
};

// The sum the drill asks for in `observation_json` ({"prompt": "Question 1 of 3: What is A + B?", ...}).
int SumAsked(const std::string& observation_json) {
  const size_t at = observation_json.find("What is ");
  EXPECT_NE(at, std::string::npos) << observation_json;
  int a = 0, b = 0;
  EXPECT_EQ(std::sscanf(observation_json.c_str() + at, "What is %d + %d?", &a, &b), 2) << observation_json;
  return a + b;
}

std::string Say(int n) { return absl::StrCat(R"({"message": "The answer is )", n, R"(."})"); }

TEST_F(TrainerDrivenTest, ATrainerDrivesTheDrillStepByStepAndGetsTheJournaledResult) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  v1::OpenEnvironmentRequest request = Request("driven");
  request.set_seed(7);
  auto opened = Open(request);
  ASSERT_THAT(opened, IsOk());
  EXPECT_EQ(opened->ids().episode_id(), "driven:g0:e0");
  EXPECT_EQ(opened->reset().turn(), 0u);
  EXPECT_FALSE(opened->reset().done());
  EXPECT_FALSE(opened->reset().has_reward());
  EXPECT_THAT(opened->base_url(), HasSubstr("http://127.0.0.1:"));
  EXPECT_FALSE(opened->api_key().empty());
  EXPECT_FALSE(opened->sandbox_id().empty());
  // The seed reached the environment: the same seed asks the same first question.
  const int first = SumAsked(opened->reset().observation_json());
  auto again = Open([&] {
    v1::OpenEnvironmentRequest r = request;
    r.mutable_spec()->set_batch_id("driven-again");
    return r;
  }());
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(SumAsked(again->reset().observation_json()), first);

  // A wrong answer, then the optimal play; the environment says done after the third question (a wrong answer
  // moves on too).
  auto step = Step("driven:g0:e0", Say(first + 1));
  ASSERT_THAT(step, IsOk());
  EXPECT_EQ(step->reward(), 0.0);
  EXPECT_EQ(step->turn(), 1u);
  std::vector<double> rewards = {step->reward()};
  while (!step->done()) {
    step = Step("driven:g0:e0", Say(SumAsked(step->observation_json())));
    ASSERT_THAT(step, IsOk());
    rewards.push_back(step->reward());
  }
  EXPECT_EQ(rewards, (std::vector<double>{0, 1, 1}));
  EXPECT_THAT(step->answer_json(), HasSubstr("\"done\":true"));
  // Bad calls change nothing.
  EXPECT_EQ(Step("driven:g0:e0", "{not json").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Step("nobody:g0:e0", "{}").status().code(), absl::StatusCode::kNotFound);
  auto after_done = Step("driven:g0:e0", Say(1));
  EXPECT_EQ(after_done.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(after_done.status().message(), HasSubstr("the environment is done"));

  auto result = Close("driven:g0:e0");
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(result->status(), v1::EPISODE_STATUS_FINISHED) << result->failure_message();
  EXPECT_EQ(result->reward(), 2.0);
  EXPECT_THAT(result->step_rewards(), ::testing::ElementsAre(0, 1, 1));
  EXPECT_EQ(result->llm_calls(), 0u) << "the scheduler called no model: the trainer drives";
  EXPECT_EQ(Close("driven:g0:e0").status().code(), absl::StatusCode::kNotFound) << "the result was taken";
  // Journaled and delivered like any other result.
  auto streamed = Results("driven");
  ASSERT_THAT(streamed, IsOk());
  ASSERT_EQ(streamed->size(), 1u);
  EXPECT_EQ(streamed->front().reward(), 2.0);
  EXPECT_EQ(streamed->front().ids().attempt(), 1u);

  // The other episode, left alone, is closed without a step: reward 0 from no step.
  auto idle = Close("driven-again:g0:e0");
  ASSERT_THAT(idle, IsOk());
  EXPECT_EQ(idle->status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_EQ(idle->reward(), 0.0);
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(TrainerDrivenTest, FailuresEndTheEpisodeOnceAndTheTrainerHearsWhy) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  // Submit runs only scheduler-driven environments; a bad request opens nothing.
  v1::Task marked = Drill("marked", false);
  marked.mutable_env_server()->set_trainer_driven(true);
  v1::BatchSpec spec;
  spec.set_batch_id("marked");
  auto refused = Submit(spec, {marked});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("env_server.trainer_driven is for OpenEnvironment"));
  v1::OpenEnvironmentRequest bad = Request("bad");
  bad.mutable_spec()->set_group_size(4);
  EXPECT_EQ(Open(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetBatch("bad").status().code(), absl::StatusCode::kNotFound);

  // The server crashes at step 2: the step hears it, and the episode is not retried (max_attempts 3).
  v1::OpenEnvironmentRequest crash = Request("crash", R"({"crash_at_step": 2})");
  crash.mutable_spec()->set_max_attempts(3);
  auto opened = Open(crash);
  ASSERT_THAT(opened, IsOk());
  ASSERT_THAT(Step("crash:g0:e0", Say(0)), IsOk());
  auto crashed = Step("crash:g0:e0", Say(0));
  EXPECT_EQ(crashed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(crashed.status().message(), HasSubstr("the server exited with signal 9"));
  auto result = Close("crash:g0:e0");
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(result->status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(result->failure_class(), v1::FAILURE_CLASS_INFRA);
  EXPECT_EQ(result->ids().attempt(), 1u) << "once opened, the trainer holds the state: no retry";
  auto batch = GetBatch("crash");
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->counts().retries(), 0u);

  // A trainer that goes quiet: the idle timeout ends the episode.
  v1::OpenEnvironmentRequest quiet = Request("quiet");
  quiet.mutable_idle_timeout()->set_seconds(1);
  ASSERT_THAT(Open(quiet), IsOk());
  auto quiet_results = Results("quiet");
  ASSERT_THAT(quiet_results, IsOk());
  ASSERT_EQ(quiet_results->size(), 1u);
  EXPECT_EQ(quiet_results->front().status(), v1::EPISODE_STATUS_TIMEOUT);
  EXPECT_THAT(quiet_results->front().failure_message(), HasSubstr("no step or close from the trainer for 1s"));
  EXPECT_EQ(Step("quiet:g0:e0", Say(1)).status().code(), absl::StatusCode::kDeadlineExceeded);
  auto quiet_result = Close("quiet:g0:e0");
  ASSERT_THAT(quiet_result, IsOk());
  EXPECT_EQ(quiet_result->status(), v1::EPISODE_STATUS_TIMEOUT);

  // A trainer that stops waiting before the reset: the episode is cancelled, nothing is left.
  auto gone = Open(Request("gone"), absl::Milliseconds(50));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kDeadlineExceeded);
  auto gone_results = Results("gone");
  ASSERT_THAT(gone_results, IsOk());
  ASSERT_EQ(gone_results->size(), 1u);
  EXPECT_EQ(gone_results->front().status(), v1::EPISODE_STATUS_CANCELLED);
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(TrainerDrivenTest, AnEpisodeOpenWhenTheSchedulerIsKilledEndsOnceAndLeavesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  auto opened = Open(Request("orphan"));
  ASSERT_THAT(opened, IsOk());
  ASSERT_THAT(Step("orphan:g0:e0", Say(0)), IsOk());
  scheduler_->process.Signal(SIGKILL);
  ASSERT_THAT(scheduler_->process.Wait(absl::Seconds(10)), IsOk());
  scheduler_.reset();
  ASSERT_NO_FATAL_FAILURE(StartScheduler());
  // The journal had it running: its re-run finds no trainer and ends at once, recorded, never run again.
  auto results = Results("orphan");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 1u);
  EXPECT_EQ(results->front().status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(results->front().failure_class(), v1::FAILURE_CLASS_INFRA);
  EXPECT_THAT(results->front().failure_message(), HasSubstr("no trainer holds this environment episode"));
  EXPECT_EQ(Step("orphan:g0:e0", Say(0)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(NothingLeaked());
}

}  // namespace
}  // namespace corral
