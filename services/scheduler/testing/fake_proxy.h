// An in-memory proxy replica for the scheduler's unit tests: sessions open (or fail as queued), LLM calls answer
// what the test scripts (a chat completion per call, or a hang until the caller gives up), and closing a
// session returns a trajectory that counts the calls made on it. Thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "libs/core/clock.h"
#include "services/scheduler/remote/proxy_api.h"

namespace corral::scheduler::testing_support {

// A chat completion whose assistant message says `content`.
LlmReply ChatCompletion(const std::string& content);
// A chat completion whose assistant message calls tool `name` with `arguments_json`.
LlmReply ToolCallCompletion(const std::string& name, const std::string& arguments_json);

class FakeProxy final : public ProxyApi {
 public:
  FakeProxy(std::string address, Clock* clock);
  const std::string& address() const override { return address_; }

  // --- what the test scripts
  // The next `n` opens fail with `status`.
  void FailOpens(absl::Status status, int n = 1);
  // Opens of sessions whose env id starts with `prefix` fail with `status` (every time).
  void FailOpensOf(const std::string& prefix, absl::Status status);
  // Opening throws (a bug on the scheduler's side of the seam, as the driver must survive it).
  void ThrowOnOpen(bool on);
  // LLM calls answer these in order; when none is left, the last one again (default: "ok").
  void Reply(LlmReply reply);
  // LLM calls never answer (the caller's timeout or stop ends them).
  void HangCalls(bool hang);
  // An agent in a sandbox made a call with `env_token` (counted in its session's trajectory).
  void AgentCalled(const std::string& env_token);

  // --- what the test observes
  std::vector<v1::OpenSessionRequest> opened() const;
  std::vector<std::string> closed() const;  // env ids, in order
  std::vector<std::string> acked() const;
  std::vector<std::string> bodies() const;  // every LLM call's request body
  int calls() const;

  // --- ProxyApi
  boost::asio::awaitable<absl::StatusOr<v1::OpenSessionResponse>> Open(v1::OpenSessionRequest request,
                                                                       sandbox::CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<v1::CloseSessionResponse>> Close(const std::string& env_id,
                                                                         v1::TrajectoryFormat format,
                                                                         absl::Duration timeout) override;
  boost::asio::awaitable<absl::StatusOr<v1::Trajectory>> Trajectory(const std::string& env_id,
                                                                    v1::TrajectoryFormat format,
                                                                    absl::Duration timeout) override;
  void CloseAsync(const std::string& env_id) override;
  boost::asio::awaitable<absl::Status> Ack(const std::string& env_id, absl::Duration timeout) override;
  boost::asio::awaitable<absl::StatusOr<v1::UpdatePolicyResponse>> UpdatePolicy(v1::UpdatePolicyRequest request,
                                                                                absl::Time deadline) override;
  boost::asio::awaitable<absl::StatusOr<v1::PauseGenerationResponse>> Pause(v1::PauseGenerationRequest request,
                                                                            absl::Time deadline) override;
  boost::asio::awaitable<absl::StatusOr<v1::ResumeGenerationResponse>> Resume(v1::ResumeGenerationRequest request,
                                                                              absl::Time deadline) override;
  boost::asio::awaitable<absl::StatusOr<LlmReply>> Post(const BaseUrl& base, const std::string& env_token,
                                                        const std::string& path, std::string body,
                                                        absl::Duration timeout) override;

 private:
  // The session's trajectory (CALLS form): one bare call per call it counted.
  v1::Trajectory Recorded(const std::string& env_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const std::string address_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::deque<absl::Status> open_failures_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Status> open_failures_of_ ABSL_GUARDED_BY(mu_);
  bool throw_on_open_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<LlmReply> replies_ ABSL_GUARDED_BY(mu_);
  bool hang_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::OpenSessionRequest> opened_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> calls_by_token_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> closed_, acked_, bodies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral::scheduler::testing_support
