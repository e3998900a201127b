#include "libs/rpc/server_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral {
namespace {

using ::testing::HasSubstr;
using ::testing::Pair;

TEST(SplitHostPort, AcceptsV4V6AndPortZero) {
  EXPECT_THAT(SplitHostPort("127.0.0.1:7100"), IsOkAndHolds(Pair("127.0.0.1", 7100)));
  EXPECT_THAT(SplitHostPort("[::1]:0"), IsOkAndHolds(Pair("::1", 0)));
  EXPECT_THAT(SplitHostPort("0.0.0.0:65535"), IsOkAndHolds(Pair("0.0.0.0", 65535)));
}

TEST(JoinHostPort, BracketsV6AndRoundTrips) {
  EXPECT_EQ(JoinHostPort("127.0.0.1", 8080), "127.0.0.1:8080");
  EXPECT_EQ(JoinHostPort("::1", 8080), "[::1]:8080");
  EXPECT_THAT(SplitHostPort(JoinHostPort("::1", 8080)), IsOkAndHolds(Pair("::1", 8080)));
}

TEST(IsLoopbackHost, OnlyAddressesThisMachineAlone) {
  for (const char* host : {"127.0.0.1", "127.0.0.2", "127.255.255.254", "::1", "localhost"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "", "example.com", "127.0.0.1.example"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(SplitHostPort, RejectsMalformedAddresses) {
  for (const char* bad : {"", "7100", ":7100", "host:", "host:port", "host:70000", "host:-1"}) {
    EXPECT_THAT(SplitHostPort(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("HOST:PORT"))) << bad;
  }
}

TEST(ServerConfig, CommonFlagsParseAndValidate) {
  ServerConfig config;
  ConfigSchema schema("svc", "test");
  RegisterServerFlags(schema, &config);
  const char* argv[] = {"svc",
                        "--grpc-listen=0.0.0.0:7100",
                        "--log-format",
                        "json",
                        "--insecure",
                        "--shutdown-grace=3s",
                        "--tls-require-client-cert=false"};
  ASSERT_THAT(LoadConfig(schema, 7, argv), IsOk());
  EXPECT_EQ(config.grpc_listen, "0.0.0.0:7100");
  EXPECT_EQ(config.log.format, "json");
  EXPECT_TRUE(config.insecure);
  EXPECT_EQ(config.shutdown_grace, absl::Seconds(3));
  EXPECT_THAT(ValidateServerConfig(config), IsOk());
  config.metrics_listen = "nowhere";
  EXPECT_THAT(ValidateServerConfig(config), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("metrics_listen")));
}

TEST(ServerConfig, SecretIsRequiredUnlessInsecure) {
  ServerConfig config;
  EXPECT_THAT(LoadClusterSecret(config), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("--secret-file")));
  config.insecure = true;
  EXPECT_THAT(LoadClusterSecret(config), IsOk());
  config.secret_file = "/nonexistent/secret";
  EXPECT_THAT(LoadClusterSecret(config), StatusIs(absl::StatusCode::kNotFound));
}

TEST(Tls, InconsistentSettingsAreRejected) {
  TlsConfig tls;
  tls.cert_file = "/c.pem";
  EXPECT_THAT(MakeServerCredentials(tls), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key_file")));
  tls.key_file = "/k.pem";
  tls.require_client_cert = true;
  EXPECT_THAT(MakeServerCredentials(tls), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ca_file")));
  tls.require_client_cert = false;
  EXPECT_THAT(MakeServerCredentials(tls), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("/k.pem")));
  EXPECT_THAT(MakeServerCredentials(TlsConfig{}), IsOk());
}

}  // namespace
}  // namespace corral
