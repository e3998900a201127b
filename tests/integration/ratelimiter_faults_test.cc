// The real corral-ratelimiter under faults beyond kill -9: a holder stopped past its TTL (SIGSTOP) learns on
// resume that its lease is gone, and the next holder's token is larger than its own, so a resource that keeps the
// largest token it has seen refuses the paused one; a holder whose limiter falls silent learns it from its own
// clock; a step of the limiter's wall clock ends no lease early; an acquire waiting for a session that never
// opens ends at its wait.
#include <glob.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "absl/synchronization/notification.h"
#include "tests/integration/ratelimiter_fixture.h"

namespace corral::limiter_test {
namespace {

// The token `corral limiter acquire` printed with its grant; 0 before it did.
uint64_t PrintedToken(const std::string& log) {
  const size_t at = log.find("fencing_token=");
  return at == std::string::npos ? 0 : std::strtoull(log.c_str() + at + 14, nullptr, 10);
}

TEST_F(RateLimiterTest, AHolderPausedPastItsTtlIsToldItLostTheLeaseAndTheNextHolderHasALargerToken) {
  Start("  - {name: db_writer, kind: concurrency, permits: 1}\n", {"--learning-mode=false"});
  auto holder =
      testing::Subprocess::Start({CORRAL_CLI, "limiter", "acquire", "--addr", service_->ready.grpc, "--secret-file",
                                  dir_ + "/secret", "--limit", "db_writer", "--ttl", "1", "--hold", "600"},
                                 dir_ + "/holder.log");
  ASSERT_THAT(holder, IsOk());
  ASSERT_TRUE(testing::WaitUntil([&] { return PrintedToken(holder->Log()) > 0; }, absl::Seconds(30))) << holder->Log();
  const uint64_t paused_token = PrintedToken(holder->Log());

  // Paused with its session stream open: only the TTL can end the lease.
  ASSERT_TRUE(holder->Signal(SIGSTOP));
  ASSERT_TRUE(testing::WaitUntil([&] { return InUse("db_writer") == 0; }, absl::Seconds(20)));
  auto next = Client("next");
  auto permit = next->Acquire({.limit = "db_writer", .wait_timeout = absl::Seconds(10)});
  ASSERT_THAT(permit, IsOk());
  EXPECT_GT(permit->lease().fencing_token(), paused_token);
  EXPECT_TRUE(permit->valid());

  // Resumed and asked to stop holding: it does not claim to have held the lease throughout.
  ASSERT_TRUE(holder->Signal(SIGCONT));
  ASSERT_TRUE(holder->Signal(SIGINT));
  auto exit_status = holder->Wait(absl::Seconds(20));
  ASSERT_THAT(exit_status, IsOk());
  EXPECT_EQ(WEXITSTATUS(*exit_status), 1);
  EXPECT_THAT(holder->Log(), HasSubstr("the lease was lost while held"));
  EXPECT_EQ(InUse("db_writer"), 1);  // still the next holder's alone
}

TEST_F(RateLimiterTest, AHolderWhoseLimiterFallsSilentSeesItsLeaseInvalidOnceItsTtlRunsOutOnItsOwnClock) {
  Start("  - {name: db_writer, kind: concurrency, permits: 1}\n", {"--learning-mode=false"});
  auto client = Client("holder");
  auto permit = client->Acquire({.limit = "db_writer", .lease_ttl = absl::Seconds(1)});
  ASSERT_THAT(permit, IsOk());
  EXPECT_TRUE(permit->valid());
  EXPECT_GT(permit->lease().fencing_token(), 0u);
  // A stopped limiter neither renews the lease nor says that it ended: the client's monotonic clock alone tells.
  ASSERT_TRUE(service_->process.Signal(SIGSTOP));
  const bool invalidated = testing::WaitUntil([&] { return !permit->valid(); }, absl::Seconds(20));
  ASSERT_TRUE(service_->process.Signal(SIGCONT));
  EXPECT_TRUE(invalidated);
}

// An acquire waiting without blocking its caller (the services' coroutines) ends soon after its wait even when
// the limiter falls silent with the session open: before, its callback waited for as long as the limiter did.
TEST_F(RateLimiterTest, AnAsyncAcquireEndsSoonAfterItsWaitWhenTheLimiterFallsSilent) {
  Start("  - {name: db_writer, kind: concurrency, permits: 1}\n", {"--learning-mode=false"});
  auto holder = Client("holder");
  auto held = holder->Acquire({.limit = "db_writer"});
  ASSERT_THAT(held, IsOk());
  auto waiter = Client("waiter");
  absl::Notification done;
  absl::Status outcome;
  waiter->AcquireAsync({.limit = "db_writer", .wait_timeout = absl::Seconds(3)},
                       [&](absl::StatusOr<ratelimiter::ScopedPermit> permit) {
                         outcome = permit.status();
                         done.Notify();
                       });
  ASSERT_TRUE(service_->process.Signal(SIGSTOP));  // queued behind the holder, then nothing is said
  const bool ended = done.WaitForNotificationWithTimeout(absl::Seconds(40));
  ASSERT_TRUE(service_->process.Signal(SIGCONT));
  ASSERT_TRUE(ended);
  EXPECT_EQ(outcome.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(outcome.message(), HasSubstr("no reply from the ratelimiter in time"));
}

// An acquire made while the client waits for a limiter that took the connection and never answers (one paused
// as it started, a link that lost its replies) ends at its wait: before, it waited as long as gRPC's connect did
// (20 s), and a limiter restarted moments after a backward step of the wall clock kept it waiting by the step.
TEST(RateLimitClientTest, AnAcquireWaitingForASessionThatNeverOpensEndsAtItsWait) {
  // A listener that never accepts: the kernel completes each connection, and nothing is ever said on it.
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 16), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ClientOptions options;
  options.address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  options.client_id = "waiter";
  options.start_unreachable = true;
  options.connect_timeout = absl::Milliseconds(100);
  auto client = RateLimitClient::Connect(options);
  ASSERT_THAT(client, IsOk());
  absl::Notification done;
  absl::Status outcome;
  (*client)->AcquireAsync({.limit = "db_writer", .wait_timeout = absl::Seconds(1)},
                          [&](absl::StatusOr<ratelimiter::ScopedPermit> permit) {
                            outcome = permit.status();
                            done.Notify();
                          });
  const bool ended = done.WaitForNotificationWithTimeout(absl::Seconds(10));  // before: about 20 s
  client->reset();
  close(listener);
  ASSERT_TRUE(ended);
  EXPECT_EQ(outcome.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(outcome.message(), HasSubstr("stayed unreachable while the request waited"));
}

// Debian's libfaketime, or "" when `faketime` is not installed.
std::string Libfaketime() {
  glob_t found{};
  std::string path;
  if (glob("/usr/lib/*/faketime/libfaketime.so.1", 0, nullptr, &found) == 0 && found.gl_pathc > 0) {
    path = found.gl_pathv[0];
  }
  globfree(&found);
  return path;
}

TEST_F(RateLimiterTest, AStepOfTheLimitersWallClockEndsNoLeaseEarly) {
  const std::string faketime = Libfaketime();
  if (faketime.empty()) GTEST_SKIP() << "needs Debian's faketime (scripts/bootstrap installs it)";
  const std::string offset_file = dir_ + "/faketime";
  std::ofstream(offset_file) << "+0\n";
  // The limiter's wall clock follows the file, read at every call; its monotonic clock is left alone, as an NTP
  // step leaves it.
  const std::vector<std::pair<const char*, std::string>> env = {{"LD_PRELOAD", faketime},
                                                                {"FAKETIME_TIMESTAMP_FILE", offset_file},
                                                                {"FAKETIME_NO_CACHE", "1"},
                                                                {"FAKETIME_DONT_FAKE_MONOTONIC", "1"}};
  for (const auto& [name, value] : env) setenv(name, value.c_str(), 1);
  Start("  - {name: db_writer, kind: concurrency, permits: 1}\n", {"--learning-mode=false"});
  for (const auto& [name, value] : env) unsetenv(name);
  std::stringstream maps;
  maps << std::ifstream("/proc/" + std::to_string(service_->process.pid()) + "/maps").rdbuf();
  ASSERT_THAT(maps.str(), HasSubstr("libfaketime")) << "the limiter does not run under faketime";

  auto client = Client("holder");
  auto permit = client->Acquire({.limit = "db_writer", .lease_ttl = absl::Seconds(30)});
  ASSERT_THAT(permit, IsOk());
  std::ofstream(offset_file) << "+3600\n";  // an hour forward
  // Over the next 8 s (the limiter's sweep, which wakes its timers, runs every 5 s) the lease stays held and
  // nobody else gets the permit.
  const absl::Time watch_until = absl::Now() + absl::Seconds(8);
  while (absl::Now() < watch_until) {
    ASSERT_EQ(InUse("db_writer"), 1) << "the lease ended when the limiter's wall clock jumped";
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_TRUE(permit->valid());
  EXPECT_THAT(Client("newcomer")->TryAcquire({.limit = "db_writer"}), StatusIs(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace corral::limiter_test
