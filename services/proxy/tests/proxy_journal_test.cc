// ProxyJournal and SessionLedger: what is journaled comes back into a fresh store (sessions open and closed,
// their calls), acknowledged sessions are forgotten, a corrupt record is refused, and the ledger answers only
// once a change is durable.
#include "services/proxy/proxy_journal.h"

#include <filesystem>
#include <future>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "prometheus/registry.h"
#include "services/proxy/session_ledger.h"
#include "services/proxy/tests/proxy_test_support.h"
#include "tests/support/subprocess.h"

namespace corral::proxy {
namespace {

using ::testing::HasSubstr;

constexpr char kJournalKey[] = "0123456789abcdef0123456789abcdef";

RecordedCall ChatCall(const std::string& question, const std::string& answer) {
  RecordedCall c;
  c.mutable_call()->set_endpoint("/v1/chat/completions");
  c.mutable_call()->set_model("m");
  v1::ChatMessage user;
  user.set_role("user");
  user.set_content(question);
  *c.add_prompt() = user;
  v1::ChatMessage reply;
  reply.set_role("assistant");
  reply.set_content(answer);
  *c.mutable_response() = reply;
  c.mutable_call()->add_completion_token_ids(7);
  c.mutable_call()->add_completion_logprobs(-0.5f);
  return c;
}

class ProxyJournalTest : public ::testing::Test {
 protected:
  testing::IoThread io_;  // first: destroyed last, after everything bound to its context

  void SetUp() override { path_ = corral::testing::MakeTestDir() + "/proxy.db"; }
  std::unique_ptr<SessionStore> Store() { return std::make_unique<SessionStore>(SessionLimits{}, &signer_, &clock_); }

