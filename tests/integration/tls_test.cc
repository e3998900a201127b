// TLS and mutual TLS through the server runner: certificates made by openssl for the test, a health check over
// a verified channel, and refusals without a client certificate or against an untrusted CA.
#include <sys/wait.h>

#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/rpc/channel.h"
#include "libs/rpc/status_conversion.h"
#include "tests/support/subprocess.h"

namespace corral {
namespace {

using ::grpc::health::v1::Health;

int Sh(const std::string& script, const std::string& log) {
  auto p = testing::Subprocess::Start({"/bin/sh", "-c", script}, log);
  if (!p.ok()) return -1;
  auto status = p->Wait(absl::Seconds(60));
  return status.ok() && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTestDir();
    // A CA, a server certificate for 127.0.0.1, a client certificate, and a second, untrusted CA.
    const std::string script = "cd " + dir_ + R"( &&
      openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=corral-test-ca &&
      openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.pem -days 1 -subj /CN=other-ca &&
      printf 'subjectAltName=IP:127.0.0.1\n' > san.ext &&
      openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 &&
      openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 -extfile san.ext &&
      openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=corral-client &&
      openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 1)";
    ASSERT_EQ(Sh(script, dir_ + "/openssl.log"), 0);
    auto service =
        testing::StartService(CORRAL_TEST_SERVER,
                              {"--insecure", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
                               "--tls-cert-file=" + dir_ + "/server.pem", "--tls-key-file=" + dir_ + "/server.key",
                               "--tls-ca-file=" + dir_ + "/ca.pem", "--tls-require-client-cert"},
                              dir_, "server");
    ASSERT_THAT(service, IsOk());
    service_.emplace(*std::move(service));
  }

  absl::Status Check(const TlsConfig& tls) {
    ChannelOptions options;
    options.tls = tls;
    options.retry_unavailable = false;
    auto channel = MakeChannel(service_->ready.grpc, options);
    if (!channel.ok()) return channel.status();
    grpc::ClientContext ctx;
    SetDeadline(ctx, absl::Seconds(10));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    return FromGrpcStatus(Health::NewStub(*channel)->Check(&ctx, req, &resp));
  }

  std::string dir_;
  std::optional<testing::RunningService> service_;
};

TEST_F(TlsTest, MutualTlsServesAVerifiedClient) {
  EXPECT_THAT(Check({.cert_file = dir_ + "/client.pem", .key_file = dir_ + "/client.key", .ca_file = dir_ + "/ca.pem"}),
              IsOk());
}

TEST_F(TlsTest, ClientsWithoutACertificateOrTrustingAnotherCaAreRefused) {
  EXPECT_THAT(Check({.ca_file = dir_ + "/ca.pem"}), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(
      Check({.cert_file = dir_ + "/client.pem", .key_file = dir_ + "/client.key", .ca_file = dir_ + "/other.pem"}),
      StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Check({}), StatusIs(absl::StatusCode::kUnavailable));  // plaintext against a TLS port
}

}  // namespace
}  // namespace corral
