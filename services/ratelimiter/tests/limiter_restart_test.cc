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
  void Held(const StoredLease& lease) override { held[lease.id] = lease.ttl; }
  void Ended(const std::string& lease_id) override { held.erase(lease_id); }
  void Alive(absl::Time now) override { last_alive = now; }
  std::vector<StoredLease> Leases() const {
    std::vector<StoredLease> out;
    for (const auto& [id, ttl] : held) out.push_back({id, ttl});
    return out;
  }
  std::map<std::string, absl::Duration> held;
  absl::Time last_alive = absl::InfinitePast();
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

TEST_F(DurableLeasesTest, RestoredLeasesNobodyReclaimsExpireOneTtlAfterTheLastHeartbeat) {
  limiter_ = Start();
  auto a = Acquire("gpu", 3);
  ASSERT_THAT(a->result, IsOk());
  clock_.Advance(absl::Seconds(6));  // the sweep writes a heartbeat every 5 s
  ASSERT_EQ(store_.last_alive, clock_.Now() - absl::Seconds(1));
  limiter_.reset();  // kill -9: nothing else reaches the store

  // Down for 20 s; the lease (TTL 30 s) can have lived until at most heartbeat + 10 s + 30 s.
  clock_.Advance(absl::Seconds(20));
  const absl::Time last_alive = store_.last_alive;  // read before the new limiter writes its own, as main does
  limiter_ = Start();
  ASSERT_EQ(limiter_->Restore(store_.Leases(), last_alive), 1);
  auto waiting = Acquire("gpu", 1);
  clock_.Advance(absl::Seconds(18));
  EXPECT_FALSE(waiting->done);
  clock_.Advance(absl::Seconds(2));  // heartbeat + 40 s
  EXPECT_THAT(waiting->result, IsOk());
  EXPECT_FALSE(store_.held.contains(a->result->lease_id));

  // A snapshot older than any TTL restores nothing; foreign or undeclared leases are dropped too.
  const std::string foreign = LeaseFromBeforeRestart("other", 1, 1);
  limiter_ = Start();
  EXPECT_EQ(
      limiter_->Restore(
          {{a->result->lease_id, absl::Seconds(30)}, {foreign, absl::Seconds(30)}, {"forged.AAAA", absl::Seconds(30)}},
          clock_.Now() - absl::Hours(1)),
      0);
}

TEST_F(LearningModeTest, AQueuedRequestThatTimesOutSaysLearningModeHeldItAndForHowLong) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("gpu", 1)), IsOk());
  auto waiting = Acquire("gpu", 1, absl::Seconds(10));
  clock_.Advance(absl::Seconds(10));
  EXPECT_THAT(waiting->result,
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("learning mode for 4m50s more")));
}

}  // namespace
}  // namespace corral::ratelimiter
