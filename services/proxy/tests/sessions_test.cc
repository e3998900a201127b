// SessionStore: opening (idempotent retries, conflicts, limits), env tokens, closing, TTL expiry, retention and
// all-or-nothing acknowledgement.
#include "services/proxy/sessions.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::proxy {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kKey[] = "0123456789abcdef0123456789abcdef";

class SessionStoreTest : public ::testing::Test {
 protected:
  SessionStoreTest() : signer_(*TokenSigner::FromKey(kKey)) { Reset({}); }
  void Reset(SessionLimits limits) { store_ = std::make_unique<SessionStore>(std::move(limits), &signer_, &clock_); }

  static v1::OpenSessionRequest Request(const std::string& env_id, absl::Duration ttl = absl::ZeroDuration()) {
    v1::OpenSessionRequest r;
    r.set_env_id(env_id);
    if (ttl > absl::ZeroDuration()) ToProto(ttl, r.mutable_policy()->mutable_ttl());
    return r;
  }

  FakeClock clock_;
  TokenSigner signer_;
  std::unique_ptr<SessionStore> store_;
};

TEST_F(SessionStoreTest, AnOpenIsIdempotentForTheSameRequestAndRefusesAnotherPolicy) {
  auto first = store_->Open(Request("ep-1"));
  ASSERT_THAT(first, IsOk());
  EXPECT_TRUE(first->created);
  auto again = store_->Open(Request("ep-1"));
  ASSERT_THAT(again, IsOk());
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->session, first->session);
  EXPECT_EQ(again->token, first->token);
  EXPECT_THAT(store_->Open(Request("ep-1", absl::Minutes(3))),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("another policy")));
  EXPECT_THAT(store_->Open(Request("bad id!")), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->Open(Request("ep-2", absl::Hours(100))),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ttl")));
  EXPECT_EQ(store_->open_sessions(), 1u);
}

TEST_F(SessionStoreTest, TokensAuthenticateTheirSessionUntilItClosesAndForgeriesNever) {
  auto opened = store_->Open(Request("ep-1"));
  ASSERT_THAT(opened, IsOk());
  EXPECT_THAT(store_->Authenticate(opened->token), IsOkAndHolds(opened->session));
  EXPECT_THAT(store_->Authenticate("ep-1.forged"), StatusIs(absl::StatusCode::kUnauthenticated));
  std::string one_off = opened->token;  // same session, same length, one signature byte changed
  one_off.back() = one_off.back() == 'A' ? 'B' : 'A';
  EXPECT_THAT(store_->Authenticate(one_off), StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(store_->Authenticate(TokenSigner::Ephemeral().Sign(kEnvTokenPurpose, "ep-1")),
              StatusIs(absl::StatusCode::kUnauthenticated));  // another cluster's key
  EXPECT_THAT(store_->Authenticate(signer_.Sign(kEnvTokenPurpose, "ep-unknown")),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("no session")));
  ASSERT_THAT(store_->Close("ep-1", v1::CLOSE_REASON_CLOSED), IsOk());
  EXPECT_THAT(store_->Authenticate(opened->token),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("closed")));
  EXPECT_THAT(store_->Open(Request("ep-1")), StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("new env_id")));
  EXPECT_THAT(store_->Close("ep-9", v1::CLOSE_REASON_CLOSED), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SessionStoreTest, MaxSessionsCountsOnlyOpenOnes) {
  Reset({.max_sessions = 2});
  ASSERT_THAT(store_->Open(Request("a")), IsOk());
  ASSERT_THAT(store_->Open(Request("b")), IsOk());
  EXPECT_THAT(store_->Open(Request("c")), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_sessions=2")));
  ASSERT_THAT(store_->Close("a", v1::CLOSE_REASON_CLOSED), IsOk());
  EXPECT_THAT(store_->Open(Request("c")), IsOk());
}

TEST_F(SessionStoreTest, TtlClosesRetentionDropsAndAckIsAllOrNothing) {
  Reset({.default_ttl = absl::Minutes(10), .default_retention = absl::Hours(1)});
  ASSERT_THAT(store_->Open(Request("short", absl::Minutes(1))), IsOk());
  ASSERT_THAT(store_->Open(Request("long")), IsOk());
  clock_.Advance(absl::Seconds(61));
  SessionStore::Expired expired = store_->Expire();
  ASSERT_EQ(expired.closed.size(), 1u);
  EXPECT_EQ(expired.closed[0]->env_id(), "short");
  EXPECT_EQ(expired.closed[0]->Snapshot().close_reason(), v1::CLOSE_REASON_TTL_EXPIRED);
  EXPECT_THAT(expired.dropped, IsEmpty());
  // An ack naming an open session acknowledges nothing.
  EXPECT_THAT(store_->Ack({"short", "long"}), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("long")));
  EXPECT_THAT(store_->Find("short"), IsOk());
  clock_.Advance(absl::Hours(1));
  expired = store_->Expire();  // "long" passes its TTL; "short" its retention
  EXPECT_EQ(expired.closed.size(), 1u);
  EXPECT_THAT(expired.dropped, ElementsAre("short"));
  EXPECT_THAT(store_->Find("short"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->Ack({"long"}), IsOkAndHolds(1u));
  EXPECT_THAT(store_->Find("long"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SessionStoreTest, APauseMovesTheOpenSessionsTtlButNotTheClosedOnesRetention) {
  Reset({.default_ttl = absl::Minutes(10), .default_retention = absl::Minutes(10)});
  ASSERT_THAT(store_->Open(Request("open", absl::Minutes(1))), IsOk());
  ASSERT_THAT(store_->Open(Request("closed", absl::Minutes(1))), IsOk());
  ASSERT_THAT(store_->Close("closed", v1::CLOSE_REASON_CLOSED), IsOk());
  const absl::Time open_expiry = (*store_->Find("open"))->expire_time();
  const absl::Time closed_expiry = (*store_->Find("closed"))->expire_time();
  store_->PostponeOpen(absl::Minutes(5));
  EXPECT_EQ((*store_->Find("open"))->expire_time(), open_expiry + absl::Minutes(5));
  EXPECT_EQ((*store_->Find("closed"))->expire_time(), closed_expiry);
  clock_.Advance(absl::Minutes(2));  // past the TTL it had
  EXPECT_TRUE(store_->Expire().closed.empty());
}

TEST_F(SessionStoreTest, MaxCallsCountsCallsInFlightAndRecorded) {
  v1::OpenSessionRequest r = Request("ep");
  r.mutable_policy()->mutable_budget()->set_max_calls(2);
  auto opened = store_->Open(r);
  ASSERT_THAT(opened, IsOk());
  Session& s = *opened->session;
  ASSERT_TRUE(s.TryBeginCall());
  ASSERT_TRUE(s.TryBeginCall());
  EXPECT_FALSE(s.TryBeginCall());  // two in flight
  s.AbandonCall();                 // one in flight
  RecordedCall call;
  call.mutable_call()->set_endpoint("/v1/chat/completions");
  s.EndCall(call);
  EXPECT_EQ(call.call().call_id(), "ep/0");  // as stored; none in flight, one recorded
  EXPECT_EQ(s.Snapshot().calls(), 1u);
  EXPECT_TRUE(s.TryBeginCall());
  EXPECT_FALSE(s.TryBeginCall());  // one recorded + one in flight
}

}  // namespace
}  // namespace corral::proxy
