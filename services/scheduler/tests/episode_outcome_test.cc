#include "services/scheduler/episode/episode_outcome.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace corral::scheduler {
namespace {

using C = absl::StatusCode;

TEST(FaultOfTest, EachStepNamesTheErrorsThatAreTheTasksFault) {
  EXPECT_EQ(FaultOf(Step::kOpenSession, C::kInvalidArgument), v1::FAILURE_CLASS_AGENT);
  EXPECT_EQ(FaultOf(Step::kOpenSession, C::kNotFound), v1::FAILURE_CLASS_INFRA);
  for (C code : {C::kNotFound, C::kInvalidArgument, C::kUnauthenticated, C::kPermissionDenied}) {
    EXPECT_EQ(FaultOf(Step::kPullImage, code), v1::FAILURE_CLASS_AGENT) << code;
  }
  EXPECT_EQ(FaultOf(Step::kPullImage, C::kResourceExhausted), v1::FAILURE_CLASS_INFRA);
  for (C code : {C::kFailedPrecondition, C::kInvalidArgument, C::kAlreadyExists}) {
    EXPECT_EQ(FaultOf(Step::kBuildTemplate, code), v1::FAILURE_CLASS_AGENT) << code;
  }
  EXPECT_EQ(FaultOf(Step::kCreateSandbox, C::kInvalidArgument), v1::FAILURE_CLASS_AGENT);
  EXPECT_EQ(FaultOf(Step::kCreateSandbox, C::kResourceExhausted), v1::FAILURE_CLASS_INFRA);
  // Never the task's fault, at any step: the other side is away or we gave up.
  for (Step step : {Step::kOpenSession, Step::kPullImage, Step::kBuildTemplate, Step::kCreateSandbox}) {
    EXPECT_EQ(FaultOf(step, C::kUnavailable), v1::FAILURE_CLASS_INFRA);
    EXPECT_EQ(FaultOf(step, C::kDeadlineExceeded), v1::FAILURE_CLASS_INFRA);
    EXPECT_EQ(FaultOf(step, C::kInternal), v1::FAILURE_CLASS_INFRA);
  }
}

TEST(FailureFromStatusTest, ATimeoutPastTheEpisodeDeadlineIsTheAgentsInTheEpisodePhase) {
  const Failure f = FailureFromStatus(absl::DeadlineExceededError("x"), v1::EPISODE_PHASE_TOOL, v1::FAILURE_CLASS_INFRA,
                                      "bash", /*episode_deadline_passed=*/true,
                                      /*batch_deadline_binds=*/false);
  EXPECT_EQ(f.status, v1::EPISODE_STATUS_TIMEOUT);
  EXPECT_EQ(f.phase, v1::EPISODE_PHASE_EPISODE);
  EXPECT_EQ(f.failure_class, v1::FAILURE_CLASS_AGENT);
  EXPECT_EQ(f.message, "bash: timed out");
}

TEST(FailureFromStatusTest, TheBatchDeadlineNamesTheDeadlinePhase) {
  const Failure f = FailureFromStatus(absl::DeadlineExceededError("x"), v1::EPISODE_PHASE_AGENT,
                                      v1::FAILURE_CLASS_AGENT, "agent", true, /*batch_deadline_binds=*/true);
  EXPECT_EQ(f.phase, v1::EPISODE_PHASE_DEADLINE);
}

TEST(FailureFromStatusTest, ATimeoutWhileAcquiringOrSettingUpIsInfra) {
  for (auto phase : {v1::EPISODE_PHASE_ACQUIRE, v1::EPISODE_PHASE_SETUP}) {
    const Failure f =
        FailureFromStatus(absl::DeadlineExceededError("x"), phase, v1::FAILURE_CLASS_AGENT, "create", false, false);
    EXPECT_EQ(f.status, v1::EPISODE_STATUS_TIMEOUT);
    EXPECT_EQ(f.phase, phase);
    EXPECT_EQ(f.failure_class, v1::FAILURE_CLASS_INFRA);
  }
  const Failure agent = FailureFromStatus(absl::DeadlineExceededError("x"), v1::EPISODE_PHASE_AGENT,
                                          v1::FAILURE_CLASS_AGENT, "llm", false, false);
  EXPECT_EQ(agent.failure_class, v1::FAILURE_CLASS_AGENT);
}

TEST(FailureFromStatusTest, UnavailableAndCancelledAreInfraWhateverTheCallerSaid) {
  for (const absl::Status& s : {absl::UnavailableError("gone"), absl::CancelledError("stopped")}) {
    const Failure f = FailureFromStatus(s, v1::EPISODE_PHASE_AGENT, v1::FAILURE_CLASS_AGENT, "agent", false, false);
    EXPECT_EQ(f.status, v1::EPISODE_STATUS_FAILED);
    EXPECT_EQ(f.failure_class, v1::FAILURE_CLASS_INFRA);
    EXPECT_EQ(f.message, absl::StrCat("agent: ", s.message()));
  }
  const Failure other = FailureFromStatus(absl::NotFoundError("no file"), v1::EPISODE_PHASE_VERIFIER,
                                          v1::FAILURE_CLASS_AGENT, "read", false, false);
  EXPECT_EQ(other.failure_class, v1::FAILURE_CLASS_AGENT);
}

TEST(ApplyStopTest, TheStopDecidesOverWhatTheInterruptedCallSaid) {
  const Failure interrupted{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_INFRA, v1::EPISODE_PHASE_TOOL,
                            "bash: cancelled"};
  auto cancelled = ApplyStop(StopReason::kCancelled, "by the trainer", interrupted);
  ASSERT_TRUE(cancelled);
  EXPECT_EQ(cancelled->status, v1::EPISODE_STATUS_CANCELLED);
  EXPECT_EQ(cancelled->message, "by the trainer");
  auto deadline = ApplyStop(StopReason::kDeadline, "batch deadline", interrupted);
  EXPECT_EQ(deadline->status, v1::EPISODE_STATUS_TIMEOUT);
  EXPECT_EQ(deadline->phase, v1::EPISODE_PHASE_DEADLINE);
  auto lost = ApplyStop(StopReason::kHostLost, "host gone", std::nullopt);
  EXPECT_EQ(lost->status, v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(lost->failure_class, v1::FAILURE_CLASS_INFRA);
}

TEST(ApplyStopTest, TheRunnersOwnTimeoutKeepsTheRunnersFailure) {
  const Failure named{v1::EPISODE_STATUS_TIMEOUT, v1::FAILURE_CLASS_AGENT, v1::EPISODE_PHASE_EPISODE, "episode"};
  EXPECT_EQ(ApplyStop(StopReason::kTimeout, "", named)->phase, v1::EPISODE_PHASE_EPISODE);
  auto unnamed = ApplyStop(StopReason::kTimeout, "agent timeout", std::nullopt);
  EXPECT_EQ(unnamed->status, v1::EPISODE_STATUS_TIMEOUT);
  EXPECT_EQ(unnamed->phase, v1::EPISODE_PHASE_AGENT);
  EXPECT_FALSE(ApplyStop(StopReason::kNone, "", std::nullopt));
}

TEST(SetOutcomeTest, AFailureClearsTheRewardAndACancelHasNoClass) {
  v1::EpisodeResult r;
  r.set_reward(1);
  SetOutcome(Failure{v1::EPISODE_STATUS_CANCELLED, v1::FAILURE_CLASS_INFRA, v1::EPISODE_PHASE_AGENT, "stop"},
             v1::RUNNER_AGENT, r);
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_CANCELLED);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_UNSPECIFIED);
  EXPECT_FALSE(r.has_reward());
}

