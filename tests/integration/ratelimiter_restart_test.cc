// corral-ratelimiter restarted under its clients: a kill -9 under load never over-grants, a lease held across
// it stays held, an acquire made while it is down waits for it (or fails once the wait is over), and learning mode
// says why it holds a waiter.
#include "tests/integration/ratelimiter_fixture.h"

namespace corral {
namespace {

using namespace limiter_test;  // NOLINT: the fixture and its helpers
using ::testing::HasSubstr;

TEST_F(RateLimiterTest, KillNineRestartNeverOverGrantsAndEveryClientRecovers) {
  const std::string limits = "  - {name: code_exec, kind: concurrency, permits: 2}\n";
  // Without a snapshot (state_path: none) every start learns, the first one too; wait it out before the load.
  const std::vector<std::string> flags = {"--max-lease-ttl=3s", "--default-lease-ttl=1s", "--state-path=none"};
  Start(limits, flags);
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        auto s = Status();
        return s.ok() && !s->learning_mode();
      },
      absl::Seconds(30)));
  const std::string address = service_->ready.grpc;

  std::vector<std::unique_ptr<RateLimitClient>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(Client("worker-" + std::to_string(i)));
  PermitLoad load(clients, "code_exec", absl::Milliseconds(20));
  ASSERT_TRUE(testing::WaitUntil([&] { return load.grants >= 20; }, absl::Seconds(30)));
  ASSERT_TRUE(service_->process.Signal(SIGKILL));
  ASSERT_THAT(service_->process.Wait(absl::Seconds(10)), IsOk());
  load.restarted = true;
  Start(limits, flags, address);  // same port: the clients reconnect and re-claim what they hold
  EXPECT_TRUE(testing::WaitUntil(
      [&] {
        for (auto& g : load.after_restart) {
          if (g < 3) return false;
        }
        return true;
      },
      absl::Seconds(60)));
  load.Stop();
  EXPECT_LE(load.max_holders, 2);
  for (auto& c : clients) EXPECT_GE(c->connections(), 2);
}

TEST_F(RateLimiterTest, AConfigWithoutStatePathGrantsAtOnceAndAKillNineRestartNeverOverGrants) {
  // No state_path: the snapshot goes beside the config file. The default max TTL (5 min): without the snapshot
  // this restart would learn for five minutes. A short default TTL lets a lease whose grant the kill swallowed
  // (committed, never answered) expire while the test watches.
  const std::string limits = "  - {name: code_exec, kind: concurrency, permits: 2}\n";
  const std::vector<std::string> flags = {"--default-lease-ttl=3s"};
  Start(limits, flags);
  auto first = Status();
  ASSERT_THAT(first, IsOk());
  EXPECT_FALSE(first->learning_mode());  // a first start has nothing to learn
  EXPECT_TRUE(first->durable_leases());
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/limiter.leases.db"));
  {
    auto client = Client("first");
    const absl::Time asked = absl::Now();
    auto permit = client->Acquire({.limit = "code_exec", .wait_timeout = absl::Seconds(5)});
    ASSERT_THAT(permit, IsOk());
    EXPECT_LT(absl::Now() - asked, absl::Seconds(1));
    ASSERT_THAT(permit->Release(), IsOk());
  }
  const std::string address = service_->ready.grpc;

  std::vector<std::unique_ptr<RateLimitClient>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(Client("worker-" + std::to_string(i)));
  PermitLoad load(clients, "code_exec", absl::Milliseconds(50));  // held across the restart too
  ASSERT_TRUE(testing::WaitUntil([&] { return load.grants >= 20 && load.holders == 2; }, absl::Seconds(30)));
  ASSERT_TRUE(service_->process.Signal(SIGKILL));
  ASSERT_THAT(service_->process.Wait(absl::Seconds(10)), IsOk());
  load.restarted = true;
  Start(limits, flags, address);
  const absl::Time ready = absl::Now();
  auto after = Status();
  ASSERT_THAT(after, IsOk());
  EXPECT_FALSE(after->learning_mode());
  // Granting resumes within seconds (the clients' reconnect back-off), not after a five-minute learning mode.
  EXPECT_TRUE(testing::WaitUntil([&] { return load.grants_after_restart() >= 10; }, absl::Seconds(10)));
  const absl::Duration resumed = absl::Now() - ready;
  load.Stop();
  EXPECT_LT(resumed, absl::Seconds(10));
  EXPECT_LE(load.max_holders, 2);
  // Every permit comes back, the restored ones included. Releases are one-way messages on the session, and an
  // orphaned grant lives until its TTL, so this waits for the count instead of reading it once.
  EXPECT_TRUE(testing::WaitUntil([&] { return InUse("code_exec") == 0; }, absl::Seconds(15)))
      << InUse("code_exec") << " permits still in use";
}

