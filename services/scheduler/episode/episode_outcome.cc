#include "services/scheduler/episode/episode_outcome.h"

#include "absl/strings/str_cat.h"
#include "libs/core/utf8.h"

namespace corral::scheduler {

v1::FailureClass FaultOf(Step step, absl::StatusCode code) {
  using C = absl::StatusCode;
  bool task_fault = false;
  switch (step) {
    case Step::kOpenSession: task_fault = code == C::kInvalidArgument; break;
    case Step::kPullImage:
      task_fault = code == C::kNotFound || code == C::kInvalidArgument || code == C::kUnauthenticated ||
                   code == C::kPermissionDenied;
      break;
    case Step::kBuildTemplate:
      task_fault = code == C::kFailedPrecondition || code == C::kInvalidArgument || code == C::kAlreadyExists;
      break;
    case Step::kCreateSandbox: task_fault = code == C::kInvalidArgument; break;
  }
  return task_fault ? v1::FAILURE_CLASS_AGENT : v1::FAILURE_CLASS_INFRA;
}

Failure FailureFromStatus(const absl::Status& s, v1::EpisodePhase phase, v1::FailureClass failure_class,
                          const std::string& what, bool episode_deadline_passed, bool batch_deadline_binds) {
  Failure f;
  f.phase = phase;
  f.failure_class = failure_class;
  f.message = absl::StrCat(what, ": ", s.message());
  if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    f.status = v1::EPISODE_STATUS_TIMEOUT;
    if (episode_deadline_passed) {
      f.phase = batch_deadline_binds ? v1::EPISODE_PHASE_DEADLINE : v1::EPISODE_PHASE_EPISODE;
      f.failure_class = v1::FAILURE_CLASS_AGENT;
    } else if (phase == v1::EPISODE_PHASE_ACQUIRE || phase == v1::EPISODE_PHASE_SETUP) {
      f.failure_class = v1::FAILURE_CLASS_INFRA;
    }
    f.message = absl::StrCat(what, ": timed out");
  } else if (s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kCancelled) {
    f.failure_class = v1::FAILURE_CLASS_INFRA;
  }
  return f;
}

std::optional<Failure> ApplyStop(StopReason reason, const std::string& message, std::optional<Failure> failure) {
  switch (reason) {
    case StopReason::kCancelled:
      return Failure{v1::EPISODE_STATUS_CANCELLED, v1::FAILURE_CLASS_UNSPECIFIED, v1::EPISODE_PHASE_UNSPECIFIED,
                     message};
    case StopReason::kDeadline:
      return Failure{v1::EPISODE_STATUS_TIMEOUT, v1::FAILURE_CLASS_INFRA, v1::EPISODE_PHASE_DEADLINE, message};
    case StopReason::kTimeout:  // the runner said which timeout
      if (!failure) {
        return Failure{v1::EPISODE_STATUS_TIMEOUT, v1::FAILURE_CLASS_AGENT, v1::EPISODE_PHASE_AGENT, message};
      }
      return failure;
    case StopReason::kHostLost:
      return Failure{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_INFRA, v1::EPISODE_PHASE_UNSPECIFIED, message};
    default: return failure;
  }
}

void SetOutcome(const std::optional<Failure>& failure, v1::Runner runner, v1::EpisodeResult& r) {
  if (failure) {
    r.set_status(failure->status);
    r.set_failure_class(failure->status == v1::EPISODE_STATUS_CANCELLED ? v1::FAILURE_CLASS_UNSPECIFIED
                                                                        : failure->failure_class);
    r.set_failed_phase(failure->phase);
    r.set_failure_message(failure->message);
    r.clear_reward();
  } else if (r.trajectory().call_count() == 0 && runner == v1::RUNNER_AGENT && r.has_agent_exit_code() &&
             (r.agent_exit_code() == 126 || r.agent_exit_code() == 127)) {
    // The shell's "cannot execute" and "not found": the agent never started, which is not the policy's doing
    // (a missing harness or program, a bad path). Its own words say why.
    r.set_status(v1::EPISODE_STATUS_FAILED);
    r.set_failure_class(v1::FAILURE_CLASS_AGENT);
    r.set_failed_phase(v1::EPISODE_PHASE_AGENT);
    const std::string said = LastLine(ToValidUtf8(r.agent_output_tail()), 300);
    r.set_failure_message(absl::StrCat("the agent command could not start (exit ", r.agent_exit_code(), ")",
                                       said.empty() ? "" : ": ", said));
    r.clear_reward();
  } else if (r.trajectory().call_count() == 0 && runner == v1::RUNNER_AGENT) {
    r.set_status(v1::EPISODE_STATUS_NO_DATA);
    r.set_failure_message("the agent made no LLM call");
    r.clear_reward();
  } else {
    r.set_status(v1::EPISODE_STATUS_FINISHED);
  }
}

}  // namespace corral::scheduler