TEST(SetOutcomeTest, AnAgentThatNeverCalledTheModelIsNoDataOtherRunnersFinish) {
  v1::EpisodeResult agent;
  agent.set_reward(1);
  SetOutcome(std::nullopt, v1::RUNNER_AGENT, agent);
  EXPECT_EQ(agent.status(), v1::EPISODE_STATUS_NO_DATA);
  EXPECT_FALSE(agent.has_reward());
  v1::EpisodeResult called;
  called.mutable_trajectory()->set_call_count(2);
  called.set_reward(1);
  SetOutcome(std::nullopt, v1::RUNNER_AGENT, called);
  EXPECT_EQ(called.status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_EQ(called.reward(), 1);
  v1::EpisodeResult single;
  SetOutcome(std::nullopt, v1::RUNNER_SINGLE_TURN, single);
  EXPECT_EQ(single.status(), v1::EPISODE_STATUS_FINISHED);
}

TEST(SetOutcomeTest, AnAgentCommandThatCouldNotStartFailsWithItsOwnWordsNotNoData) {
  for (int code : {126, 127}) {
    v1::EpisodeResult r;
    r.set_agent_exit_code(code);
    r.set_agent_output_tail(
        "corral: the harness codex 0.171.0 is not installed here: run 'corral harness install codex@0.171.0' on "
        "the host\n");
    r.set_reward(0);
    SetOutcome(std::nullopt, v1::RUNNER_AGENT, r);
    EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FAILED);
    EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_AGENT);
    EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_AGENT);
    EXPECT_EQ(r.failure_message(), absl::StrCat("the agent command could not start (exit ", code,
                                                "): corral: the harness codex 0.171.0 is not installed here: run "
                                                "'corral harness install codex@0.171.0' on the host"));
    EXPECT_FALSE(r.has_reward());
  }
  // Any other exit without a call is still NO_DATA: the agent ran and chose not to call the model.
  v1::EpisodeResult quiet;
  quiet.set_agent_exit_code(1);
  SetOutcome(std::nullopt, v1::RUNNER_AGENT, quiet);
  EXPECT_EQ(quiet.status(), v1::EPISODE_STATUS_NO_DATA);
}

}  // namespace
}  // namespace corral::scheduler
