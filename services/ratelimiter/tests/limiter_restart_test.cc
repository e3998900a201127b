// The Limiter after a restart: learning mode (only re-claims until one max TTL has passed) and durable leases
// (a LeaseStore that tells a new limiter what was held).
#include <map>

#include "services/ratelimiter/tests/limiter_test_fixture.h"

namespace corral::ratelimiter {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

class LearningModeTest : public LimiterTest {
 protected:
  LearningModeTest() : LimiterTest(/*learning=*/true) {}
};

TEST_F(LearningModeTest, OnlyReclaimsAreGrantedUntilOneMaxTtlHasPassed) {
  // Leases minted before the "restart" by a limiter with the same secret.
  const std::string old_lease = LeaseFromBeforeRestart("gpu", 3, 2);
  ASSERT_FALSE(old_lease.empty());
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 3)), IsOk());
  EXPECT_TRUE(limiter_->learning_mode());

  AcquireParams p;
  p.limit = "gpu";
  p.try_only = true;
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("learning mode")));
  auto fresh = Acquire("gpu", 2);  // queued until learning ends
  EXPECT_FALSE(fresh->done);

  std::string session = limiter_->OpenSession("survivor", nullptr);
  auto results = limiter_->Reclaim(session, {old_lease, old_lease, "forged.AAAA"});
  ASSERT_THAT(results, SizeIs(3));
  ASSERT_THAT(results[0].result, IsOk());
  EXPECT_EQ(results[0].result->permits, 2);
  EXPECT_THAT(results[1].result, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(results[2].result, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(Instance("gpu").reclaimed, 2);

  for (int i = 0; i < 15; ++i) {  // 5 minutes, renewing the re-claimed lease as its client library would
    clock_.Advance(absl::Seconds(20));
    ASSERT_THAT(limiter_->KeepAlive({}, session), IsOk());
  }
  EXPECT_FALSE(limiter_->learning_mode());
  // 2 re-claimed + 2 wanted > 3: the fresh request still waits; re-claimed plus new never exceeds the limit.
  EXPECT_FALSE(fresh->done);
  ASSERT_THAT(limiter_->Release(old_lease, session), IsOk());
  EXPECT_TRUE(fresh->done);
  // Unary holders re-claim through KeepAlive (tested below); after learning mode a lease that is not live
  // cannot be re-claimed either way.
  EXPECT_THAT(limiter_->KeepAlive({old_lease}, ""), StatusIs(absl::StatusCode::kNotFound));
  std::string late = limiter_->OpenSession("late", nullptr);
  EXPECT_THAT(limiter_->Reclaim(late, {old_lease})[0].result, StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(LearningModeTest, UnaryKeepAliveReclaimsALeaseHeldBeforeTheRestart) {
  const std::string old_lease = LeaseFromBeforeRestart("gpu", 2, 1);
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 2)), IsOk());
  ASSERT_THAT(limiter_->KeepAlive({old_lease}, ""), IsOkAndHolds(SizeIs(1)));
  EXPECT_EQ(Instance("gpu").in_use, 1);
  EXPECT_EQ(Instance("gpu").reclaimed, 1);
  EXPECT_THAT(limiter_->KeepAlive({"forged.AAAA"}, ""), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(limiter_->Release(old_lease, ""), IsOk());
}

// An in-memory LeaseStore: what the limiter told it, as the SQLite snapshot would keep it.
class MemoryLeaseStore : public LeaseStore {
 public:
  absl::Status Held(const StoredLease& lease) override {
    if (!refusal.ok()) return refusal;
    held[lease.id] = lease.ttl;
    return absl::OkStatus();
  }
  void Ended(const std::string& lease_id) override { held.erase(lease_id); }
  void Alive(absl::Time now) override { last_alive = now; }
  std::vector<StoredLease> Leases() const {
    std::vector<StoredLease> out;
    for (const auto& [id, ttl] : held) out.push_back({id, ttl});
    return out;
  }
  std::map<std::string, absl::Duration> held;
  absl::Time last_alive = absl::InfinitePast();
  absl::Status refusal;  // what Held answers (a full disk)
};

class DurableLeasesTest : public LimiterTest {
 protected:
  // A limiter on `store_` (no learning mode: the store knows what is held), as main builds it.
  std::unique_ptr<Limiter> Start() {
    LimiterOptions options;
    options.learning_mode = false;
    auto limiter = std::make_unique<Limiter>(&clock_, *TokenSigner::FromKey(kKey), options, &metrics_, &store_);
    EXPECT_THAT(limiter->CreateLimit(Concurrency("gpu", 3)), IsOk());
    return limiter;
  }
  MemoryLeaseStore store_;
};

TEST_F(DurableLeasesTest, ARestartedLimiterCountsWhatWasHeldAndGrantsTheRestAtOnce) {
  limiter_ = Start();
  std::string session = limiter_->OpenSession("worker", nullptr);
  auto a = Acquire("gpu", 2, absl::InfiniteDuration(), session);
  auto b = Acquire("gpu", 1);
  ASSERT_THAT(a->result, IsOk());
  ASSERT_THAT(b->result, IsOk());
  ASSERT_THAT(limiter_->Release(b->result->lease_id, ""), IsOk());
  EXPECT_THAT(store_.held, SizeIs(1));  // the release erased b; a is still held
  EXPECT_EQ(store_.held.at(a->result->lease_id), absl::Seconds(30));

  // Shutdown: the session's stream is torn down, but its holder still holds the permits.
  limiter_->PrepareShutdown();
  limiter_->CloseSession(session);
  EXPECT_THAT(store_.held, SizeIs(1));
  limiter_.reset();

  limiter_ = Start();
  EXPECT_EQ(limiter_->Restore(store_.Leases(), clock_.Now()), 1);
  EXPECT_FALSE(limiter_->learning_mode());
  EXPECT_EQ(Instance("gpu").in_use, 2);
  auto fresh = Acquire("gpu", 1);  // 2 held + 1 = 3: granted at once, no learning
  EXPECT_THAT(fresh->result, IsOk());
  auto over = Acquire("gpu", 1);  // never over-granted
  EXPECT_FALSE(over->done);

  // The holder reconnects and re-claims onto its new session; closing it (the holder is gone) frees the permits.
  std::string again = limiter_->OpenSession("worker", nullptr);
  auto reclaimed = limiter_->Reclaim(again, {a->result->lease_id});
  ASSERT_THAT(reclaimed[0].result, IsOk());
  EXPECT_EQ(reclaimed[0].result->session_id, again);
  limiter_->CloseSession(again);
  EXPECT_TRUE(over->done);
  EXPECT_THAT(store_.held, SizeIs(2));  // fresh and over
}

TEST_F(DurableLeasesTest, RestoredLeasesNobodyReclaimsExpireOneTtlAfterTheRestart) {
  limiter_ = Start();
  auto a = Acquire("gpu", 3);
  ASSERT_THAT(a->result, IsOk());
  clock_.Advance(absl::Seconds(6));  // the sweep writes a heartbeat every 5 s
  ASSERT_EQ(store_.last_alive, clock_.Now() - absl::Seconds(1));
  limiter_.reset();  // kill -9: nothing else reaches the store

  clock_.Advance(absl::Seconds(20));
  const absl::Time last_alive = store_.last_alive;  // read before the new limiter writes its own, as main does
  limiter_ = Start();
  ASSERT_EQ(limiter_->Restore(store_.Leases(), last_alive), 1);
  auto waiting = Acquire("gpu", 1);
  clock_.Advance(absl::Seconds(29));
  EXPECT_FALSE(waiting->done);
  clock_.Advance(absl::Seconds(1));  // its TTL (30 s) from the restart
  EXPECT_THAT(waiting->result, IsOk());
  EXPECT_FALSE(store_.held.contains(a->result->lease_id));

  // Foreign, undeclared or forged leases are dropped.
  const std::string foreign = LeaseFromBeforeRestart("other", 1, 1);
  limiter_ = Start();
  EXPECT_EQ(limiter_->Restore({{foreign, absl::Seconds(30)}, {"forged.AAAA", absl::Seconds(30)}}, clock_.Now()), 0);
}

// The heartbeat is the previous process's wall clock. Stepped forward across the restart (NTP, a restored VM),
// it made every lease look long expired: dropped while their holders still held them (found by tests/faults).
TEST_F(DurableLeasesTest, AHeartbeatFromAClockAnHourOffDropsNoLease) {
  limiter_ = Start();
  auto a = Acquire("gpu", 3);
  ASSERT_THAT(a->result, IsOk());
  limiter_.reset();
  for (absl::Duration off : {absl::Hours(-1), absl::Hours(1)}) {
    limiter_ = Start();
    ASSERT_EQ(limiter_->Restore(store_.Leases(), clock_.Now() + off), 1);
    EXPECT_EQ(Instance("gpu").in_use, 3);
    AcquireParams p;
    p.limit = "gpu";
    p.try_only = true;
    EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kResourceExhausted));
  }
}

