// Fencing tokens: every concurrency grant takes a larger token than any grant before it — across keys, re-claims,
// restarts with a lease store and restarts without one — and the token travels inside the signed lease id.
#include "services/ratelimiter/lease_id.h"
#include "services/ratelimiter/lease_snapshot.h"
#include "services/ratelimiter/tests/limiter_test_fixture.h"
#include "tests/support/subprocess.h"

namespace corral::ratelimiter {
namespace {

using ::testing::Gt;

class FencingTest : public LimiterTest {
 protected:
  uint64_t Token(const std::shared_ptr<Outcome>& outcome) {
    EXPECT_THAT(outcome->result, IsOk());
    return outcome->result.ok() ? outcome->result->fencing_token : 0;
  }

  // A limiter that starts over on `clock`, as a restarted process would.
  void Restart(FakeClock& clock, bool learning, LeaseStore* store = nullptr) {
    LimiterOptions options;
    options.learning_mode = learning;
    limiter_ = std::make_unique<Limiter>(&clock, *TokenSigner::FromKey(kKey), options, &metrics_, store);
    ASSERT_THAT(limiter_->CreateLimit(Concurrency("lock", 1)), IsOk());
  }
};

TEST_F(FencingTest, EachGrantTakesALargerTokenThanAnyBeforeItAndItsIdCarriesIt) {
  ASSERT_THAT(limiter_->CreateLimit(Concurrency("lock", 1)), IsOk());
  ASSERT_THAT(limiter_->CreateLimit(Rate("tokens", 10, 10)), IsOk());
  auto first = Acquire("lock", 1);
  const uint64_t a = Token(first);
  // Tokens start from the wall clock's microseconds, so they grow across restarts that remember nothing.
  EXPECT_GT(a, static_cast<uint64_t>(absl::ToUnixMicros(clock_.Now())));
  auto queued = Acquire("lock", 1);
  EXPECT_FALSE(queued->done);
  ASSERT_THAT(limiter_->Release(first->result->lease_id, ""), IsOk());
  const uint64_t b = Token(queued);  // granted from the queue
  EXPECT_THAT(b, Gt(a));
  auto claim = ParseLeaseId(*TokenSigner::FromKey(kKey), queued->result->lease_id);
  ASSERT_THAT(claim, IsOk());
  EXPECT_EQ(claim->fencing_token, b);
  // Rate grants hold nothing to fence.
  EXPECT_EQ(Token(Acquire("tokens", 1)), 0u);
  // The unary KeepAlive answers the lease with its token.
  auto renewed = limiter_->KeepAlive({queued->result->lease_id}, "");
  ASSERT_THAT(renewed, IsOk());
  EXPECT_EQ((*renewed)[0].fencing_token, b);
}

TEST_F(FencingTest, AnIdMintedBeforeTokensExistedStillParsesWithTokenZero) {
  // The payload's first field was a bare nonce before tokens: such an id is still a valid re-claim.
  auto signer = *TokenSigner::FromKey(kKey);
  const std::string old_id = signer.Sign("ratelimiter-lease", "00112233445566778899aabb:2:gpu:a:b");
  auto claim = ParseLeaseId(signer, old_id);
  ASSERT_THAT(claim, IsOk());
  EXPECT_EQ(claim->fencing_token, 0u);
  EXPECT_EQ(claim->permits, 2);
  EXPECT_EQ(claim->key, "a:b");
  EXPECT_THAT(ParseLeaseId(signer, signer.Sign("ratelimiter-lease", "t12x-00:1:gpu:")),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(FencingTest, AReclaimKeepsItsTokenAndLaterGrantsExceedItWhenTheClockWentBack) {
  Restart(clock_, /*learning=*/false);
  auto held = Acquire("lock", 1);
  const uint64_t before = Token(held);
  const std::string id = held->result->lease_id;
  // The limiter restarts without a store, its clock an hour behind (a stepped clock, a VM restored).
  FakeClock behind(clock_.Now() - absl::Hours(1));
  Restart(behind, /*learning=*/true);
  std::string session = limiter_->OpenSession("holder", nullptr);
  auto reclaimed = limiter_->Reclaim(session, {id});
  ASSERT_THAT(reclaimed[0].result, IsOk());
  EXPECT_EQ(reclaimed[0].result->fencing_token, before);
  ASSERT_THAT(limiter_->Release(id, session), IsOk());
  behind.Advance(absl::Minutes(5));  // learning mode ends
  ASSERT_FALSE(limiter_->learning_mode());
  EXPECT_THAT(Token(Acquire("lock", 1)), Gt(before));
  limiter_.reset();  // before the clock it runs on
}

TEST_F(FencingTest, ARestartOnASnapshotGrantsAboveEveryTokenItEverRecordedEvenReleasedOnes) {
  const std::string path = testing::MakeTestDir() + "/leases.db";
  uint64_t highest = 0;
  {
    auto snapshot = LeaseSnapshot::Open(path);
    ASSERT_THAT(snapshot, IsOk());
    Restart(clock_, /*learning=*/false, snapshot->get());
    for (int i = 0; i < 3; ++i) {
      auto lease = Acquire("lock", 1);
      highest = Token(lease);
      ASSERT_THAT(limiter_->Release(lease->result->lease_id, ""), IsOk());
    }
    limiter_.reset();
  }  // closed as a kill -9 would leave it; nothing is held any more: only the high-water mark remembers the tokens
  auto reopened = LeaseSnapshot::Open(path);
  ASSERT_THAT(reopened, IsOk());
  auto contents = (*reopened)->Load();
  ASSERT_THAT(contents, IsOk());
  EXPECT_TRUE(contents->leases.empty());
  EXPECT_EQ(contents->fencing_high_water, highest);
  FakeClock behind(clock_.Now() - absl::Hours(1));
  Restart(behind, /*learning=*/false, reopened->get());
  EXPECT_EQ(limiter_->Restore(contents->leases, contents->last_alive, contents->fencing_high_water), 0);
  EXPECT_EQ(Token(Acquire("lock", 1)), highest + 1);
  limiter_.reset();  // before the clock and the store it uses
}

}  // namespace
}  // namespace corral::ratelimiter