  std::string path_;
  FakeClock clock_;
  TokenSigner signer_ = *TokenSigner::FromKey(kJournalKey);
  prometheus::Registry registry_;
  ProxyMetrics metrics_{registry_};
};

TEST_F(ProxyJournalTest, ALedgersSessionsAndCallsComeBackAfterARestartAndAckedOnesDoNot) {
  {
    auto journal = ProxyJournal::Open(path_, /*fsync=*/false);
    ASSERT_THAT(journal, IsOk());
    auto store = Store();
    SessionLedger ledger(store.get(), journal->get(), &metrics_, &clock_);
    for (const char* env : {"kept", "closed", "acked"}) {
      v1::OpenSessionRequest r;
      r.set_env_id(env);
      std::promise<absl::StatusOr<SessionLedger::Opened>> opened;
      ledger.Open(r, [&](absl::StatusOr<SessionLedger::Opened> o) { opened.set_value(std::move(o)); });
      ASSERT_THAT(opened.get_future().get(), IsOk());
    }
    EXPECT_EQ(metrics_.open_sessions.Value(), 3);
    std::shared_ptr<Session> kept = *store->Find("kept");
    ASSERT_TRUE(kept->TryBeginCall());
    RecordedCall call = ChatCall("2+2?", "4");
    ASSERT_THAT(io_.RunSync(ledger.RecordCall(*kept, call)), IsOk());
    EXPECT_EQ(call.call().seq(), 0u);
    EXPECT_EQ(call.call().call_id(), "kept/0");
    EXPECT_EQ(call.prompt_size(), 1);  // the record stays whole: it is what the journal wrote
    for (const char* env : {"closed", "acked"}) {
      std::promise<absl::Status> closed;
      ledger.Close(env, v1::CLOSE_REASON_CLOSED,
                   [&](absl::StatusOr<std::shared_ptr<Session>> s) { closed.set_value(s.status()); });
      ASSERT_THAT(closed.get_future().get(), IsOk());
    }
    EXPECT_THAT(ledger.Ack({"acked"}), IsOkAndHolds(1u));
    EXPECT_THAT(ledger.Ack({"kept"}), StatusIs(absl::StatusCode::kFailedPrecondition));
  }  // the journal commits what is queued as it closes
  auto journal = ProxyJournal::Open(path_, false);
  ASSERT_THAT(journal, IsOk());
  auto store = Store();
  EXPECT_THAT((*journal)->Load(*store), IsOkAndHolds(2));
  auto kept = store->Find("kept");
  ASSERT_THAT(kept, IsOk());
  EXPECT_TRUE((*kept)->open());
  const v1::Trajectory t = (*kept)->Trajectory(v1::TRAJECTORY_FORMAT_CALLS);
  ASSERT_EQ(t.calls_size(), 1);
  EXPECT_EQ(t.calls(0).completion_token_ids(0), 7);
  ASSERT_EQ(t.messages_size(), 2);
  EXPECT_EQ(t.messages(1).message().content(), "4");
  EXPECT_TRUE(t.messages(1).generated());
  auto closed = store->Find("closed");
  ASSERT_THAT(closed, IsOk());
  EXPECT_FALSE((*closed)->open());
  EXPECT_THAT(store->Find("acked"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ProxyJournalTest, EverythingAnsweredIsInTheRecordLogAloneAndReplaysOverADatabaseThatHasIt) {
  const std::string copy = corral::testing::MakeTestDir() + "/copy.db";
  {
    auto journal = ProxyJournal::Open(path_, /*fsync=*/false);
    ASSERT_THAT(journal, IsOk());
    auto store = Store();
    SessionLedger ledger(store.get(), journal->get(), &metrics_, &clock_);
    for (const char* env : {"a", "b"}) {
      v1::OpenSessionRequest r;
      r.set_env_id(env);
      absl::Status opened = absl::UnknownError("not answered");
      ledger.Open(r, [&](absl::StatusOr<SessionLedger::Opened> o) { opened = o.status(); });
      ASSERT_THAT(opened, IsOk());  // answered before Open returned: logged, not waiting for SQLite
    }
    std::shared_ptr<Session> a = *store->Find("a");
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(a->TryBeginCall());
      RecordedCall call = ChatCall("q" + std::to_string(i), "a");
      ASSERT_THAT(io_.RunSync(ledger.RecordCall(*a, call)), IsOk());
    }
    absl::Status closed = absl::UnknownError("not answered");
    ledger.Close("b", v1::CLOSE_REASON_CLOSED,
                 [&](absl::StatusOr<std::shared_ptr<Session>> s) { closed = s.status(); });
    ASSERT_THAT(closed, IsOk());
    ASSERT_THAT(ledger.Ack({"b"}), IsOkAndHolds(1u));
    // The log as it stands, next to a database that has seen none of it.
    std::filesystem::copy_file(path_ + "-log.1", copy + "-log.1");
    std::filesystem::copy_file(path_ + "-log.1", path_ + "-log.7");  // and once more over the full database
  }
  for (const std::string& path : {copy, path_}) {
    auto journal = ProxyJournal::Open(path, false);
    ASSERT_THAT(journal, IsOk());
    auto store = Store();
    EXPECT_THAT((*journal)->Load(*store), IsOkAndHolds(1)) << path;
    auto a = store->Find("a");
    ASSERT_THAT(a, IsOk());
    const v1::Trajectory t = (*a)->Trajectory(v1::TRAJECTORY_FORMAT_CALLS);
    ASSERT_EQ(t.calls_size(), 3) << path;  // once each, in order
    EXPECT_EQ(t.calls(2).seq(), 2u);
    EXPECT_THAT(store->Find("b"), StatusIs(absl::StatusCode::kNotFound)) << path;  // acknowledged: stays gone
  }
}

TEST_F(ProxyJournalTest, ACorruptCallRecordIsRefusedNotGuessed) {
  EXPECT_THAT(DecodeCall("definitely not a protobuf"), StatusIs(absl::StatusCode::kDataLoss));
  const RecordedCall c = ChatCall("q", "a");
  EXPECT_THAT(DecodeCall(""), StatusIs(absl::StatusCode::kDataLoss));  // a record without its call
  auto round = DecodeCall(EncodeCall(c));
  ASSERT_THAT(round, IsOk());
  EXPECT_EQ(round->prompt_size(), 1);
  ASSERT_TRUE(round->has_response());
  EXPECT_EQ(round->response().content(), "a");
}

TEST_F(ProxyJournalTest, TheLedgerRefusesBadOpensAtOnceAndClosesOfUnknownSessions) {
  auto journal = ProxyJournal::Open(path_, false);
  ASSERT_THAT(journal, IsOk());
  auto store = Store();
  SessionLedger ledger(store.get(), journal->get(), &metrics_, &clock_);
  v1::OpenSessionRequest bad;
  bad.set_env_id("no spaces allowed");
  absl::Status open_status;
  ledger.Open(bad, [&](absl::StatusOr<SessionLedger::Opened> o) { open_status = o.status(); });
  EXPECT_THAT(open_status, StatusIs(absl::StatusCode::kInvalidArgument));  // answered before Open returned
  absl::Status close_status;
  ledger.Close("nobody", v1::CLOSE_REASON_CLOSED,
               [&](absl::StatusOr<std::shared_ptr<Session>> s) { close_status = s.status(); });
  EXPECT_THAT(close_status, StatusIs(absl::StatusCode::kNotFound, HasSubstr("nobody")));
}

}  // namespace
}  // namespace corral::proxy
