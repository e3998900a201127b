#include "services/ratelimiter/limiter.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "services/ratelimiter/tests/limiter_test_fixture.h"

namespace corral::ratelimiter {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

TEST_F(LimiterTest, GrantsImmediatelyWhenFreeAndQueuesWhenFull) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("code_exec", 2)), IsOk());
  auto a = Acquire("code_exec", 1);
  auto b = Acquire("code_exec", 1);
  auto c = Acquire("code_exec", 1);
  ASSERT_TRUE(a->done && b->done);
  EXPECT_THAT(a->result, IsOk());
  EXPECT_FALSE(c->done);
  EXPECT_EQ(Instance("code_exec").in_use, 2);
  EXPECT_EQ(Instance("code_exec").waiters, 1);
  ASSERT_THAT(limiter_->Release(a->result->lease_id, ""), IsOk());
  ASSERT_TRUE(c->done);
  EXPECT_THAT(c->result, IsOk());
  EXPECT_EQ(Instance("code_exec").in_use, 2);
}

TEST_F(LimiterTest, SmallRequestBehindLargeRequestWaitsItsTurn) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 5)), IsOk());
  auto holder = Acquire("gpu", 3);
  auto big = Acquire("gpu", 5);    // needs everything: waits
  auto small = Acquire("gpu", 1);  // 2 permits are free, but the 5-permit request came first
  EXPECT_FALSE(big->done);
  EXPECT_FALSE(small->done);
  ASSERT_THAT(limiter_->Release(holder->result->lease_id, ""), IsOk());
  ASSERT_TRUE(big->done);
  EXPECT_FALSE(small->done);
  ASSERT_THAT(limiter_->Release(big->result->lease_id, ""), IsOk());
  EXPECT_TRUE(small->done);
}

TEST_F(LimiterTest, CancellingTheHeadLetsTheNextThrough) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 5)), IsOk());
  auto holder = Acquire("gpu", 4);
  absl::StatusOr<AcquireTicket> big_ticket;
  AcquireParams p;
  p.limit = "gpu";
  p.permits = 3;
  auto big = Acquire(p, &big_ticket);
  auto small = Acquire("gpu", 1);
  ASSERT_THAT(big_ticket, IsOk());
  EXPECT_TRUE(big_ticket->queued);
  EXPECT_FALSE(small->done);
  EXPECT_TRUE(limiter_->CancelWaiter(big_ticket->waiter_id, absl::CancelledError("client went away")));
  EXPECT_THAT(big->result, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_TRUE(small->done);
  EXPECT_THAT(small->result, IsOk());
  EXPECT_FALSE(limiter_->CancelWaiter(big_ticket->waiter_id, absl::CancelledError("")));
}

TEST_F(LimiterTest, WaitTimeoutFailsTheWaiterAndUnblocksThoseBehind) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 5)), IsOk());
  auto holder = Acquire("gpu", 4);
  auto big = Acquire("gpu", 3, absl::Seconds(2));
  auto small = Acquire("gpu", 1, absl::Seconds(10));
  clock_.Advance(absl::Milliseconds(1999));
  EXPECT_FALSE(big->done);
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(big->result, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("3 permit(s) of 'gpu'")));
  EXPECT_THAT(small->result, IsOk());
}

TEST_F(LimiterTest, ManyThreadsAreGrantedInArrivalOrder) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("one", 1)), IsOk());
  auto holder = Acquire("one", 1);
  constexpr int kThreads = 16;
  constexpr int kPerThread = 8;
  absl::Mutex mu;
  std::vector<uint64_t> grant_order;  // waiter ids (assigned in arrival order) in the order granted
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        auto id = std::make_shared<std::atomic<uint64_t>>(0);
        AcquireParams p;
        p.limit = "one";
        auto ticket = limiter_->Acquire(p, [&, id](absl::StatusOr<Grant> g) {
          ASSERT_THAT(g, IsOk());
          {
            absl::MutexLock l(&mu);
            grant_order.push_back(id->load());
          }
          // Hand the permit on: the next grant happens inside this release.
          ASSERT_THAT(limiter_->Release(g->lease_id, ""), IsOk());
        });
        ASSERT_THAT(ticket, IsOk());
        ASSERT_TRUE(ticket->queued);
        id->store(ticket->waiter_id);
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(Instance("one").waiters, kThreads * kPerThread);
  ASSERT_THAT(limiter_->Release(holder->result->lease_id, ""), IsOk());
  ASSERT_THAT(grant_order, SizeIs(kThreads * kPerThread));
  EXPECT_TRUE(std::is_sorted(grant_order.begin(), grant_order.end()));
  EXPECT_EQ(Instance("one").in_use, 0);
}

