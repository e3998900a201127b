// LeaseClient::Host: the client of a lease's host, or an error a caller can answer with. A lease with no host
// address, or a replica whose TLS files cannot be read, used to give a null client that callers dereferenced.
// LeaseClient::AwaitHost: a channel to a restarted host connects again without waiting out gRPC's backoff.
#include "services/sandbox_api/lease_client.h"

#include "absl/strings/str_cat.h"
#include "boost/asio/io_context.hpp"
#include "corral/v1/sandbox.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "libs/async/testing/poll_await.h"
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

// A sandbox host that answers every call UNIMPLEMENTED: what a call gets once connected.
class SilentHost {
 public:
  // Serves on `port` (0: any); returns the port.
  int Start(int port) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    return port;
  }
  void Stop() {
    server_->Shutdown();
    server_.reset();
  }

 private:
  v1::SandboxHost::Service service_;
  std::unique_ptr<grpc::Server> server_;
};

// A host restarted moments ago: gRPC would fail a call at once until its reconnect backoff (about a second) ran
// out, and the e2b SDK reads that UNAVAILABLE as "the sandbox is not running". AwaitHost dials it again now.
TEST_F(LeaseClientTest, AwaitHostConnectsToARestartedHostWithoutWaitingOutTheBackoff) {
  SilentHost server;
  const int port = server.Start(0);
  ASSERT_GT(port, 0);
  const v1::SandboxLease lease = LeaseOn(absl::StrCat("127.0.0.1:", port));
  LeaseClient client = Client();
  auto host = client.Host(lease);
  ASSERT_TRUE(host.ok()) << host.status();
  boost::asio::io_context io;
  auto call = [&] { return async::PollAwait(io, (*host)->HostInfo(absl::Seconds(5))).status().code(); };
  ASSERT_EQ(call(), absl::StatusCode::kUnimplemented);  // connected

  server.Stop();
  EXPECT_EQ(call(), absl::StatusCode::kUnavailable);  // dialled while it was down: the channel backs off
  ASSERT_EQ(server.Start(port), port);
  EXPECT_EQ(call(), absl::StatusCode::kUnavailable);  // up again, but the channel still waits out its backoff
  async::PollAwait(io, client.AwaitHost(lease, absl::Seconds(5)));
  EXPECT_EQ(call(), absl::StatusCode::kUnimplemented);
  server.Stop();
}

TEST_F(LeaseClientTest, AwaitHostReturnsAtOnceForAHealthyOrUnknownHostAndGivesUpOnADeadOne) {
  LeaseClient client = Client();
  boost::asio::io_context io;
  async::PollAwait(io, client.AwaitHost(LeaseOn("127.0.0.1:7500"), absl::Hours(1)));  // never dialled
  SilentHost server;
  const v1::SandboxLease lease = LeaseOn(absl::StrCat("127.0.0.1:", server.Start(0)));
  auto host = client.Host(lease);
  ASSERT_TRUE(host.ok());
  (void)async::PollAwait(io, (*host)->HostInfo(absl::Seconds(5)));
  async::PollAwait(io, client.AwaitHost(lease, absl::Hours(1)));  // ready
  server.Stop();
  EXPECT_EQ(async::PollAwait(io, (*host)->HostInfo(absl::Seconds(5))).status().code(), absl::StatusCode::kUnavailable);
  async::PollAwait(io, client.AwaitHost(lease, absl::Milliseconds(100)));  // down for good: it gives up
}

}  // namespace
}  // namespace corral::sandbox_api
