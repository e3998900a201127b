// corral-ratelimiter as a real process on loopback, driven by the real client library and CLI: sessions over
// the wire, a SIGKILLed holder, a client that stops keepalives, and a kill -9 restart under load.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "corral/v1/ratelimit.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/core/token.h"
#include "libs/http/prometheus_text.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"
#include "libs/rpc/status_conversion.h"
#include "services/ratelimiter/client/ratelimit_client.h"
#include "tests/support/subprocess.h"

namespace corral {
namespace {

using ratelimiter::ClientOptions;
using ratelimiter::PermitRequest;
using ratelimiter::RateLimitClient;
using ::testing::HasSubstr;

// Clients acquiring, holding for `hold` and releasing one permit of `limit` in a loop, counting how many hold at
// once (never more than the limit, restarts included) and how many grants came after `restarted` was set.
struct PermitLoad {
  PermitLoad(std::vector<std::unique_ptr<RateLimitClient>>& clients, std::string limit, absl::Duration hold)
      : after_restart(clients.size()) {
    for (size_t i = 0; i < clients.size(); ++i) {
      workers.emplace_back([this, &client = *clients[i], limit, hold, i] {
        while (!stop) {
          auto permit = client.Acquire({.limit = limit, .wait_timeout = absl::Seconds(20)});
          if (!permit.ok()) continue;  // UNAVAILABLE while the limiter is down: try again
          int now = ++holders;
          int seen = max_holders;
          while (now > seen && !max_holders.compare_exchange_weak(seen, now)) {
          }
          ++grants;
          if (restarted) ++after_restart[i];
          absl::SleepFor(hold);  // the "work" done under the permit
          --holders;             // stop counting before the permit goes back
          (void)permit->Release();
        }
      });
    }
  }
  ~PermitLoad() { Stop(); }
  void Stop() {
    stop = true;
    for (auto& w : workers) {
      if (w.joinable()) w.join();
    }
  }
  int grants_after_restart() const {
    int total = 0;
    for (const auto& g : after_restart) total += g;
    return total;
  }

  std::atomic<int> holders = 0, max_holders = 0, grants = 0;
  std::atomic<bool> restarted = false, stop = false;
  std::vector<std::atomic<int>> after_restart;
  std::vector<std::thread> workers;
};

class RateLimiterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTestDir();
    token_ = MintClusterToken(*TokenSigner::FromKeyFile(testing::WriteSecretFile(dir_)));
  }

