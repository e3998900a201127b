#include "services/scheduler/remote/proxy_client.h"

#include "absl/hash/hash.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "boost/asio/this_coro.hpp"
#include "libs/async/sleep.h"
#include "libs/core/clock.h"
#include "libs/http/client.h"
#include "libs/http/server.h"
#include "libs/http/url.h"
#include "libs/rpc/async_grpc.h"
#include "libs/rpc/status_conversion.h"
#include "services/scheduler/table/retry_backoff.h"

namespace corral::scheduler {

namespace asio = boost::asio;

absl::StatusOr<BaseUrl> ParseBaseUrl(const std::string& url) {
  auto parsed = http::ParseHttpUrl(url, "base URL");
  if (!parsed.ok()) return parsed.status();
  BaseUrl out;
  out.host = parsed->host;
  out.port = static_cast<uint16_t>(parsed->port);
  out.prefix = parsed->path;
  return out;
}

ProxyClient::ProxyClient(std::string address, std::shared_ptr<grpc::Channel> channel, std::string token)
    : address_(std::move(address)), stub_(v1::Proxy::NewStub(channel)), token_(std::move(token)) {}

asio::awaitable<absl::StatusOr<v1::OpenSessionResponse>> ProxyClient::Open(v1::OpenSessionRequest request,
                                                                           sandbox::CallOptions options) {
  rpc::CallScope scope(options.control, options.deadline, token_);
  v1::OpenSessionResponse response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->OpenSession(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::StatusOr<v1::CloseSessionResponse>> ProxyClient::Close(const std::string& env_id,
                                                                             v1::TrajectoryFormat format,
                                                                             absl::Duration timeout) {
  rpc::CallScope scope(nullptr, ProcessNow() + timeout, token_);
  v1::CloseSessionRequest request;
  request.set_env_id(env_id);
  request.set_format(format);
  v1::CloseSessionResponse response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->CloseSession(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::StatusOr<v1::Trajectory>> ProxyClient::Trajectory(const std::string& env_id,
                                                                        v1::TrajectoryFormat format,
                                                                        absl::Duration timeout) {
  rpc::CallScope scope(nullptr, ProcessNow() + timeout, token_);
  v1::GetTrajectoryRequest request;
  request.set_env_id(env_id);
  request.set_format(format);
  v1::Trajectory response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->GetTrajectory(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

void ProxyClient::CloseAsync(const std::string& env_id) {
  struct Call {
    rpc::CallScope scope{nullptr, ProcessNow() + absl::Seconds(10), ""};
    v1::CloseSessionRequest request;
    v1::CloseSessionResponse response;
  };
  auto* call = new Call;
  AttachBearer(*call->scope.context(), token_);
  call->request.set_env_id(env_id);
  stub_->async()->CloseSession(call->scope.context(), &call->request, &call->response,
                               [call](grpc::Status) { delete call; });
}

asio::awaitable<absl::Status> ProxyClient::Ack(const std::string& env_id, absl::Duration timeout) {
  rpc::CallScope scope(nullptr, ProcessNow() + timeout, token_);
  v1::AckTrajectoryRequest request;
  request.add_env_ids(env_id);
  v1::AckTrajectoryResponse response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->AckTrajectory(scope.context(), &request, &response, std::move(done)); });
  co_return FromGrpcStatus(s);
}

namespace {

// One unary call on `stub`'s callback API: `start(context, response, done)`.
template <class Response, class Start>
asio::awaitable<absl::StatusOr<Response>> Unary(absl::Time deadline, const std::string& token, Start start) {
  rpc::CallScope scope(nullptr, deadline, token);
  Response response;
  grpc::Status s = co_await rpc::AwaitGrpc([&](auto done) { start(scope.context(), &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

}  // namespace

asio::awaitable<absl::StatusOr<v1::UpdatePolicyResponse>> ProxyClient::UpdatePolicy(v1::UpdatePolicyRequest request,
                                                                                    absl::Time deadline) {
  co_return co_await Unary<v1::UpdatePolicyResponse>(deadline, token_, [&](auto* ctx, auto* response, auto done) {
    stub_->async()->UpdatePolicy(ctx, &request, response, std::move(done));
  });
}

asio::awaitable<absl::StatusOr<v1::PauseGenerationResponse>> ProxyClient::Pause(v1::PauseGenerationRequest request,
                                                                                absl::Time deadline) {
  co_return co_await Unary<v1::PauseGenerationResponse>(deadline, token_, [&](auto* ctx, auto* response, auto done) {
    stub_->async()->PauseGeneration(ctx, &request, response, std::move(done));
  });
}

asio::awaitable<absl::StatusOr<v1::ResumeGenerationResponse>> ProxyClient::Resume(v1::ResumeGenerationRequest request,
                                                                                  absl::Time deadline) {
  co_return co_await Unary<v1::ResumeGenerationResponse>(deadline, token_, [&](auto* ctx, auto* response, auto done) {
    stub_->async()->ResumeGeneration(ctx, &request, response, std::move(done));
  });
}

asio::awaitable<absl::StatusOr<LlmReply>> ProxyClient::Post(const BaseUrl& base, const std::string& env_token,
                                                            const std::string& path, std::string body,
                                                            absl::Duration timeout) {
  http::Request request;
  request.method(boost::beast::http::verb::post);
  request.target(base.prefix + path);
  request.version(11);
  request.set(boost::beast::http::field::host, absl::StrCat(base.host, ":", base.port));
  request.set(boost::beast::http::field::authorization, "Bearer " + env_token);
  request.set(boost::beast::http::field::content_type, "application/json");
  request.body() = std::move(body);
  request.prepare_payload();
  auto executor = co_await asio::this_coro::executor;
  // A proxy that is down (restarting: it keeps its sessions in its journal) is asked again with a growing pause
  // until `timeout`: a restart costs the call only time. The agent's SDKs do the same.
  const absl::Time give_up = ProcessNow() + timeout;
  // Kept-alive connections: thousands of concurrent episodes would otherwise run out of ephemeral ports.
  for (int attempt = 0;; ++attempt) {
    bool reused = false;
    auto connection = co_await pool_.Get(executor, base.host, base.port, give_up - ProcessNow(), &reused);
    absl::Status failed = connection.status();
    if (connection.ok()) {
      failed = co_await (*connection)->Send(request, give_up - ProcessNow());
      // A pooled connection the proxy closed meanwhile failed before any response byte: once more, fresh.
      if (!failed.ok() && reused && attempt == 0 && failed.code() == absl::StatusCode::kUnavailable) continue;
    }
    if (failed.ok()) {
      auto answer = co_await (*connection)->ReadAll(give_up - ProcessNow());
      if (answer.ok()) {
        const int status = (*connection)->status();
        pool_.Put(*std::move(connection));
        co_return LlmReply{status, *std::move(answer)};
      }
      failed = answer.status();
    }
    const absl::Duration pause =
        RetryDelay(kCallRetry, static_cast<uint32_t>(attempt) + 2, absl::Hash<std::string>()(env_token));
    if (failed.code() != absl::StatusCode::kUnavailable || ProcessNow() + pause >= give_up) co_return failed;
    co_await async::SleepFor(pause);
  }
}

}  // namespace corral::scheduler
