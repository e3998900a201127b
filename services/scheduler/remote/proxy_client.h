// ProxyApi over the replica's gRPC service (sessions, policy) and its HTTP endpoint (the episode's LLM calls).
// Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "boost/asio/awaitable.hpp"
#include "corral/v1/proxy.grpc.pb.h"
#include "grpcpp/channel.h"
#include "libs/http/client.h"
#include "services/scheduler/remote/proxy_api.h"

namespace corral::scheduler {

class ProxyClient final : public ProxyApi {
 public:
  ProxyClient(std::string address, std::shared_ptr<grpc::Channel> channel, std::string token);
  const std::string& address() const override { return address_; }

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
  const std::string address_;
  std::unique_ptr<v1::Proxy::Stub> stub_;
  const std::string token_;
  http::ConnectionPool pool_{4096};  // to the replica's HTTP endpoint
};

}  // namespace corral::scheduler