TEST_F(LearningModeTest, AQueuedRequestThatTimesOutSaysLearningModeHeldItAndForHowLong) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 1)), IsOk());
  auto waiting = Acquire("gpu", 1, absl::Seconds(10));
  clock_.Advance(absl::Seconds(10));
  EXPECT_THAT(waiting->result,
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("learning mode for 4m50s more")));
}

// The previous limiter may have spent a whole burst just before it died: a restart must not grant it again.
TEST_F(DurableLeasesTest, ARestartedLimitersBucketsHoldOnlyWhatTheyEarnedSinceTheRestart) {
  limiter_ = Start();
  ASSERT_THAT(limiter_->CreateLimit(Rate("tokens", 10, 10)), IsOk());
  EXPECT_EQ(limiter_->Restore({}, clock_.Now()), 0);  // its last heartbeat was just now
  AcquireParams p;
  p.limit = "tokens";
  p.try_only = true;
  p.permits = 1;
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kResourceExhausted));
  clock_.Advance(absl::Milliseconds(500));
  p.permits = 5;
  EXPECT_THAT(Acquire(p)->result, IsOk());
  p.permits = 1;
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kResourceExhausted));
  clock_.Advance(absl::Seconds(5));  // a bucket never holds more than its burst
  p.permits = 10;
  EXPECT_THAT(Acquire(p)->result, IsOk());
}