// A lease held across a kill -9 stays held after the restart, whichever key signed it: the holder re-claims it
// and a newcomer waits. With --insecure the restarted limiter signs with a new random key; it once dropped the
// snapshot's leases for not verifying and granted the newcomer at once — two holders of one permit.
class RateLimiterRestartTest : public RateLimiterTest, public ::testing::WithParamInterface<bool> {};

TEST_P(RateLimiterRestartTest, AKillNineUnderAHeldLeaseNeverLetsANewcomerIn) {
  insecure_ = GetParam();
  const std::string limits = "  - {name: one, kind: concurrency, permits: 1}\n";
  Start(limits);  // no state_path: the snapshot beside the config
  const std::string address = service_->ready.grpc;
  auto holder = Client("holder");
  auto held = holder->Acquire({.limit = "one", .wait_timeout = absl::Seconds(5)});
  ASSERT_THAT(held, IsOk());
  ASSERT_TRUE(service_->process.Signal(SIGKILL));
  ASSERT_THAT(service_->process.Wait(absl::Seconds(10)), IsOk());
  Start(limits, {}, address);
  EXPECT_THAT(service_->process.Log(), HasSubstr("1 lease(s) still held from before this start"));
  ASSERT_TRUE(testing::WaitUntil([&] { return holder->connections() >= 2; }, absl::Seconds(10)));
  EXPECT_EQ(InUse("one"), 1);

  auto newcomer = Client("newcomer");
  auto refused = newcomer->Acquire({.limit = "one", .wait_timeout = absl::Seconds(1)});
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
  // The holder still holds (its re-claim was accepted), and its release lets the newcomer in.
  EXPECT_TRUE(held->valid());
  ASSERT_THAT(held->Release(), IsOk());
  auto granted = newcomer->Acquire({.limit = "one", .wait_timeout = absl::Seconds(5)});
  EXPECT_THAT(granted, IsOk());
  EXPECT_EQ(InUse("one"), 1);
}

INSTANTIATE_TEST_SUITE_P(EachMode, RateLimiterRestartTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& mode) {
                           return mode.param ? "Insecure" : "SecretFile";
                         });