TEST_F(LimiterTest, TryAcquireNeverWaitsAndNeverBarges) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 2)), IsOk());
  auto holder = Acquire("gpu", 2);
  AcquireParams p;
  p.limit = "gpu";
  p.try_only = true;
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("2 of 2 permits in use")));
  auto waiter = Acquire("gpu", 2);
  ASSERT_THAT(limiter_->Release(holder->result->lease_id, ""), IsOk());
  ASSERT_TRUE(waiter->done);
  auto third = Acquire("gpu", 2);  // queue behind nobody, but nothing free
  EXPECT_FALSE(third->done);
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("no barging")));
}

TEST_F(LimiterTest, ClosingASessionReleasesItsLeasesAndCancelsItsWaiters) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 2)), IsOk());
  std::string session = limiter_->OpenSession("worker-1", nullptr);
  auto held = Acquire("gpu", 2, absl::InfiniteDuration(), session);
  auto queued = Acquire("gpu", 1, absl::InfiniteDuration(), session);
  auto other = Acquire("gpu", 2);
  ASSERT_THAT(held->result, IsOk());
  EXPECT_EQ(held->result->session_id, session);
  limiter_->CloseSession(session);
  EXPECT_THAT(queued->result, StatusIs(absl::StatusCode::kCancelled, HasSubstr("session ended")));
  ASSERT_TRUE(other->done);
  EXPECT_THAT(other->result, IsOk());
  EXPECT_THAT(limiter_->Release(held->result->lease_id, ""),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("released when its session ended")));
  EXPECT_EQ(limiter_->Status().sessions, 0);
}

TEST_F(LimiterTest, LeaseExpiresAfterTtlWithoutKeepAliveAndSessionIsTold) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 1)), IsOk());
  std::vector<std::pair<std::string, absl::StatusCode>> lost;
  std::string session = limiter_->OpenSession(
      "w", [&](const std::string& id, const absl::Status& why) { lost.emplace_back(id, why.code()); });
  AcquireParams p;
  p.limit = "gpu";
  p.lease_ttl = absl::Seconds(10);
  p.session_id = session;
  auto lease = Acquire(p);
  auto next = Acquire("gpu", 1);
  clock_.Advance(absl::Seconds(8));
  ASSERT_THAT(limiter_->KeepAlive({lease->result->lease_id}, session), IsOkAndHolds(SizeIs(1)));
  clock_.Advance(absl::Seconds(8));  // 16 s after grant, 8 s after the keepalive
  EXPECT_FALSE(next->done);
  clock_.Advance(absl::Seconds(2));
  EXPECT_TRUE(next->done);
  EXPECT_THAT(lost, ElementsAre(std::pair(lease->result->lease_id, absl::StatusCode::kDeadlineExceeded)));
  EXPECT_THAT(limiter_->Release(lease->result->lease_id, session),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("expired")));
}

TEST_F(LimiterTest, KeepAliveIsAllOrNothing) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 2)), IsOk());
  auto a = Acquire("gpu", 1);
  EXPECT_THAT(limiter_->KeepAlive({a->result->lease_id, "bogus"}, ""),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nothing was renewed")));
  clock_.Advance(absl::Seconds(30));
  EXPECT_EQ(Instance("gpu").in_use, 0);  // the valid lease was not renewed by the failed call
}