TEST_F(DurableLeasesTest, AFirstStartOnAnEmptySnapshotHasFullBuckets) {
  limiter_ = Start();
  ASSERT_THAT(limiter_->CreateLimit(Rate("tokens", 10, 10)), IsOk());
  EXPECT_EQ(limiter_->Restore({}, absl::InfinitePast()), 0);  // no previous limiter ever ran on it
  AcquireParams p;
  p.limit = "tokens";
  p.try_only = true;
  p.permits = 10;
  EXPECT_THAT(Acquire(p)->result, IsOk());
}

TEST_F(LearningModeTest, WithoutASnapshotRateBucketsStartEmptyAndKeyedOnesHoldWhatTheyEarnedSinceTheStart) {
  LimitSpec keyed = Rate("per_model", 10, 10);
  keyed.name = "per_model";
  keyed.key_template = "{model}";
  ASSERT_THAT(limiter_->CreateLimit(Rate("tokens", 10, 10)), IsOk());
  ASSERT_THAT(limiter_->CreateLimit(keyed), IsOk());
  AcquireParams p;
  p.limit = "tokens";
  p.try_only = true;
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kResourceExhausted));
  clock_.Advance(absl::Milliseconds(300));
  p.limit = "per_model";
  p.key = "qwen";  // created now: 3 tokens earned since the start
  p.permits = 3;
  EXPECT_THAT(Acquire(p)->result, IsOk());
  p.permits = 1;
  EXPECT_THAT(Acquire(p)->result, StatusIs(absl::StatusCode::kResourceExhausted));
}

// A full disk under the snapshot: a grant it cannot record is not made (a restart would forget it and grant the
// permit again), neither at once nor from the queue; once the store writes again, grants resume.
TEST_F(DurableLeasesTest, AGrantTheStoreCannotRecordIsNotMade) {
  limiter_ = Start();
  auto first = Acquire("gpu", 3);
  ASSERT_THAT(first->result, IsOk());
  auto queued = Acquire("gpu", 1);
  EXPECT_FALSE(queued->done);
  store_.refusal = absl::ResourceExhaustedError("No space left on device");
  ASSERT_THAT(limiter_->Release(first->result->lease_id, ""), IsOk());
  EXPECT_THAT(queued->result,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("cannot record a grant of 'gpu'")));
  EXPECT_EQ(Instance("gpu").in_use, 0);
  EXPECT_THAT(Acquire("gpu", 1)->result, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("No space left")));
  EXPECT_EQ(Instance("gpu").in_use, 0);
  store_.refusal = absl::OkStatus();
  auto again = Acquire("gpu", 1);
  ASSERT_THAT(again->result, IsOk());
  EXPECT_TRUE(store_.held.contains(again->result->lease_id));
}

}  // namespace
}  // namespace corral::ratelimiter