TEST_F(RateLimiterTest, AnAcquireMadeWhileTheLimiterRestartsWaitsForItInsteadOfFailing) {
  const std::string limits = "  - {name: code_exec, kind: concurrency, permits: 3}\n";
  Start(limits);  // its lease snapshot beside the config: the restart grants at once
  const std::string address = service_->ready.grpc;
  auto client = Client("tools");
  ASSERT_NE(client, nullptr);
  auto before = client->Acquire({.limit = "code_exec", .wait_timeout = absl::Seconds(5)});
  ASSERT_THAT(before, IsOk());
  ASSERT_TRUE(service_->process.Signal(SIGKILL));
  ASSERT_THAT(service_->process.Wait(absl::Seconds(10)), IsOk());
  ASSERT_TRUE(testing::WaitUntil([&] { return !client->connected(); }, absl::Seconds(10)));

  // Asked while the limiter is down, blocking and async alike: both wait for the restart.
  std::optional<absl::StatusOr<ratelimiter::ScopedPermit>> during;
  std::thread waiter([&] { during = client->Acquire({.limit = "code_exec", .wait_timeout = absl::Seconds(30)}); });
  absl::Notification async_done;
  absl::Status async_status = absl::UnknownError("not run");
  std::optional<ratelimiter::ScopedPermit> async_permit;
  client->AcquireAsync({.limit = "code_exec", .wait_timeout = absl::Seconds(30)},
                       [&](absl::StatusOr<ratelimiter::ScopedPermit> p) {
                         async_status = p.status();
                         if (p.ok()) async_permit = *std::move(p);
                         async_done.Notify();
                       });
  absl::SleepFor(absl::Seconds(1));  // the outage the requests must outlast (not a wait for an event)
  EXPECT_FALSE(async_done.HasBeenNotified());
  Start(limits, {}, address);
  waiter.join();
  ASSERT_TRUE(during.has_value());
  EXPECT_THAT(*during, IsOk());
  ASSERT_TRUE(async_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_THAT(async_status, IsOk());
  // `before` was re-claimed: with both waiters, every permit is held, none twice.
  EXPECT_TRUE(before->valid());
  EXPECT_EQ(InUse("code_exec"), 3);
}

// A service (re)started while its limiter is down starts anyway — the sandbox API's fault run found a replica
// that exited at start because the limiter was paused — and what needs a permit waits for the limiter.
TEST_F(RateLimiterTest, AServicesClientStartsWhileTheLimiterIsDownAndItsAcquireWaitsForIt) {
  const std::string limits = "  - {name: code_exec, kind: concurrency, permits: 1}\n";
  Start(limits);
  const std::string address = service_->ready.grpc;
  ASSERT_TRUE(service_->process.Signal(SIGKILL));
  ASSERT_THAT(service_->process.Wait(absl::Seconds(10)), IsOk());
  auto client = RateLimitClient::ConnectService(address, token_, "late-service", ChannelOptions{}, false);
  ASSERT_THAT(client, IsOk());
  EXPECT_FALSE((*client)->connected());
  std::optional<absl::StatusOr<ratelimiter::ScopedPermit>> permit;
  std::thread waiter([&] { permit = (*client)->Acquire({.limit = "code_exec", .wait_timeout = absl::Seconds(30)}); });
  Start(limits, {}, address);
  waiter.join();
  ASSERT_TRUE(permit.has_value());
  EXPECT_THAT(*permit, IsOk());
  EXPECT_EQ(InUse("code_exec"), 1);
  // Credentials the limiter refuses still fail at start.
  EXPECT_THAT(RateLimitClient::ConnectService(address, "not-a-token", "forger", ChannelOptions{}, false).status(),
              StatusIs(absl::StatusCode::kUnauthenticated));
}

TEST_F(RateLimiterTest, AnAcquireWhileTheLimiterStaysDownFailsUnavailableAfterTheDisconnectedWait) {
  Start("  - {name: code_exec, kind: concurrency, permits: 2}\n");
  ClientOptions options;
  options.address = service_->ready.grpc;
  options.token = token_;
  options.client_id = "lonely";
  options.max_reconnect_backoff = absl::Milliseconds(200);
  options.max_disconnected_wait = absl::Seconds(1);
  auto client = RateLimitClient::Connect(options);
  ASSERT_THAT(client, IsOk());
  ASSERT_TRUE(service_->process.Signal(SIGKILL));
  ASSERT_THAT(service_->process.Wait(absl::Seconds(10)), IsOk());
  ASSERT_TRUE(testing::WaitUntil([&] { return !(*client)->connected(); }, absl::Seconds(10)));
  const absl::Time asked = absl::Now();
  auto permit = (*client)->Acquire({.limit = "code_exec", .wait_timeout = absl::Seconds(30)});
  EXPECT_THAT(permit.status(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("stayed unreachable")));
  EXPECT_GE(absl::Now() - asked, absl::Seconds(1));
  // Never waiting: TryAcquire still answers at once.
  EXPECT_THAT((*client)->TryAcquire({.limit = "code_exec"}).status(), StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(RateLimiterTest, WithoutASnapshotAWaiterHeldByLearningModeIsToldWhyAndForHowLong) {
  Start("  - {name: code_exec, kind: concurrency, permits: 2}\n", {"--max-lease-ttl=1m", "--state-path=none"});
  auto client = Client("worker");
  auto permit = client->Acquire({.limit = "code_exec", .wait_timeout = absl::Milliseconds(300)});
  EXPECT_THAT(permit.status(), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                        HasSubstr("without a lease snapshot (state_path) and is in learning mode")));
  auto status = testing::Subprocess::Start(
      {CORRAL_CLI, "limiter", "status", "--addr", service_->ready.grpc, "--secret-file", dir_ + "/secret"},
      dir_ + "/status.log");
  ASSERT_THAT(status, IsOk());
  EXPECT_THAT(status->Wait(absl::Seconds(30)), IsOkAndHolds(0));
  EXPECT_THAT(status->Log(), HasSubstr("(in memory only), LEARNING MODE for "));
}

}  // namespace
}  // namespace corral
