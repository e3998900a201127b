// Starts corral-test-server (the real server runner) as a child process on loopback and checks what every
// Corral service promises: health, reflection-ready gRPC, a parseable /metrics with process metrics, and a
// SIGTERM drain that lets the in-flight call finish and exits 0.
#include <signal.h>
#include <sys/wait.h>

#include "corral/testing/v1/test_service.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/http/prometheus_text.h"
#include "libs/rpc/channel.h"
#include "tests/support/subprocess.h"

namespace corral {
namespace {

using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::testing::Gt;

class ServerRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTestDir();
    auto process = testing::Subprocess::Start(
        {CORRAL_TEST_SERVER, "--insecure", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
         "--shutdown-grace=30s", "--ready-file=" + dir_ + "/ready.json"},
        dir_ + "/server.log");
    ASSERT_THAT(process, IsOk());
    server_.emplace(std::move(*process));
    auto ready = testing::WaitForReadyFile(dir_ + "/ready.json", absl::Seconds(30), &*server_);
    ASSERT_THAT(ready, IsOk());
    ready_ = *ready;
    ChannelOptions options;
    options.retry_unavailable = false;
    auto channel = MakeChannel(ready_.grpc, options);
    ASSERT_THAT(channel, IsOk());
    channel_ = *channel;
  }

  absl::StatusOr<HealthCheckResponse::ServingStatus> Health(const std::string& service) {
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    grpc::Status status = Health::NewStub(channel_)->Check(&context, request, &response);
    if (!status.ok()) return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
    return response.status();
  }

  std::string dir_;
  std::optional<testing::Subprocess> server_;
  testing::ReadyInfo ready_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(ServerRunnerTest, ReportsServingForServerAndRegisteredService) {
  EXPECT_EQ(ready_.pid, server_->pid());
  EXPECT_THAT(Health(""), IsOkAndHolds(HealthCheckResponse::SERVING));
  EXPECT_THAT(Health("corral.testing.v1.TestService"), IsOkAndHolds(HealthCheckResponse::SERVING));
  EXPECT_THAT(Health("corral.v1.Nope"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ServerRunnerTest, MetricsEndpointParsesAndHasProcessMetrics) {
  auto body = http::HttpGet(ready_.metrics, "/metrics");
  ASSERT_THAT(body, IsOk());
  auto metrics = http::ParsePrometheusText(*body);
  ASSERT_THAT(metrics, IsOk()) << *body;
  EXPECT_THAT(metrics->Value("process_resident_memory_bytes"), IsOkAndHolds(Gt(1 << 20)));
  EXPECT_THAT(metrics->Value("process_open_fds"), IsOkAndHolds(Gt(2)));
  EXPECT_THAT(metrics->Value("process_threads"), IsOkAndHolds(Gt(1)));
  EXPECT_EQ(metrics->types.at("process_cpu_seconds_total"), "counter");
  EXPECT_THAT(metrics->Value("corral_build_info", {{"service", "test-server"}, {"version", "0.1.0"}}), IsOkAndHolds(1));
}

TEST_F(ServerRunnerTest, SigtermLetsInFlightCallFinishThenExitsZero) {
  auto stub = testing::v1::TestService::NewStub(channel_);
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(60));
  testing::v1::HoldRequest request;
  request.set_hold_ms(1500);
  auto reader = stub->Hold(&context, request);
  testing::v1::HoldEvent event;
  ASSERT_TRUE(reader->Read(&event));
  ASSERT_EQ(event.phase(), "started");  // the call is now in flight on the server

  ASSERT_TRUE(server_->Signal(SIGTERM));
  // Health stops saying SERVING (NOT_SERVING, or the call is refused outright) while the hold runs on.
  absl::StatusOr<HealthCheckResponse::ServingStatus> health = HealthCheckResponse::SERVING;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (health.ok() && *health == HealthCheckResponse::SERVING && absl::Now() < deadline) health = Health("");
  EXPECT_FALSE(health.ok() && *health == HealthCheckResponse::SERVING);

  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.phase(), "finished");
  EXPECT_FALSE(reader->Read(&event));
  EXPECT_TRUE(reader->Finish().ok());

  auto status = server_->Wait(absl::Seconds(30));
  ASSERT_THAT(status, IsOk()) << server_->Log();
  EXPECT_TRUE(WIFEXITED(*status)) << server_->Log();
  EXPECT_EQ(WEXITSTATUS(*status), 0) << server_->Log();
}

TEST_F(ServerRunnerTest, NewCallsAreRefusedWhileDraining) {
  auto stub = testing::v1::TestService::NewStub(channel_);
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(60));
  testing::v1::HoldRequest request;
  request.set_hold_ms(3000);
  auto reader = stub->Hold(&context, request);
  testing::v1::HoldEvent event;
  ASSERT_TRUE(reader->Read(&event));
  ASSERT_TRUE(server_->Signal(SIGTERM));

  // A fresh connection during the drain is refused rather than served.
  ChannelOptions options;
  options.retry_unavailable = false;
  absl::Status refused;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    auto fresh = MakeChannel(ready_.grpc, options);
    ASSERT_THAT(fresh, IsOk());
    grpc::ClientContext ctx;
    SetDeadline(ctx, absl::Seconds(2));
    HealthCheckRequest hreq;
    HealthCheckResponse hresp;
    grpc::Status s = Health::NewStub(*fresh)->Check(&ctx, hreq, &hresp);
    refused =
        s.ok() ? absl::OkStatus() : absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    if (s.ok() && hresp.status() != HealthCheckResponse::SERVING) refused = absl::UnavailableError("not serving");
  } while (refused.ok() && absl::Now() < deadline);
  EXPECT_THAT(refused, ::testing::Not(IsOk()));
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.phase(), "finished");
}

TEST(ServerRunnerStartup, RefusesToStartWithoutSecretAndSaysWhichFlag) {
  std::string dir = testing::MakeTestDir();
  auto process = testing::Subprocess::Start({CORRAL_TEST_SERVER, "--grpc-listen=127.0.0.1:0"}, dir + "/server.log");
  ASSERT_THAT(process, IsOk());
  auto status = process->Wait(absl::Seconds(30));
  ASSERT_THAT(status, IsOk());
  EXPECT_NE(WEXITSTATUS(*status), 0);
  EXPECT_THAT(process->Log(), ::testing::HasSubstr("--secret-file"));
}

TEST(ServerRunnerStartup, BadFlagExitsTwoWithMessage) {
  std::string dir = testing::MakeTestDir();
  auto process =
      testing::Subprocess::Start({CORRAL_TEST_SERVER, "--grpc-listen=nonsense", "--insecure"}, dir + "/server.log");
  ASSERT_THAT(process, IsOk());
  auto status = process->Wait(absl::Seconds(30));
  ASSERT_THAT(status, IsOk());
  EXPECT_NE(WEXITSTATUS(*status), 0);
  EXPECT_THAT(process->Log(), ::testing::HasSubstr("HOST:PORT"));
}

}  // namespace
}  // namespace corral