TEST_F(LimiterTest, BadRequestsGetPreciseErrorsAndChangeNothing) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 4)), IsOk());
  AcquireParams p;
  p.limit = "cpu";
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kNotFound, HasSubstr("declared limits: gpu")));
  p.limit = "gpu";
  p.permits = -1;
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("between 1 and 4")));
  p.permits = 5;
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("capacity")));
  p.permits = 1;
  p.lease_ttl = absl::Hours(10);
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lease_ttl")));
  p.lease_ttl = -absl::Seconds(1);
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lease_ttl")));
  p.lease_ttl = absl::ZeroDuration();
  p.key = "python";
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not keyed")));
  p.key = "";
  p.session_id = "s-nope";
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not open")));

  std::string mine = limiter_->OpenSession("a", nullptr);
  std::string theirs = limiter_->OpenSession("b", nullptr);
  auto lease = Acquire("gpu", 1, absl::InfiniteDuration(), theirs);
  EXPECT_THAT(limiter_->Release(lease->result->lease_id, mine), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(limiter_->Release("forged.lease", ""), StatusIs(absl::StatusCode::kNotFound, HasSubstr("never granted")));
  ASSERT_THAT(limiter_->Release(lease->result->lease_id, theirs), IsOk());
  EXPECT_THAT(limiter_->Release(lease->result->lease_id, theirs),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("already ended: released")));

  InstanceStatus st = Instance("gpu");
  EXPECT_EQ(st.in_use, 0);
  EXPECT_EQ(st.waiters, 0);
  EXPECT_EQ(st.leases, 0);
}

TEST_F(LimiterTest, RequestIdMakesUnaryRetriesIdempotent) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 4)), IsOk());
  AcquireParams p;
  p.limit = "gpu";
  p.permits = 2;
  p.request_id = "req-1";
  auto first = Acquire(p);
  auto retry = Acquire(p);
  ASSERT_THAT(retry->result, IsOk());
  EXPECT_EQ(retry->result->lease_id, first->result->lease_id);
  EXPECT_EQ(Instance("gpu").in_use, 2);
  p.permits = 3;
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST_F(LimiterTest, GrowingWakesWaitersInOrderAndShrinkingNeverRevokes) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 2)), IsOk());
  auto a = Acquire("gpu", 2);
  auto b = Acquire("gpu", 1);
  auto c = Acquire("gpu", 1);
  ASSERT_THAT(limiter_->UpdateLimit(Concurrency("gpu", 3)), IsOk());
  EXPECT_TRUE(b->done);
  EXPECT_FALSE(c->done);
  ASSERT_THAT(limiter_->UpdateLimit(Concurrency("gpu", 1)), IsOk());
  EXPECT_EQ(Instance("gpu").in_use, 3);  // held leases stay
  ASSERT_THAT(limiter_->Release(a->result->lease_id, ""), IsOk());
  EXPECT_FALSE(c->done);  // 1 in use of 1
  ASSERT_THAT(limiter_->Release(b->result->lease_id, ""), IsOk());
  EXPECT_TRUE(c->done);
  LimitSpec rate;
  rate.name = "gpu";
  rate.kind = LimitKind::kRate;
  rate.rate_per_s = 1;
  EXPECT_THAT(limiter_->UpdateLimit(rate), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot change")));
}

TEST_F(LimiterTest, ShrinkingBelowAQueuedRequestFailsItInsteadOfBlockingTheQueue) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 5)), IsOk());
  auto holder = Acquire("gpu", 1);
  auto big = Acquire("gpu", 5);
  auto small = Acquire("gpu", 1);
  ASSERT_THAT(limiter_->UpdateLimit(Concurrency("gpu", 4)), IsOk());
  EXPECT_THAT(big->result, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("shrank to 4")));
  EXPECT_THAT(small->result, IsOk());
}

TEST_F(LimiterTest, RateEstimateCountsTokensEarnedWhileOthersWait) {
  ASSERT_THAT(limiter_->CreateLimit(Rate("tok", 1, 1)), IsOk());
  ASSERT_THAT(Acquire("tok", 1)->result, IsOk());
  auto b = Acquire("tok", 1);  // due at t=1s
  clock_.Advance(absl::Milliseconds(900));
  absl::StatusOr<AcquireTicket> ticket;
  AcquireParams p;
  p.limit = "tok";
  p.wait_timeout = absl::Milliseconds(1100);  // exactly the reservation: granted, not timed out
  auto c = Acquire(p, &ticket);
  ASSERT_THAT(ticket, IsOk());
  EXPECT_EQ(ticket->estimated_wait, absl::Milliseconds(1100));
  clock_.Advance(absl::Milliseconds(1100));
  EXPECT_THAT(b->result, IsOk());
  EXPECT_THAT(c->result, IsOk());
}

