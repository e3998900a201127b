// The decisions that end an episode attempt, in one place each and free of I/O: whose fault a failed call is
// (the task's or the infrastructure's), how a call's status becomes a failure, how a stop overrides what the
// interrupted call said, and the final status the result carries. The driver and runners only apply them.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "corral/v1/scheduler.pb.h"
#include "services/scheduler/table/run_control.h"

namespace corral::scheduler {

// Why an attempt ended early. Phase timeouts are TIMEOUT with their phase.
struct Failure {
  v1::EpisodeStatus status = v1::EPISODE_STATUS_FAILED;
  v1::FailureClass failure_class = v1::FAILURE_CLASS_INFRA;
  v1::EpisodePhase phase = v1::EPISODE_PHASE_UNSPECIFIED;
  std::string message;
};

// The calls on the way to a sandbox, each with its own rule for whose fault an error is.
enum class Step {
  kOpenSession,    // the proxy refuses the session (INVALID_ARGUMENT: a model no upstream serves)
  kPullImage,      // the image does not exist or may not be pulled
  kBuildTemplate,  // a setup command failed, or the setup is malformed
  kCreateSandbox,  // the host refuses the spec
};
// AGENT when an error with `code` at `step` is the task's fault (retrying elsewhere cannot help), else INFRA.
v1::FailureClass FaultOf(Step step, absl::StatusCode code);

// A failure from a call's status. DEADLINE_EXCEEDED becomes TIMEOUT in `phase` — or in EPISODE (DEADLINE when
// the batch deadline binds) when the episode's own deadline has passed, which is the agent's; a timeout while
// acquiring or setting up is infra. UNAVAILABLE and CANCELLED are infra; anything else `failure_class`.
Failure FailureFromStatus(const absl::Status& s, v1::EpisodePhase phase, v1::FailureClass failure_class,
                          const std::string& what, bool episode_deadline_passed, bool batch_deadline_binds);

// A stop decides over whatever the interrupted call reported: cancel → CANCELLED, the batch deadline → TIMEOUT
// (DEADLINE), a lost host → infra FAILED; the runner's own timeout keeps the runner's failure when it named one.
std::optional<Failure> ApplyStop(StopReason reason, const std::string& message, std::optional<Failure> failure);

// The result's status, failure class, phase and message from what ended the attempt. An agent episode that
// ran clean but never called the model is NO_DATA.
void SetOutcome(const std::optional<Failure>& failure, v1::Runner runner, v1::EpisodeResult& result);

}  // namespace corral::scheduler
