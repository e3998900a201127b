// The proxy integration fixture: corral-fake-llm backends and a corral-proxy in front of them, started as real
// processes on loopback, with helpers for sessions (gRPC) and agent calls (HTTP, whole or streamed).
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"
#include "corral/v1/proxy.grpc.pb.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/core/token.h"
#include "libs/http/client.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"
#include "libs/rpc/status_conversion.h"
#include "tests/support/subprocess.h"

namespace corral {

// A streamed chat request for the fake backend: `content` is what it answers, word by word; `fake` its knobs
// (`{"inter_token_ms":100}`, `{"stall_after_chunks":2}`, ...).
inline std::string StreamBody(const std::string& content, const std::string& fake = "{}") {
  return absl::StrCat(R"({"model":"fake-model","stream":true,"messages":[{"role":"user","content":")", content,
                      R"("}],"fake":)", fake, "}");
}

struct HttpReply {
  int status = 0;
  std::string body;
};

class ProxyFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTestDir();
    secret_ = testing::WriteSecretFile(dir_);
    token_ = MintClusterToken(*TokenSigner::FromKeyFile(secret_));
  }
  void TearDown() override {
    stub_.reset();
    for (auto* s : {&proxy_}) {
      if (*s) {
        (*s)->process.Signal(SIGTERM);
        (void)(*s)->process.Wait(absl::Seconds(20));
      }
    }
  }

  // A fake backend; returns its "host:port".
  std::string StartBackend(std::vector<std::string> args = {}) {
    args.push_back("--listen=127.0.0.1:0");
    auto s = testing::StartService(CORRAL_FAKE_LLM, args, dir_, absl::StrCat("fake-llm-", backends_.size()));
    EXPECT_THAT(s, IsOk());
    if (!s.ok()) return "";
    backends_.push_back(*std::move(s));
    return backends_.back().ready.http;
  }

  void StartProxy(const std::vector<std::string>& upstreams, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--secret-file=" + secret_,        "--grpc-listen=127.0.0.1:0",
                                     "--metrics-listen=127.0.0.1:0",    "--http-listen=127.0.0.1:0",
                                     "--journal=" + dir_ + "/proxy.db", "--health-interval=200ms"};
    for (const auto& u : upstreams) args.push_back("--upstream=http://" + u);
    args.insert(args.end(), extra.begin(), extra.end());
    auto s = testing::StartService(CORRAL_PROXY, args, dir_, "proxy");
    ASSERT_THAT(s, IsOk());
    proxy_.emplace(*std::move(s));
    ChannelOptions options;
    options.retry_unavailable = false;
    stub_ = v1::Proxy::NewStub(*MakeChannel(proxy_->ready.grpc, options));
    const std::string http = proxy_->ready.http;
    host_ = http.substr(0, http.rfind(':'));
    port_ = static_cast<uint16_t>(std::stoi(http.substr(http.rfind(':') + 1)));
  }

  // Kills the proxy with SIGKILL and starts it again on the same journal, in front of `upstreams`.
  void KillAndRestartProxy(const std::vector<std::string>& upstreams) {
    proxy_->process.Signal(SIGKILL);
    ASSERT_THAT(proxy_->process.Wait(absl::Seconds(10)), IsOk());
    proxy_.reset();
    StartProxy(upstreams);
  }

  // Opens a session (on `stub`, by default the proxy's); returns its env token ("" on failure, with the test failed).
  std::string Open(const std::string& env_id, v1::SessionPolicy policy = {}, v1::Proxy::Stub* stub = nullptr) {
    grpc::ClientContext ctx;
    SetDeadline(ctx, absl::Seconds(10));
    AttachBearer(ctx, token_);
    v1::OpenSessionRequest req;
    req.set_env_id(env_id);
    *req.mutable_policy() = std::move(policy);
    v1::OpenSessionResponse resp;
    grpc::Status s = (stub != nullptr ? stub : stub_.get())->OpenSession(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.env_token();
  }

  absl::StatusOr<v1::Trajectory> Trajectory(const std::string& env_id,
                                            v1::TrajectoryFormat format = v1::TRAJECTORY_FORMAT_CALLS) {
    grpc::ClientContext ctx;
    SetDeadline(ctx, absl::Seconds(10));
    AttachBearer(ctx, token_);
    v1::GetTrajectoryRequest req;
    req.set_env_id(env_id);
    req.set_format(format);
    v1::Trajectory t;
    grpc::Status s = stub_->GetTrajectory(&ctx, req, &t);
    if (!s.ok()) return FromGrpcStatus(s);
    return t;
  }

  // One unary call on the proxy with the cluster token.
  template <class Request, class Response>
  absl::StatusOr<Response> Rpc(grpc::Status (v1::Proxy::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                               const Request& request, absl::Duration timeout = absl::Seconds(10)) {
    grpc::ClientContext ctx;
    SetDeadline(ctx, timeout);
    AttachBearer(ctx, token_);
    Response response;
    grpc::Status s = ((*stub_).*method)(&ctx, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  }

  // Tells the proxy its upstreams serve policy `version` now.
  absl::StatusOr<v1::UpdatePolicyResponse> UpdatePolicy(int64_t version) {
    v1::UpdatePolicyRequest req;
    req.set_version(version);
    return Rpc(&v1::Proxy::Stub::UpdatePolicy, req);
  }

  absl::StatusOr<v1::PauseGenerationResponse> Pause(v1::PauseMode mode, uint64_t sequence = 0,
                                                    absl::Duration abort_after = absl::ZeroDuration()) {
    v1::PauseGenerationRequest req;
    req.set_mode(mode);
    req.set_sequence(sequence);
    if (abort_after > absl::ZeroDuration()) ToProto(abort_after, req.mutable_abort_after());
    return Rpc(&v1::Proxy::Stub::PauseGeneration, req, absl::Seconds(30));
  }

  absl::StatusOr<v1::ResumeGenerationResponse> Resume(std::optional<int64_t> version, uint64_t sequence = 0) {
    v1::ResumeGenerationRequest req;
    if (version) req.set_version(*version);
    req.set_sequence(sequence);
    return Rpc(&v1::Proxy::Stub::ResumeGeneration, req);
  }

  // One whole HTTP exchange with a fake backend ("host:port"), e.g. its /admin endpoints.
  HttpReply Backend(const std::string& backend, const std::string& path, const std::string& body = "") {
    http::Request req{body.empty() ? boost::beast::http::verb::get : boost::beast::http::verb::post, path, 11};
    req.set(boost::beast::http::field::host, backend);
    req.set(boost::beast::http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    return Exchange(backend.substr(0, backend.rfind(':')),
                    static_cast<uint16_t>(std::stoi(backend.substr(backend.rfind(':') + 1))), std::move(req));
  }

  absl::Status Close(const std::string& env_id) {
    grpc::ClientContext ctx;
    SetDeadline(ctx, absl::Seconds(10));
    AttachBearer(ctx, token_);
    v1::CloseSessionRequest req;
    req.set_env_id(env_id);
    v1::CloseSessionResponse resp;
    return FromGrpcStatus(stub_->CloseSession(&ctx, req, &resp));
  }

  http::Request MakeRequest(boost::beast::http::verb verb, const std::string& path, const std::string& token,
                            const std::string& body) {
    http::Request req{verb, path, 11};
    req.set(boost::beast::http::field::host, absl::StrCat(host_, ":", port_));
    req.set(boost::beast::http::field::content_type, "application/json");
    if (!token.empty()) req.set(boost::beast::http::field::authorization, "Bearer " + token);
    req.body() = body;
    return req;
  }

  // One whole HTTP exchange with the proxy.
  HttpReply Post(const std::string& path, const std::string& token, const std::string& body,
                 boost::beast::http::verb verb = boost::beast::http::verb::post) {
    return Exchange(host_, port_, MakeRequest(verb, path, token, body));
  }

  HttpReply Exchange(const std::string& host, uint16_t port, http::Request request) {
    boost::asio::io_context ioc;
    auto f =
        boost::asio::co_spawn(ioc, http::Fetch(ioc.get_executor(), host, port, std::move(request), absl::Seconds(30)),
                              boost::asio::use_future);
    ioc.run();
    auto r = f.get();
    if (!r.ok()) return HttpReply{-1, std::string(r.status().message())};
    return HttpReply{r->status, r->body};
  }

  // A streamed exchange: `on_piece` sees each piece as it arrives (with the time since the request); returning
  // false stops reading (the connection is dropped). Returns everything read.
  std::string Stream(const std::string& token, const std::string& body,
                     const std::function<bool(const std::string&, absl::Duration)>& on_piece) {
    boost::asio::io_context ioc;
    auto f = boost::asio::co_spawn(
        ioc,
        [&]() -> boost::asio::awaitable<std::string> {
          const absl::Time start = absl::Now();
          auto c = co_await http::ClientConnection::Connect(ioc.get_executor(), host_, port_, absl::Seconds(5));
          if (!c.ok()) co_return std::string("<connect failed>");
          http::Request req = MakeRequest(boost::beast::http::verb::post, "/v1/chat/completions", token, body);
          if (!(co_await (*c)->Send(req, absl::Seconds(30))).ok()) co_return std::string("<send failed>");
          std::string all;
          while (true) {
            auto piece = co_await (*c)->ReadSome(absl::Seconds(30));
            if (!piece.ok() || piece->empty()) break;
            all += *piece;
            if (!on_piece(*piece, absl::Now() - start)) break;
          }
          co_return all;
        },
        boost::asio::use_future);
    ioc.run();
    return f.get();
  }

  std::string dir_, secret_, token_, host_;
  uint16_t port_ = 0;
  std::vector<testing::RunningService> backends_;
  std::optional<testing::RunningService> proxy_;
  std::unique_ptr<v1::Proxy::Stub> stub_;
};

}  // namespace corral
