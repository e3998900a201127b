// corral-ratelimiter as a real process on loopback, driven by the real client library and CLI: sessions over
// the wire, a SIGKILLed holder, a client that stops keepalives, bad requests; restarts in ratelimiter_restart_test.cc.
#include "tests/integration/ratelimiter_fixture.h"

namespace corral {
namespace {

using namespace limiter_test;  // NOLINT: the fixture and its helpers
using ::testing::HasSubstr;

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
