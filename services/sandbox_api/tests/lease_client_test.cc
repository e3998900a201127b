// LeaseClient::Host: the client of a lease's host, or an error a caller can answer with. A lease with no host
// address, or a replica whose TLS files cannot be read, used to give a null client that callers dereferenced.
#include "services/sandbox_api/lease_client.h"

#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"

namespace corral::sandbox_api {
namespace {

using ::testing::HasSubstr;

v1::SandboxLease LeaseOn(const std::string& address) {
  v1::SandboxLease lease;
  lease.set_lease_id("l-1");
  lease.set_sandbox_id("s-1");
  lease.set_host_address(address);
  return lease;
}

class LeaseClientTest : public ::testing::Test {
 protected:
  LeaseClient Client(ChannelOptions options = {}) {
    // Never dialled: Host() makes channels, it does not call the scheduler.
    return LeaseClient(grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()), "cluster-token",
                       std::move(options), &clock_);
  }
  FakeClock clock_;
};

TEST_F(LeaseClientTest, ALeaseWithoutAHostAddressIsUnavailableNamingItsSandbox) {
  LeaseClient client = Client();
  auto host = client.Host(LeaseOn(""));
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(host.status().message(), HasSubstr("cannot reach the host of sandbox s-1"));
  EXPECT_THAT(host.status().message(), HasSubstr("empty service address"));
}

TEST_F(LeaseClientTest, UnreadableTlsFilesAreAnErrorForEveryLeaseNotANullClient) {
  ChannelOptions options;
  options.tls.ca_file = "/nonexistent/ca.pem";
  LeaseClient client = Client(options);
  for (int i = 0; i < 2; ++i) {  // the failure is not cached as a channel
    auto host = client.Host(LeaseOn("127.0.0.1:7500"));
    ASSERT_FALSE(host.ok());
    EXPECT_EQ(host.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(host.status().message(), HasSubstr("127.0.0.1:7500"));
  }
}

TEST_F(LeaseClientTest, AReachableAddressGivesAClient) {
  LeaseClient client = Client();
  auto host = client.Host(LeaseOn("127.0.0.1:7500"));
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_NE(*host, nullptr);
}

}  // namespace
}  // namespace corral::sandbox_api
