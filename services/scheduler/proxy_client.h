// A proxy replica as the scheduler's coroutines use it: sessions over gRPC (open, close with the trajectory,
// acknowledge), and the episode's own LLM calls over the replica's OpenAI-compatible HTTP endpoint with the
// session's env token — the same door an agent uses, so every call is recorded. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "boost/asio/awaitable.hpp"
#include "corral/v1/proxy.grpc.pb.h"
#include "grpcpp/channel.h"
#include "libs/http/client.h"
#include "services/scheduler/host_client.h"

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

class ProxyClient {
 public:
  ProxyClient(std::string address, std::shared_ptr<grpc::Channel> channel, std::string token);
  const std::string& address() const { return address_; }

  boost::asio::awaitable<absl::StatusOr<v1::OpenSessionResponse>> Open(v1::OpenSessionRequest request,
                                                                        CallOptions options);
  // Closes the session (idempotent) and returns its trajectory in the CALLS form plus the TRAJECTORY branches.
  boost::asio::awaitable<absl::StatusOr<v1::CloseSessionResponse>> Close(const std::string& env_id,
                                                                         v1::TrajectoryFormat format,
                                                                         absl::Duration timeout);
  // Fire and forget (used from interrupts: a closed session ends the calls in flight on it).
  void CloseAsync(const std::string& env_id);
  boost::asio::awaitable<absl::Status> Ack(const std::string& env_id, absl::Duration timeout);
  // Asynchronous RL: the replica's policy version and generation pause (policy_control.h).
  boost::asio::awaitable<absl::StatusOr<v1::UpdatePolicyResponse>> UpdatePolicy(v1::UpdatePolicyRequest request,
                                                                                absl::Time deadline);
  boost::asio::awaitable<absl::StatusOr<v1::PauseGenerationResponse>> Pause(v1::PauseGenerationRequest request,
                                                                           absl::Time deadline);
  boost::asio::awaitable<absl::StatusOr<v1::ResumeGenerationResponse>> Resume(v1::ResumeGenerationRequest request,
                                                                             absl::Time deadline);
  // GET /v1/... is not needed; POST `path` (e.g. "/chat/completions") below the session's base URL.
  boost::asio::awaitable<absl::StatusOr<LlmReply>> Post(const BaseUrl& base, const std::string& env_token,
                                                        const std::string& path, std::string body,
                                                        absl::Duration timeout);

 private:
  const std::string address_;
  std::unique_ptr<v1::Proxy::Stub> stub_;
  const std::string token_;
  http::ConnectionPool pool_{4096};  // to the replica's HTTP endpoint
};

}  // namespace corral::scheduler
