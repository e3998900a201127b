// Trainer-driven environment episodes (OpenEnvironment, StepEnvironment, CloseEnvironment): where the trainer's
// RPCs meet the episode's runner. The RPC side posts and is answered through callbacks (gRPC reactors never
// block); the runner waits for the trainer's commands as a coroutine, and the episode's journaled result comes
// from the EpisodeTable (TableHooks::on_driven_result). One entry per episode, from the Open until the trainer
// has taken the result (or 10 minutes after the episode ended). Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/experimental/concurrent_channel.hpp"
#include "corral/v1/scheduler.pb.h"
#include "libs/core/clock.h"

namespace corral::scheduler {

// What the trainer asks of the runner: one step, or the end.
struct EnvCommand {
  bool close = false;
  std::string action_json;    // a step's action (checked to be JSON)
  std::string final_message;  // the close's final answer
};

// The error a trainer's call gets for an episode that ended with `result`: UNAVAILABLE (an infra failure),
// DEADLINE_EXCEEDED (a timeout), CANCELLED, or ABORTED (any other failure), with its message.
absl::Status EndedStatus(const v1::EpisodeResult& result);

class EnvBoard {
 public:
  using OpenDone = std::function<void(absl::StatusOr<v1::OpenEnvironmentResponse>)>;
  using StepDone = std::function<void(absl::StatusOr<v1::EnvironmentStep>)>;
  using CloseDone = std::function<void(absl::StatusOr<v1::EpisodeResult>)>;
  using Channel = boost::asio::experimental::concurrent_channel<void(boost::system::error_code, EnvCommand)>;

  explicit EnvBoard(Clock* clock) : clock_(clock) {}

  // ---- the trainer's side: each accepted call's callback runs exactly once, outside the lock ----

  // A trainer waits for `episode_id` to open: `opened` runs once its runner has reset the environment, or with
  // the error that ended the episode first. ALREADY_EXISTS when the episode is on the board already.
  absl::Status Expect(const std::string& episode_id, absl::Duration idle_timeout, OpenDone opened);
  // The trainer stopped waiting before the episode opened: `opened` will not run (the caller cancels the episode).
  // Returns false when the episode opened or ended first (the callback has run or is running).
  bool Forget(const std::string& episode_id);
  // One step. NOT_FOUND, FAILED_PRECONDITION (not open yet, or a step or close under way), the episode's end
  // (EndedStatus) when it ended, INVALID_ARGUMENT when action_json is not JSON.
  absl::Status Step(const std::string& episode_id, std::string action_json, StepDone done);
  // The end: `done` with the result once the episode has ended (at once when it has already). NOT_FOUND,
  // FAILED_PRECONDITION (not open yet, or a step or close under way).
  absl::Status Close(const std::string& episode_id, std::string final_message, CloseDone done);

  // ---- the runner's side ----

  // The trainer's idle timeout when a trainer waits for `episode_id` to open; nullopt when none does (it was
  // opened before the scheduler restarted, or the trainer went away).
  std::optional<absl::Duration> Expected(const std::string& episode_id) const;
  // The environment is reset: answers the trainer's Open, and returns the channel the trainer's commands come
  // through (on `executor`); null when the trainer went away meanwhile.
  std::shared_ptr<Channel> Opened(const std::string& episode_id, const v1::OpenEnvironmentResponse& response,
                                  const boost::asio::any_io_executor& executor);
  // Answers the step under way.
  void Answer(const std::string& episode_id, absl::StatusOr<v1::EnvironmentStep> step);
  // The episode's final result, journaled: answers whoever waits (an Open or a step with EndedStatus, a close
  // with the result) and keeps the result for a later Close.
  void Ended(const v1::EpisodeResult& result);

  size_t size() const;

 private:
  enum class State { kOpening, kOpen, kEnded };
  struct Entry {
    State state = State::kOpening;
    absl::Duration idle_timeout;
    OpenDone opened;
    std::shared_ptr<Channel> commands;
    StepDone step;    // a step under way
    CloseDone close;  // a close under way
    std::optional<v1::EpisodeResult> result;
    absl::Time ended_at;
  };
  // Drops ended entries nobody closed within 10 minutes.
  void Prune() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The entry for a trainer's Step or Close (`what`): NOT_FOUND, or FAILED_PRECONDITION when it is not open yet
  // or a step or close is under way.
  absl::StatusOr<Entry*> Ready(const std::string& episode_id, const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral::scheduler