TEST_F(LimiterTest, RateLimitGrantsBurstThenRatePerSecond) {
  ASSERT_THAT(limiter_->CreateLimit(Rate("llm_tokens", 10, 20)), IsOk());
  AcquireParams p;
  p.limit = "llm_tokens";
  p.try_only = true;
  for (int i = 0; i < 20; ++i) ASSERT_THAT(Acquire(p)->result, IsOk()) << i;
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kResourceExhausted));
  clock_.Advance(absl::Seconds(1));
  int granted = 0;
  while (Acquire(p)->result.ok()) ++granted;
  EXPECT_EQ(granted, 10);
  EXPECT_EQ(Acquire(p)->result.ok(), false);
  // Capacity is the burst: a request above it can never be granted.
  p.permits = 21;
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(LimiterTest, RateWaitersAreToldTheirWaitAndGetTokensThenInOrder) {
  ASSERT_THAT(limiter_->CreateLimit(Rate("tok", 10, 10)), IsOk());
  ASSERT_THAT(Acquire("tok", 10)->result, IsOk());  // bucket empty now
  absl::StatusOr<AcquireTicket> t1, t2;
  AcquireParams p;
  p.limit = "tok";
  p.permits = 5;
  auto first = Acquire(p, &t1);
  p.permits = 10;
  auto second = Acquire(p, &t2);
  ASSERT_THAT(t1, IsOk());
  ASSERT_THAT(t2, IsOk());
  EXPECT_EQ(t1->estimated_wait, absl::Milliseconds(500));
  EXPECT_EQ(t2->estimated_wait, absl::Milliseconds(1500));
  clock_.Advance(absl::Milliseconds(499));
  EXPECT_FALSE(first->done);
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(first->done);
  EXPECT_FALSE(second->done);
  clock_.Advance(absl::Milliseconds(1000));
  EXPECT_TRUE(second->done);
  EXPECT_EQ(second->result->waited, absl::Milliseconds(1500));
  // A reservation that would complete after wait_timeout is refused at once.
  p.permits = 10;
  p.wait_timeout = absl::Milliseconds(900);
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("beyond wait_timeout")));
}

TEST_F(LimiterTest, DebtGrantsARequestAboveTheBurstOnAFullBucketAndDelaysThoseBehind) {
  ASSERT_THAT(limiter_->CreateLimit(Rate("tpm", 10, 20)), IsOk());
  AcquireParams big;
  big.limit = "tpm";
  big.permits = 50;
  EXPECT_THAT(Acquire(big)->result, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("capacity")));
  big.allow_debt = true;
  ASSERT_THAT(Acquire(big)->result, IsOk());  // full bucket: granted, 30 in debt
  EXPECT_EQ(Instance("tpm").in_use, 50);
  absl::StatusOr<AcquireTicket> ticket;
  AcquireParams small;
  small.limit = "tpm";
  small.permits = 5;
  auto next = Acquire(small, &ticket);
  ASSERT_THAT(ticket, IsOk());
  EXPECT_EQ(ticket->estimated_wait, absl::Milliseconds(3500));  // 30 owed + 5 wanted at 10/s
  clock_.Advance(absl::Milliseconds(3499));
  EXPECT_FALSE(next->done);
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(next->result, IsOk());
  // A second one above the burst waits for a full bucket (20 tokens: 2 s), not for its 50.
  auto again = Acquire(big, &ticket);
  ASSERT_THAT(ticket, IsOk());
  EXPECT_EQ(ticket->estimated_wait, absl::Seconds(2));
  // Beyond the burst plus an hour of refill it could never be paid back.
  big.permits = 20 + 10 * 3600 + 1;
  EXPECT_THAT(Acquire(big)->result, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hour of refill")));
}

