// The scheduler's leased sandboxes as corral-sandbox-api sees them (Scheduler.LeaseSandbox and the calls around
// it), and the sandbox's host, reached with the lease's capability token. LeaseClient implements LeaseApi over
// gRPC; tests use their own. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/awaitable.hpp"
#include "corral/v1/scheduler.grpc.pb.h"
#include "libs/core/clock.h"
#include "libs/rpc/channel.h"
#include "services/sandbox_host/client/host_api.h"

namespace corral::sandbox_api {

class LeaseApi {
 public:
  virtual ~LeaseApi() = default;
  virtual boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> Lease(v1::LeaseSandboxRequest request,
                                                                         absl::Time deadline) = 0;
  virtual boost::asio::awaitable<absl::Status> Release(std::string lease_id, std::string owner) = 0;
  virtual boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> Get(std::string lease_id, std::string owner) = 0;
  virtual boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> Renew(std::string lease_id, std::string owner,
                                                                         absl::Duration ttl) = 0;
  // Every lease of `owner`, ordered by id.
  virtual boost::asio::awaitable<absl::StatusOr<std::vector<v1::SandboxLease>>> List(std::string owner) = 0;
  virtual boost::asio::awaitable<absl::StatusOr<v1::ForkLeaseResponse>> Fork(v1::ForkLeaseRequest request) = 0;
  // SetLeasePaused: pauses, or resumes (with a new ttl when `ttl` > 0).
  virtual boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> SetPaused(std::string lease_id, std::string owner,
                                                                             bool paused, absl::Duration ttl) = 0;
  // The client of the lease's host, presenting the lease's capability token; an error when the lease's host
  // address or this replica's TLS settings make no channel.
  virtual absl::StatusOr<std::shared_ptr<sandbox::HostApi>> Host(const v1::SandboxLease& lease) = 0;
  // Waits, for at most `at_most`, while this replica's channel to the lease's host is failing (the host was
  // restarting when it was last dialled): a call made then fails at once with UNAVAILABLE, which the e2b SDK reads
  // as "the sandbox is not running". Returns at once when the channel is not failing.
  virtual boost::asio::awaitable<void> AwaitHost(const v1::SandboxLease& /*lease*/, absl::Duration /*at_most*/) {
    co_return;
  }
};

// The scheduler's sandbox templates (Scheduler.RequestTemplateBuild and the calls around it).
class TemplateApi {
 public:
  virtual ~TemplateApi() = default;
  virtual boost::asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> RequestBuild(
      v1::RequestTemplateBuildRequest request) = 0;
  virtual boost::asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> StartBuild(
      v1::StartTemplateBuildRequest request) = 0;
  virtual boost::asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> GetTemplate(v1::GetTemplateRequest request) = 0;
  virtual boost::asio::awaitable<absl::Status> DeleteTemplate(v1::GetTemplateRequest request) = 0;
  virtual boost::asio::awaitable<absl::StatusOr<v1::TemplateFile>> PutFile(v1::TemplateFile file) = 0;
  virtual boost::asio::awaitable<absl::StatusOr<v1::TemplateFile>> GetFile(v1::GetTemplateFileRequest request) = 0;
};

class LeaseClient final : public LeaseApi, public TemplateApi {
 public:
  // `token` is the cluster token presented to the scheduler (and to hosts for leases without a capability
  // token); `channel` how hosts are dialled.
  LeaseClient(std::shared_ptr<grpc::Channel> scheduler, std::string token, ChannelOptions channel, Clock* clock);

  boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> Lease(v1::LeaseSandboxRequest request,
                                                                 absl::Time deadline) override;
  boost::asio::awaitable<absl::Status> Release(std::string lease_id, std::string owner) override;
  boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> Get(std::string lease_id, std::string owner) override;
  boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> Renew(std::string lease_id, std::string owner,
                                                                 absl::Duration ttl) override;
  boost::asio::awaitable<absl::StatusOr<std::vector<v1::SandboxLease>>> List(std::string owner) override;
  boost::asio::awaitable<absl::StatusOr<v1::ForkLeaseResponse>> Fork(v1::ForkLeaseRequest request) override;
  boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> SetPaused(std::string lease_id, std::string owner,
                                                                     bool paused, absl::Duration ttl) override;
  absl::StatusOr<std::shared_ptr<sandbox::HostApi>> Host(const v1::SandboxLease& lease) override;
  boost::asio::awaitable<void> AwaitHost(const v1::SandboxLease& lease, absl::Duration at_most) override;

  boost::asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> RequestBuild(
      v1::RequestTemplateBuildRequest request) override;
  boost::asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> StartBuild(
      v1::StartTemplateBuildRequest request) override;
  boost::asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> GetTemplate(v1::GetTemplateRequest request) override;
  boost::asio::awaitable<absl::Status> DeleteTemplate(v1::GetTemplateRequest request) override;
  boost::asio::awaitable<absl::StatusOr<v1::TemplateFile>> PutFile(v1::TemplateFile file) override;
  boost::asio::awaitable<absl::StatusOr<v1::TemplateFile>> GetFile(v1::GetTemplateFileRequest request) override;

 private:
  // One unary call of the scheduler: `start(context, done)` starts it; answers `Response` or the error.
  template <class Response, class Start>
  boost::asio::awaitable<absl::StatusOr<Response>> Unary(absl::Duration timeout, Start start);

  const std::unique_ptr<v1::Scheduler::Stub> stub_;
  const std::string token_;
  const ChannelOptions channel_options_;
  Clock* const clock_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);  // by host address
};

}  // namespace corral::sandbox_api