  void Start(const std::string& limits_yaml, std::vector<std::string> extra = {},
             const std::string& listen = "127.0.0.1:0") {
    std::ofstream(dir_ + "/limiter.yaml") << "limits:\n" << limits_yaml;
    std::vector<std::string> args = {"--config=" + dir_ + "/limiter.yaml",
                                     insecure_ ? "--insecure" : "--secret-file=" + dir_ + "/secret",
                                     "--grpc-listen=" + listen, "--metrics-listen=127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto service = testing::StartService(CORRAL_RATELIMITER, args, dir_, "ratelimiter");
    ASSERT_THAT(service, IsOk());
    service_.reset();
    service_.emplace(*std::move(service));
    ChannelOptions options;
    options.retry_unavailable = false;
    stub_ = v1::RateLimiter::NewStub(*MakeChannel(service_->ready.grpc, options));
  }

  std::unique_ptr<RateLimitClient> Client(const std::string& id) {
    ClientOptions options;
    options.address = service_->ready.grpc;
    options.token = token_;
    options.client_id = id;
    options.max_reconnect_backoff = absl::Milliseconds(200);
    auto client = RateLimitClient::Connect(options);
    EXPECT_THAT(client, IsOk());
    return client.ok() ? *std::move(client) : nullptr;
  }

  absl::StatusOr<v1::GetStatusResponse> Status() {
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    AttachBearer(context, token_);
    v1::GetStatusResponse response;
    grpc::Status s = stub_->GetStatus(&context, v1::GetStatusRequest(), &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  }

  // One limit's status row; nullopt when the call fails or the limit is unknown.
  std::optional<v1::LimitStatus> Row(const std::string& limit) {
    auto status = Status();
    if (!status.ok()) return std::nullopt;
    for (const auto& l : status->limits()) {
      if (l.limit() == limit) return l;
    }
    return std::nullopt;
  }
  int64_t InUse(const std::string& limit) {
    auto row = Row(limit);
    return row ? row->in_use() : -1;
  }
  int64_t Waiters(const std::string& limit) {
    auto row = Row(limit);
    return row ? static_cast<int64_t>(row->waiters()) : -1;
  }

  std::string dir_;
  std::string token_;
  bool insecure_ = false;  // --insecure (a new random signing key every start) instead of --secret-file
  std::optional<testing::RunningService> service_;
  std::unique_ptr<v1::RateLimiter::Stub> stub_;
};

TEST_F(RateLimiterTest, AdjustCorrectsATokenBucketByRpcAndOnASessionAndRefusesConcurrencyLimits) {
  Start(
      "  - {name: tpm, kind: rate, rate_per_s: 1, burst: 1000}\n"
      "  - {name: gpu, kind: concurrency, permits: 2}\n",
      {"--learning-mode=false"});
  auto adjust = [&](const std::string& limit, int64_t tokens) -> absl::StatusOr<double> {
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    AttachBearer(context, token_);
    v1::AdjustRequest request;
    request.set_limit(limit);
    request.set_tokens(tokens);
    v1::AdjustResponse response;
    grpc::Status s = stub_->Adjust(&context, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response.tokens();
  };
  // A charge above the burst is granted on a full bucket, into debt.
  auto client = Client("proxy");
  ASSERT_THAT(client->Acquire({.limit = "tpm", .permits = 1500, .allow_debt = true}), IsOk());
  EXPECT_THAT(client->Acquire({.limit = "tpm", .permits = 1500}), StatusIs(absl::StatusCode::kInvalidArgument));
  // The call used 900 of its 1500: 600 back (the RPC answers what the bucket holds, -500 owed + 600).
  absl::StatusOr<double> tokens = adjust("tpm", -600);
  ASSERT_THAT(tokens, IsOk());
  EXPECT_NEAR(*tokens, 100, 5);  // (plus a second of refill at most)
  // The client's fire-and-forget adjust on its session stream: applied before anything it sends later.
  client->Adjust("tpm", "", 400);
  EXPECT_THAT(client->TryAcquire({.limit = "tpm", .permits = 1}), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_NEAR(InUse("tpm"), 1300, 5);
  EXPECT_THAT(adjust("gpu", 1), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(adjust("nope", 1), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(RateLimiterTest, AWaitingAcquireIsAnnouncedAsQueuedUnlessTheHelloOmitsIt) {
  Start("  - {name: gpu, kind: concurrency, permits: 1}\n", {"--learning-mode=false"});
  auto holder_client = Client("holder");
  auto holder = holder_client->Acquire({.limit = "gpu"});
  ASSERT_THAT(holder, IsOk());
  // A raw session stream: hello, then an acquire that has to wait behind the holder.
  struct RawSession {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> stream;
  };
  auto open = [&](bool omit_queued) {
    auto session = std::make_unique<RawSession>();
    SetDeadline(session->context, absl::Seconds(30));
    AttachBearer(session->context, token_);
    session->stream = stub_->Session(&session->context);
    v1::SessionRequest hello;
    hello.mutable_hello()->set_client_id(omit_queued ? "quiet" : "told");
    hello.mutable_hello()->set_omit_queued(omit_queued);
    v1::SessionResponse ready;
    EXPECT_TRUE(session->stream->Write(hello) && session->stream->Read(&ready) && ready.has_ready());
    v1::SessionRequest acquire;
    acquire.set_request_id(7);
    acquire.mutable_acquire()->set_limit("gpu");
    EXPECT_TRUE(session->stream->Write(acquire));
    return session;
  };
  auto told = open(false);
  v1::SessionResponse reply;
  ASSERT_TRUE(told->stream->Read(&reply));
  EXPECT_EQ(reply.request_id(), 7u);
  ASSERT_TRUE(reply.has_queued()) << reply.DebugString();
  EXPECT_EQ(reply.queued().position(), 1u);
  auto quiet = open(true);
  ASSERT_TRUE(testing::WaitUntil([&] { return Waiters("gpu") == 2; }, absl::Seconds(10)));
  // The holder lets go: the first waiter is granted, and releases at once; the quiet one's first message after
  // its ready is its grant.
  ASSERT_THAT(holder->Release(), IsOk());
  ASSERT_TRUE(told->stream->Read(&reply));
  ASSERT_TRUE(reply.has_granted()) << reply.DebugString();
  v1::SessionRequest release;
  release.mutable_release()->set_lease_id(reply.granted().lease().lease_id());
  ASSERT_TRUE(told->stream->Write(release));
  ASSERT_TRUE(quiet->stream->Read(&reply));
  EXPECT_EQ(reply.request_id(), 7u);
  EXPECT_TRUE(reply.has_granted()) << reply.DebugString();
  for (auto* s : {told.get(), quiet.get()}) s->context.TryCancel();
}

TEST_F(RateLimiterTest, SmallRequestWaitsBehindLargeOneAcrossSessionsAndCancellationLetsItThrough) {
  Start("  - {name: gpu, kind: concurrency, permits: 5}\n", {"--learning-mode=false"});
  auto holder_client = Client("holder");
  auto big_client = Client("big");
  auto small_client = Client("small");
  auto holder = holder_client->Acquire({.limit = "gpu", .permits = 4});
  ASSERT_THAT(holder, IsOk());

  std::thread big([&] {
    auto permit = big_client->Acquire({.limit = "gpu", .permits = 3});
    EXPECT_THAT(permit, StatusIs(absl::StatusCode::kUnavailable));  // its session is torn down below
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return Waiters("gpu") == 1; }, absl::Seconds(10)));
  std::atomic<bool> small_granted = false;
  std::thread small([&] {
    auto permit = small_client->Acquire({.limit = "gpu", .permits = 1});
    EXPECT_THAT(permit, IsOk());
    small_granted = true;
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return Waiters("gpu") == 2; }, absl::Seconds(10)));
  EXPECT_FALSE(small_granted);  // one permit is free, but the 3-permit request is ahead of it
  big_client.reset();           // the big waiter's session breaks: it leaves the queue at once
  big.join();
  small.join();
  EXPECT_TRUE(small_granted);
}

TEST_F(RateLimiterTest, SigkilledHolderFreesItsPermitsAsSoonAsItsSessionBreaks) {
  Start("  - {name: code_exec, kind: concurrency, permits: 2}\n", {"--learning-mode=false"});
  auto holder =
      testing::Subprocess::Start({CORRAL_CLI, "limiter", "acquire", "--addr", service_->ready.grpc, "--secret-file",
                                  dir_ + "/secret", "--limit", "code_exec", "--permits", "2", "--hold", "600"},
                                 dir_ + "/holder.log");
  ASSERT_THAT(holder, IsOk());
  ASSERT_TRUE(
      testing::WaitUntil([&] { return holder->Log().find("granted 2") != std::string::npos; }, absl::Seconds(30)))
      << holder->Log();
  EXPECT_EQ(InUse("code_exec"), 2);
  auto client = Client("next");
  EXPECT_THAT(client->TryAcquire({.limit = "code_exec"}), StatusIs(absl::StatusCode::kResourceExhausted));

  const absl::Time killed = absl::Now();
  ASSERT_TRUE(holder->Signal(SIGKILL));
  ASSERT_THAT(holder->Wait(absl::Seconds(10)), IsOk());
  ASSERT_TRUE(testing::WaitUntil([&] { return InUse("code_exec") == 0; }, absl::Seconds(10)));
  // Freed by the broken session, well before the 30 s lease TTL could have done it.
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10));
  EXPECT_THAT(client->TryAcquire({.limit = "code_exec", .permits = 2}), IsOk());
}

TEST_F(RateLimiterTest, ClientThatStopsKeepalivesLosesItsLeaseAfterTheTtl) {
  Start("  - {name: code_exec, kind: concurrency, permits: 1}\n", {"--learning-mode=false"});
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(10));
  AttachBearer(context, token_);
  v1::AcquireRequest request;
  request.set_limit("code_exec");
  ToProto(absl::Milliseconds(500), request.mutable_lease_ttl());
  v1::AcquireResponse response;
  ASSERT_TRUE(stub_->Acquire(&context, request, &response).ok());  // unary, no session, never kept alive
  EXPECT_EQ(InUse("code_exec"), 1);
  ASSERT_TRUE(testing::WaitUntil([&] { return InUse("code_exec") == 0; }, absl::Seconds(10)));
  auto metrics = http::ParsePrometheusText(*http::HttpGet(service_->ready.metrics, "/metrics"));
  ASSERT_THAT(metrics, IsOk());
  EXPECT_THAT(metrics->Value("corral_ratelimiter_lease_expirations_total", {{"limit", "code_exec"}}), IsOkAndHolds(1));
}

TEST_F(RateLimiterTest, BadRequestsGetPreciseCodesAndChangeNothing) {
  Start("  - {name: code_exec, kind: concurrency, permits: 2}\n", {"--learning-mode=false"});
  auto call = [&](const v1::AcquireRequest& request, const std::string& token) {
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    AttachBearer(context, token);
    v1::AcquireResponse response;
    return FromGrpcStatus(stub_->TryAcquire(&context, request, &response));
  };
  v1::AcquireRequest request;
  request.set_limit("code_exec");
  EXPECT_THAT(call(request, ""), StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("Bearer")));
  EXPECT_THAT(call(request, "corral.forged"), StatusIs(absl::StatusCode::kUnauthenticated));
  request.set_limit("nope");
  EXPECT_THAT(call(request, token_), StatusIs(absl::StatusCode::kNotFound, HasSubstr("code_exec")));
  request.set_limit("code_exec");
  request.set_permits(3);
  EXPECT_THAT(call(request, token_), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("between 1 and 2")));
  request.set_permits(1);
  ToProto(absl::Hours(2), request.mutable_lease_ttl());
  EXPECT_THAT(call(request, token_), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lease_ttl")));
  ToProto(absl::ZeroDuration(), request.mutable_lease_ttl());
  EXPECT_THAT(call(request, token_), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lease_ttl")));

  auto client = Client("c");
  auto permit = client->Acquire({.limit = "code_exec"});
  ASSERT_THAT(permit, IsOk());
  std::string lease_id = permit->lease().lease_id();
  ASSERT_THAT(permit->Release(), IsOk());
  ASSERT_TRUE(testing::WaitUntil([&] { return InUse("code_exec") == 0; }, absl::Seconds(10)));
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(10));
  AttachBearer(context, token_);
  v1::ReleaseRequest release;
  release.set_lease_id(lease_id);
  v1::ReleaseResponse released;
  EXPECT_THAT(FromGrpcStatus(stub_->Release(&context, release, &released)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("already ended: released")));
  EXPECT_EQ(InUse("code_exec"), 0);
  EXPECT_EQ(Waiters("code_exec"), 0);
}

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

TEST_F(RateLimiterTest, ACliCallWithoutCredentialsSaysWhichFlagGivesThem) {
  Start("  - {name: code_exec, kind: concurrency, permits: 2}\n");
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"status"}, std::vector<std::string>{"acquire", "--limit", "code_exec"}}) {
    std::vector<std::string> argv = {CORRAL_CLI, "limiter"};
    argv.insert(argv.end(), command.begin(), command.end());
    argv.insert(argv.end(), {"--addr", service_->ready.grpc});
    const std::string log = dir_ + "/cli-" + command[0] + ".log";
    auto cli = testing::Subprocess::Start(argv, log);
    ASSERT_THAT(cli, IsOk());
    EXPECT_THAT(cli->Wait(absl::Seconds(30)), IsOkAndHolds(::testing::Ne(0)));
    EXPECT_THAT(cli->Log(), HasSubstr("UNAUTHENTICATED"));
    EXPECT_THAT(cli->Log(), HasSubstr("--secret-file FILE"));
    EXPECT_THAT(cli->Log(), HasSubstr("--cluster-dir DIR"));
    EXPECT_THAT(cli->Log(), HasSubstr("--token TOKEN"));
  }
}

}  // namespace
}  // namespace corral