TEST_F(LimiterTest, AdjustDebitsRefundsAndHoldsABucketAndReservesItsWaitersAgain) {
  ASSERT_THAT(limiter_->CreateLimit(Rate("tpm", 10, 100)), IsOk());
  ASSERT_THAT(Acquire("tpm", 100)->result, IsOk());  // empty
  // A refund gives back what a call did not use; never beyond the burst.
  EXPECT_THAT(limiter_->Adjust({.limit = "tpm", .tokens = -40}), IsOkAndHolds(40.0));
  EXPECT_THAT(limiter_->Adjust({.limit = "tpm", .tokens = -400}), IsOkAndHolds(100.0));
  // A debit charges what a call used beyond its estimate, into debt.
  EXPECT_THAT(limiter_->Adjust({.limit = "tpm", .tokens = 130}), IsOkAndHolds(-30.0));
  auto waiter = Acquire("tpm", 10);  // due when 40 have been earned: 4 s
  clock_.Advance(absl::Seconds(2));
  // 2 s of refill (-10), 20 back (10): the waiter is served at once and spends them.
  EXPECT_THAT(limiter_->Adjust({.limit = "tpm", .tokens = -20}), IsOkAndHolds(0.0));
  EXPECT_THAT(waiter->result, IsOk());
  // A hold (an upstream's Retry-After): nothing for 3 s, whatever the bucket held.
  EXPECT_THAT(limiter_->Adjust({.limit = "tpm", .hold_for = absl::Seconds(3)}), IsOkAndHolds(-30.0));
  auto held = Acquire("tpm", 1);
  clock_.Advance(absl::Seconds(3));
  EXPECT_FALSE(held->done);
  clock_.Advance(absl::Milliseconds(100));
  EXPECT_THAT(held->result, IsOk());
  // Debt is at most an hour of refill deep.
  EXPECT_THAT(limiter_->Adjust({.limit = "tpm", .tokens = 1'000'000}), IsOkAndHolds(-36000.0));
}

