// A proxy replica as the scheduler's coroutines see it: sessions (open, close with the trajectory, acknowledge),
// the replica's policy version and generation pause, and the episode's own LLM calls through the replica's
// OpenAI-compatible endpoint with the session's env token. ProxyClient (proxy_client.h) implements it over gRPC
// and HTTP; tests use FakeProxy (testing/fake_proxy.h). Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "corral/v1/proxy.pb.h"
#include "services/sandbox_host/client/host_api.h"

namespace corral::scheduler {

// An HTTP base URL split for the client: http://HOST:PORT/PREFIX.
struct BaseUrl {
  std::string host;
  uint16_t port = 0;
  std::string prefix;  // e.g. "/v1"
};
absl::StatusOr<BaseUrl> ParseBaseUrl(const std::string& url);

struct LlmReply {
  int status = 0;
  std::string body;
};

class ProxyApi {
 public:
  virtual ~ProxyApi() = default;
  virtual const std::string& address() const = 0;

  virtual boost::asio::awaitable<absl::StatusOr<v1::OpenSessionResponse>> Open(v1::OpenSessionRequest request,
                                                                               sandbox::CallOptions options) = 0;
  // Closes the session (idempotent) and returns its trajectory in the CALLS form plus the TRAJECTORY branches.
  virtual boost::asio::awaitable<absl::StatusOr<v1::CloseSessionResponse>> Close(const std::string& env_id,
                                                                                 v1::TrajectoryFormat format,
                                                                                 absl::Duration timeout) = 0;
  // The session's trajectory so far (GetTrajectory), the session left open.
  virtual boost::asio::awaitable<absl::StatusOr<v1::Trajectory>> Trajectory(const std::string& env_id,
                                                                            v1::TrajectoryFormat format,
                                                                            absl::Duration timeout) = 0;
  // Fire and forget (used from interrupts: a closed session ends the calls in flight on it).
  virtual void CloseAsync(const std::string& env_id) = 0;
  virtual boost::asio::awaitable<absl::Status> Ack(const std::string& env_id, absl::Duration timeout) = 0;
  // Asynchronous RL: the replica's policy version and generation pause (policy_control.h).
  virtual boost::asio::awaitable<absl::StatusOr<v1::UpdatePolicyResponse>> UpdatePolicy(v1::UpdatePolicyRequest request,
                                                                                        absl::Time deadline) = 0;
  virtual boost::asio::awaitable<absl::StatusOr<v1::PauseGenerationResponse>> Pause(v1::PauseGenerationRequest request,
                                                                                    absl::Time deadline) = 0;
  virtual boost::asio::awaitable<absl::StatusOr<v1::ResumeGenerationResponse>> Resume(
      v1::ResumeGenerationRequest request, absl::Time deadline) = 0;
  // POST `path` (e.g. "/chat/completions") below the session's base URL with the session's token.
  virtual boost::asio::awaitable<absl::StatusOr<LlmReply>> Post(const BaseUrl& base, const std::string& env_token,
                                                                const std::string& path, std::string body,
                                                                absl::Duration timeout) = 0;
};

}  // namespace corral::scheduler
