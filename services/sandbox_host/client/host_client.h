// HostApi over gRPC: each call an awaitable over gRPC's callback API. Thread-safe (the stub is).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "boost/asio/awaitable.hpp"
#include "corral/v1/sandbox.grpc.pb.h"
#include "grpcpp/channel.h"
#include "services/sandbox_host/client/host_api.h"

namespace corral::sandbox {

class HostClient final : public HostApi {
 public:
  using HostApi::DeleteSandbox;
  HostClient(std::string address, std::shared_ptr<grpc::Channel> channel, std::string token);
  const std::string& address() const override { return address_; }

  boost::asio::awaitable<absl::StatusOr<v1::HostInfoResponse>> HostInfo(absl::Duration timeout) override;
  boost::asio::awaitable<absl::StatusOr<v1::CreatedSandbox>> Create(const v1::SandboxSpec& spec,
                                                                    CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<v1::CreateSandboxesResponse>> Fork(v1::ForkSandboxRequest request,
                                                                           CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<v1::Sandbox>> GetSandbox(v1::GetSandboxRequest request,
                                                                 absl::Duration timeout) override;
  boost::asio::awaitable<absl::StatusOr<v1::DeleteSandboxResponse>> DeleteSandbox(v1::DeleteSandboxRequest request,
                                                                                  absl::Duration timeout) override;
  boost::asio::awaitable<absl::StatusOr<ExecOutcome>> Exec(v1::ExecRequest request, size_t output_limit,
                                                           CallOptions options) override;
  boost::asio::awaitable<absl::Status> WriteFile(const std::string& sandbox_id, const v1::InlineFile& file,
                                                 CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<v1::Sandbox>> SetPaused(const std::string& sandbox_id, bool paused,
                                                                CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<uint32_t>> KillAllProcesses(const std::string& sandbox_id,
                                                                    CallOptions options) override;
  boost::asio::awaitable<absl::Status> Remove(const std::string& sandbox_id, const std::string& path, bool recursive,
                                              CallOptions options) override;
  boost::asio::awaitable<absl::Status> MakeDir(const std::string& sandbox_id, const std::string& path,
                                               CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<std::optional<std::string>>> ReadFile(const std::string& sandbox_id,
                                                                              const std::string& path, size_t max_bytes,
                                                                              CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<v1::Template>> PrepareTemplate(v1::PrepareTemplateRequest request,
                                                                       CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<v1::Image>> PullImage(const std::string& ref, CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<std::shared_ptr<InteractiveProcess>>> Attach(
      v1::AttachProcess attach, ExecObserver observer = {}) override;
  boost::asio::awaitable<absl::StatusOr<std::shared_ptr<InteractiveProcess>>> StartInteractive(
      v1::ExecRequest start, ExecObserver observer = {}) override;
  boost::asio::awaitable<absl::StatusOr<v1::FileInfo>> Stat(const std::string& sandbox_id, const std::string& path,
                                                            CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<std::vector<v1::FileInfo>>> ListDir(const std::string& sandbox_id,
                                                                            const std::string& path,
                                                                            CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<v1::ListSandboxesResponse>> ListSandboxes(v1::ListSandboxesRequest request,
                                                                                  absl::Duration timeout) override;

 private:
  const std::string address_;
  std::unique_ptr<v1::SandboxHost::Stub> stub_;
  const std::string token_;
};

}  // namespace corral::sandbox