TEST_F(LimiterTest, AdjustRefusesBadRequestsAndChangesNothing) {
  ASSERT_THAT(limiter_->CreateLimit(Rate("tpm", 10, 100)), IsOk());
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("conc", 2)), IsOk());
  LimitSpec keyed = Rate("per_model", 10, 100);
  keyed.key_template = "{model}";
  ASSERT_THAT(limiter_->CreateLimit(keyed), IsOk());
  EXPECT_THAT(limiter_->Adjust({.limit = "nope", .tokens = 1}), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(limiter_->Adjust({.limit = "conc", .tokens = 1}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("concurrency")));
  EXPECT_THAT(limiter_->Adjust({.limit = "per_model", .tokens = 1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pass a key")));
  EXPECT_THAT(limiter_->Adjust({.limit = "tpm", .key = "x", .tokens = 1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(limiter_->Adjust({.limit = "tpm", .tokens = 2'000'000'000'000}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(limiter_->Adjust({.limit = "tpm", .hold_for = absl::Seconds(-1)}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(limiter_->Adjust({.limit = "tpm", .hold_for = absl::Hours(2)}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Instance("tpm").in_use, 0);
  // A keyed instance is created by its first adjust.
  EXPECT_THAT(limiter_->Adjust({.limit = "per_model", .key = "judge", .tokens = 30}), IsOkAndHolds(70.0));
  EXPECT_EQ(Instance("per_model", "judge").in_use, 30);
}

TEST_F(LimiterTest, KeyedTemplateCreatesInstancesOnFirstUseAndCollectsIdleOnes) {
  LimitSpec spec = Concurrency("code_exec", 1);
  spec.key_template = "{language}";
  spec.instance_idle_ttl = absl::Seconds(30);
  ASSERT_THAT(limiter_->CreateLimit(spec), IsOk());
  EXPECT_THAT(limiter_->Status("code_exec").instances, IsEmpty());
  AcquireParams p;
  p.limit = "code_exec";
  p.key = "python";
  auto py = Acquire(p);
  p.key = "bash";
  auto sh = Acquire(p);  // separate instance: not blocked by python's permit
  EXPECT_THAT(py->result, IsOk());
  EXPECT_THAT(sh->result, IsOk());
  p.key = "";
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("{language}")));
  ASSERT_THAT(limiter_->Release(py->result->lease_id, ""), IsOk());
  clock_.Advance(absl::Seconds(40));
  auto instances = limiter_->Status("code_exec").instances;
  ASSERT_THAT(instances, SizeIs(1));  // python was idle for its TTL; bash still holds a lease
  EXPECT_EQ(instances[0].key, "bash");
}

TEST_F(LimiterTest, AKeyedLimitsGaugesSumItsInstancesThroughGrantsQueuesReleasesRefillsAndCollection) {
  // The value of a per-limit gauge, as /metrics would show it.
  auto gauge = [&](const std::string& name, const std::string& limit) {
    for (const auto& family : registry_.Collect()) {
      if (family.name != name) continue;
      for (const auto& metric : family.metric) {
        for (const auto& label : metric.label) {
          if (label.name == "limit" && label.value == limit) return metric.gauge.value;
        }
      }
    }
    ADD_FAILURE() << "no " << name << "{limit=" << limit << "}";
    return -1.0;
  };
  LimitSpec spec = Concurrency("code_exec", 2);
  spec.key_template = "{language}";
  spec.instance_idle_ttl = absl::Seconds(30);
  ASSERT_THAT(limiter_->CreateLimit(spec), IsOk());
  auto acquire = [&](const std::string& key) {
    AcquireParams p;
    p.limit = "code_exec";
    p.key = key;
    return Acquire(p);
  };
  auto py1 = acquire("python"), py2 = acquire("python"), sh = acquire("bash"), py3 = acquire("python");
  EXPECT_FALSE(py3->done);  // python's two permits are held
  EXPECT_EQ(gauge("corral_ratelimiter_permits_in_use", "code_exec"), 3);
  EXPECT_EQ(gauge("corral_ratelimiter_waiters", "code_exec"), 1);
  ASSERT_THAT(limiter_->Release(py1->result->lease_id, ""), IsOk());  // the waiter gets it
  ASSERT_THAT(py3->result, IsOk());
  EXPECT_EQ(gauge("corral_ratelimiter_permits_in_use", "code_exec"), 3);
  EXPECT_EQ(gauge("corral_ratelimiter_waiters", "code_exec"), 0);
  for (const auto& held : {py2, sh, py3}) ASSERT_THAT(limiter_->Release(held->result->lease_id, ""), IsOk());
  EXPECT_EQ(gauge("corral_ratelimiter_permits_in_use", "code_exec"), 0);

  // A keyed rate limit: the idle sweep refills the buckets and collects the idle instances, and the gauge follows.
  LimitSpec tpm = Rate("tpm", 10, 100);
  tpm.key_template = "{model}";
  tpm.instance_idle_ttl = absl::Seconds(30);
  ASSERT_THAT(limiter_->CreateLimit(tpm), IsOk());
  for (const char* model : {"a", "b"}) {
    AcquireParams p;
    p.limit = "tpm";
    p.key = model;
    p.permits = 60;
    ASSERT_THAT(Acquire(p)->result, IsOk());
  }
  EXPECT_EQ(gauge("corral_ratelimiter_permits_in_use", "tpm"), 120);
  clock_.Advance(absl::Seconds(40));
  EXPECT_THAT(limiter_->Status("tpm").instances, IsEmpty());
  EXPECT_THAT(limiter_->Status("code_exec").instances, IsEmpty());
  EXPECT_EQ(gauge("corral_ratelimiter_permits_in_use", "tpm"), 0);
  EXPECT_EQ(gauge("corral_ratelimiter_permits_in_use", "code_exec"), 0);
}

TEST_F(LimiterTest, DeletingALimitNeedsForceWhileBusyAndFailsItsWaiters) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 1)), IsOk());
  auto held = Acquire("gpu", 1);
  auto waiting = Acquire("gpu", 1);
  EXPECT_THAT(limiter_->DeleteLimit("gpu", false), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(limiter_->GetLimit("gpu"), IsOk());
  ASSERT_THAT(limiter_->DeleteLimit("gpu", true), IsOk());
  EXPECT_THAT(waiting->result, StatusIs(absl::StatusCode::kNotFound, HasSubstr("deleted")));
  EXPECT_THAT(limiter_->GetLimit("gpu"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(limiter_->CreateLimit(Concurrency("gpu", 1)), IsOk());
  EXPECT_THAT(limiter_->CreateLimit(Concurrency("gpu", 1)), StatusIs(absl::StatusCode::kAlreadyExists));
}

}  // namespace
}  // namespace corral::ratelimiter
