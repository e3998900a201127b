#include "services/sandbox_api/lease_client.h"

#include <utility>

#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"
#include "libs/rpc/async_grpc.h"
#include "libs/rpc/status_conversion.h"
#include "services/sandbox_host/client/host_client.h"

namespace corral::sandbox_api {

namespace asio = boost::asio;
using rpc::AwaitGrpc;
using rpc::CallScope;

LeaseClient::LeaseClient(std::shared_ptr<grpc::Channel> scheduler, std::string token, ChannelOptions channel,
                         Clock* clock)
    : stub_(v1::Scheduler::NewStub(std::move(scheduler))),
      token_(std::move(token)),
      channel_options_(std::move(channel)),
      clock_(clock) {}

asio::awaitable<absl::StatusOr<v1::SandboxLease>> LeaseClient::Lease(v1::LeaseSandboxRequest request,
                                                                     absl::Time deadline) {
  rpc::CallScope scope(nullptr, deadline, token_);
  v1::SandboxLease response;
  grpc::Status s = co_await AwaitGrpc(
      [&](auto done) { stub_->async()->LeaseSandbox(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::Status> LeaseClient::Release(std::string lease_id, std::string owner) {
  rpc::CallScope scope(nullptr, clock_->Now() + absl::Seconds(90), token_);
  v1::ReleaseLeaseRequest request;
  request.set_lease_id(std::move(lease_id));
  request.set_owner(std::move(owner));
  v1::ReleaseLeaseResponse response;
  grpc::Status s = co_await AwaitGrpc(
      [&](auto done) { stub_->async()->ReleaseLease(scope.context(), &request, &response, std::move(done)); });
  co_return FromGrpcStatus(s);
}

asio::awaitable<absl::StatusOr<v1::SandboxLease>> LeaseClient::Get(std::string lease_id, std::string owner) {
  rpc::CallScope scope(nullptr, clock_->Now() + absl::Seconds(30), token_);
  v1::GetLeaseRequest request;
  request.set_lease_id(std::move(lease_id));
  request.set_owner(std::move(owner));
  v1::SandboxLease response;
  grpc::Status s = co_await AwaitGrpc(
      [&](auto done) { stub_->async()->GetLease(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::StatusOr<v1::SandboxLease>> LeaseClient::Renew(std::string lease_id, std::string owner,
                                                                     absl::Duration ttl) {
  rpc::CallScope scope(nullptr, clock_->Now() + absl::Seconds(30), token_);
  v1::RenewLeaseRequest request;
  request.set_lease_id(std::move(lease_id));
  request.set_owner(std::move(owner));
  ToProto(ttl, request.mutable_ttl());
  v1::SandboxLease response;
  grpc::Status s = co_await AwaitGrpc(
      [&](auto done) { stub_->async()->RenewLease(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::StatusOr<std::vector<v1::SandboxLease>>> LeaseClient::List(std::string owner) {
  std::vector<v1::SandboxLease> out;
  v1::ListLeasesRequest request;
  request.set_owner(std::move(owner));
  request.set_page_size(1000);
  do {
    rpc::CallScope scope(nullptr, clock_->Now() + absl::Seconds(30), token_);
    v1::ListLeasesResponse response;
    grpc::Status s = co_await AwaitGrpc(
        [&](auto done) { stub_->async()->ListLeases(scope.context(), &request, &response, std::move(done)); });
    if (!s.ok()) co_return FromGrpcStatus(s);
    for (v1::SandboxLease& lease : *response.mutable_leases()) out.push_back(std::move(lease));
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  co_return out;
}

asio::awaitable<absl::StatusOr<v1::ForkLeaseResponse>> LeaseClient::Fork(v1::ForkLeaseRequest request) {
  rpc::CallScope scope(nullptr, clock_->Now() + absl::Seconds(90), token_);
  v1::ForkLeaseResponse response;
  grpc::Status s = co_await AwaitGrpc(
      [&](auto done) { stub_->async()->ForkLease(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::StatusOr<v1::SandboxLease>> LeaseClient::SetPaused(std::string lease_id, std::string owner,
                                                                         bool paused, absl::Duration ttl) {
  rpc::CallScope scope(nullptr, clock_->Now() + absl::Seconds(60), token_);
  v1::SetLeasePausedRequest request;
  request.set_lease_id(std::move(lease_id));
  request.set_owner(std::move(owner));
  request.set_paused(paused);
  if (ttl > absl::ZeroDuration()) ToProto(ttl, request.mutable_ttl());
  v1::SandboxLease response;
  grpc::Status s = co_await AwaitGrpc(
      [&](auto done) { stub_->async()->SetLeasePaused(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

absl::StatusOr<std::shared_ptr<sandbox::HostApi>> LeaseClient::Host(const v1::SandboxLease& lease) {
  std::shared_ptr<grpc::Channel> channel;
  {
    absl::MutexLock lock(&mu_);
    auto cached = channels_.find(lease.host_address());
    if (cached == channels_.end()) {
      auto made = MakeChannel(lease.host_address(), channel_options_);
      if (!made.ok()) {
        return absl::UnavailableError(absl::StrCat("cannot reach the host of sandbox ", lease.sandbox_id(), " at \"",
                                                   lease.host_address(), "\": ", made.status().message()));
      }
      cached = channels_.emplace(lease.host_address(), *std::move(made)).first;
    }
    channel = cached->second;
  }
  return std::make_shared<sandbox::HostClient>(lease.host_address(), std::move(channel),
                                               lease.capability_token().empty() ? token_ : lease.capability_token());
}

asio::awaitable<void> LeaseClient::AwaitHost(const v1::SandboxLease& lease, absl::Duration at_most) {
  std::shared_ptr<grpc::Channel> channel;
  {
    absl::MutexLock lock(&mu_);
    auto cached = channels_.find(lease.host_address());
    if (cached == channels_.end()) co_return;
    channel = cached->second;
  }
  // gRPC waits out a reconnect backoff (a second and more) before it dials a failed address again; a restarted
  // host answers within moments, so the backoff is reset and the channel watched until it connects.
  grpc_connectivity_state state = channel->GetState(false);
  if (state != GRPC_CHANNEL_TRANSIENT_FAILURE) co_return;
  const absl::Time until = ProcessNow() + at_most;
  while (state != GRPC_CHANNEL_READY && ProcessNow() < until) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE) grpc::experimental::ChannelResetConnectionBackoff(channel.get());
    co_await async::SleepFor(absl::Milliseconds(20));
    state = channel->GetState(true);
  }
}

template <class Response, class Start>
asio::awaitable<absl::StatusOr<Response>> LeaseClient::Unary(absl::Duration timeout, Start start) {
  rpc::CallScope scope(nullptr, clock_->Now() + timeout, token_);
  Response response;
  grpc::Status s = co_await AwaitGrpc([&](auto done) { start(scope.context(), &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> LeaseClient::RequestBuild(v1::RequestTemplateBuildRequest r) {
  co_return co_await Unary<v1::SandboxTemplate>(absl::Seconds(30), [&](auto* context, auto* response, auto done) {
    stub_->async()->RequestTemplateBuild(context, &r, response, std::move(done));
  });
}

asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> LeaseClient::StartBuild(v1::StartTemplateBuildRequest r) {
  co_return co_await Unary<v1::SandboxTemplate>(absl::Seconds(30), [&](auto* context, auto* response, auto done) {
    stub_->async()->StartTemplateBuild(context, &r, response, std::move(done));
  });
}

asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> LeaseClient::GetTemplate(v1::GetTemplateRequest r) {
  co_return co_await Unary<v1::SandboxTemplate>(absl::Seconds(30), [&](auto* context, auto* response, auto done) {
    stub_->async()->GetTemplate(context, &r, response, std::move(done));
  });
}

asio::awaitable<absl::Status> LeaseClient::DeleteTemplate(v1::GetTemplateRequest r) {
  auto deleted = co_await Unary<v1::DeleteSandboxTemplateResponse>(
      absl::Seconds(30), [&](auto* context, auto* response, auto done) {
        stub_->async()->DeleteTemplate(context, &r, response, std::move(done));
      });
  co_return deleted.status();
}

asio::awaitable<absl::StatusOr<v1::TemplateFile>> LeaseClient::PutFile(v1::TemplateFile file) {
  co_return co_await Unary<v1::TemplateFile>(absl::Seconds(60), [&](auto* context, auto* response, auto done) {
    stub_->async()->PutTemplateFile(context, &file, response, std::move(done));
  });
}

asio::awaitable<absl::StatusOr<v1::TemplateFile>> LeaseClient::GetFile(v1::GetTemplateFileRequest r) {
  co_return co_await Unary<v1::TemplateFile>(absl::Seconds(60), [&](auto* context, auto* response, auto done) {
    stub_->async()->GetTemplateFile(context, &r, response, std::move(done));
  });
}

}  // namespace corral::sandbox_api
