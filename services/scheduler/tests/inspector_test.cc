// The rollout inspector's data and HTTP adapter over a real episode table and a real SQLite journal: what the
// page reads (batches, groups, one episode's trajectory), where acknowledged results come from, how long they
// are kept, and who may read them.
#include "services/scheduler/inspector.h"

#include <sqlite3.h>

#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/core/token.h"
#include "libs/http/client.h"
#include "libs/rpc/auth.h"
#include "libs/trajectory/trajectory.h"
#include "services/scheduler/inspector_http.h"
#include "services/scheduler/scheduler_journal.h"
#include "tests/support/io_thread.h"
#include "tests/support/subprocess.h"

namespace corral::scheduler {
namespace {

namespace json = boost::json;
namespace bhttp = boost::beast::http;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A CALLS-form trajectory of one call: a user prompt (3 tokens) and a generated answer (2 tokens).
v1::Trajectory OneCall(const std::string& env_id, const std::string& answer) {
  TrajectoryStore store(env_id);
  v1::RecordedCall call;
  call.add_prompt()->set_role("user");
  call.mutable_prompt(0)->set_content("What is 2 + 2?");
  call.mutable_response()->set_role("assistant");
  call.mutable_response()->set_content(answer);
  call.mutable_call()->set_call_id(env_id + "/0");
  for (int id : {11, 12, 13}) call.mutable_call()->add_prompt_token_ids(id);
  for (int id : {21, 22}) call.mutable_call()->add_completion_token_ids(id);
  for (float lp : {-0.5f, -0.25f}) call.mutable_call()->add_completion_logprobs(lp);
  store.Record(std::move(call));
  v1::Trajectory out;
  store.Export(v1::TRAJECTORY_FORMAT_CALLS, &out);
  return out;
}

class InspectorTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(absl::Hours(1)); }
  // The journal goes first: it flushes, and its callbacks still find the table.
  void TearDown() override { journal_.reset(); }
  void Open(absl::Duration retention) {
    journal_.reset();
    inspector_.reset();
    table_.reset();
    journal_ = *SchedulerJournal::Open(dir_ + "/scheduler.db", false, retention);
    // The table says when a result is committed (the journal's writer thread confirms it): taking and releasing
    // the mutex makes Finish's waiter check its condition again.
    table_ = std::make_unique<EpisodeTable>(&clock_, journal_.get(), SubmitLimits{}, 1000, RetryBackoff{},
                                            TableHooks{.on_change = [this] { absl::MutexLock lock(&changed_mu_); }});
    inspector_ =
        std::make_unique<Inspector>(table_.get(), [this](const std::string& id) { return journal_->AckedResult(id); });
  }

  // A batch of `tasks` tasks × `group_size`, submitted and durable.
  void Submit(const std::string& id, int tasks, uint32_t group_size) {
    v1::BatchSpec spec;
    spec.set_batch_id(id);
    spec.set_group_size(group_size);
    std::vector<std::shared_ptr<const v1::Task>> list;
    for (int k = 0; k < tasks; ++k) {
      auto t = std::make_shared<v1::Task>();
      t->set_id(absl::StrCat("task", k));
      t->set_prompt(absl::StrCat("prompt of task ", k));
      list.push_back(std::move(t));
    }
    std::promise<absl::StatusOr<v1::Batch>> done;
    table_->Submit(WithDefaults(spec, SubmitLimits{}, 7), "digest", std::move(list),
                   [&](absl::StatusOr<v1::Batch> b) { done.set_value(std::move(b)); });
    ASSERT_THAT(done.get_future().get(), IsOk());
  }
  // Runs the next queued episode to FINISHED with `reward` (and a one-call trajectory); waits until committed.
  std::string Finish(double reward) {
    std::optional<EpisodeTicket> t = table_->StartNext([](const v1::Task&) { return true; });
    EXPECT_TRUE(t.has_value());
    if (!t) return "";
    v1::EpisodeResult r;
    *r.mutable_ids() = t->ids;
    r.set_status(v1::EPISODE_STATUS_FINISHED);
    r.set_reward(reward);
    *r.mutable_trajectory() = OneCall(t->env_id, reward > 0 ? "4" : "5");
    (void)table_->Finish(*t, std::move(r));
    const std::string id = t->ids.episode_id();
    const auto committed = [&] { return table_->UnackedResult(id).ok(); };
    absl::MutexLock lock(&changed_mu_);
    EXPECT_TRUE(changed_mu_.AwaitWithTimeout(absl::Condition(&committed), absl::Seconds(10))) << "never committed";
    return id;
  }
  void Ack(const std::string& id) {
    std::promise<absl::Status> durable;
    ASSERT_THAT(table_->Ack({id}, [&](absl::Status s, uint32_t) { durable.set_value(s); }), IsOk());
    ASSERT_THAT(durable.get_future().get(), IsOk());
  }
  json::value Json(const absl::StatusOr<std::string>& text) {
    EXPECT_THAT(text, IsOk());
    return text.ok() ? json::parse(*text) : json::value();
  }

  testing::IoThread io_;  // first: destroyed last
  std::string dir_ = testing::MakeTestDir();
  FakeClock clock_;
  std::unique_ptr<SchedulerJournal> journal_;
  std::unique_ptr<EpisodeTable> table_;
  std::unique_ptr<Inspector> inspector_;
  absl::Mutex changed_mu_;
};

TEST(RewardHistogramTest, BinsStretchToTheRewardsSeenAndSkipNonFiniteOnes) {
  RewardHistogram h = HistogramOf({0, 0.05, 0.5, 1, 1, std::nan("")}, 10);
  EXPECT_EQ(h.lo, 0);
  EXPECT_EQ(h.hi, 1);
  EXPECT_THAT(h.counts, ElementsAre(2, 0, 0, 0, 0, 1, 0, 0, 0, 2));
  h = HistogramOf({-1, 3}, 4);
  EXPECT_EQ(h.lo, -1);
  EXPECT_EQ(h.hi, 3);
  EXPECT_THAT(h.counts, ElementsAre(1, 0, 0, 1));
  EXPECT_THAT(HistogramOf({}, 2).counts, ElementsAre(0, 0));
}

TEST_F(InspectorTest, ABatchShowsItsGroupsSideBySideWithRewardsAndHistogram) {
  ASSERT_NO_FATAL_FAILURE(Submit("b1", 2, 2));
  Finish(1);
  Finish(0);
  Finish(1);  // group 1 keeps one episode running
  ASSERT_TRUE(table_->StartNext([](const v1::Task&) { return true; }).has_value());

  json::value v = Json(inspector_->BatchJson("b1"));
  EXPECT_EQ(v.at("batch").at("batch_id"), "b1");
  EXPECT_EQ(v.at("batch").at("state"), "BATCH_STATE_RUNNING");
  EXPECT_EQ(v.at("reward_histogram").at("counts").as_array().front(), 1);
  EXPECT_EQ(v.at("reward_histogram").at("counts").as_array().back(), 2);
  const json::array& groups = v.at("groups").as_array();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].at("task_id"), "task0");
  EXPECT_EQ(groups[0].at("prompt"), "prompt of task 0");
  EXPECT_EQ(groups[0].at("mean_reward").to_number<double>(), 0.5);
  const json::array& first = groups[0].at("episodes").as_array();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].at("episode_id"), "b1:g0:e0");
  EXPECT_EQ(first[0].at("status"), "EPISODE_STATUS_FINISHED");
  EXPECT_EQ(first[0].at("reward").to_number<double>(), 1);
  EXPECT_EQ(first[1].at("reward").to_number<double>(), 0);
  const json::array& second = groups[1].at("episodes").as_array();
  EXPECT_EQ(second[0].at("state"), "ended");
  EXPECT_EQ(second[1].at("state"), "running");
  EXPECT_FALSE(second[1].as_object().contains("reward"));

  json::value list = Json(inspector_->BatchesJson(10, ""));
  ASSERT_EQ(list.at("batches").as_array().size(), 1u);
  EXPECT_EQ(list.at("batches").at(0).at("batch_id"), "b1");
  EXPECT_EQ(list.at("batches").at(0).at("reward_histogram").at("counts").as_array().back(), 2);
  EXPECT_THAT(inspector_->BatchJson("nope"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(inspector_->BatchesJson(10, "garbage"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(InspectorTest, AnEpisodeComesFromTheTableThenFromTheJournalUntilItsRetentionEnds) {
  ASSERT_NO_FATAL_FAILURE(Submit("b1", 1, 2));
  const std::string id = Finish(1);
  EXPECT_THAT(inspector_->EpisodeJson("b1:g0:e1"), StatusIs(absl::StatusCode::kFailedPrecondition));

  json::value v = Json(inspector_->EpisodeJson(id));
  EXPECT_EQ(v.at("source"), "table");
  const json::value& r = v.at("result");
  EXPECT_EQ(r.at("reward").to_number<double>(), 1);
  // The trajectory in the TRAJECTORY form: the conversation and its tokens with the loss mask.
  EXPECT_EQ(r.at("trajectory").at("format"), "TRAJECTORY_FORMAT_TRAJECTORY");
  const json::value& branch = r.at("trajectory").at("branches").at(0);
  EXPECT_EQ(branch.at("messages").at(1).at("message").at("content"), "4");
  EXPECT_EQ(branch.at("messages").at(1).at("generated").as_bool(), true);
  EXPECT_EQ(json::serialize(branch.at("token_ids")), "[11,12,13,21,22]");
  EXPECT_EQ(json::serialize(branch.at("token_generated")), "[false,false,false,true,true]");

  Ack(id);
  v = Json(inspector_->EpisodeJson(id));
  EXPECT_EQ(v.at("source"), "journal");
  EXPECT_EQ(v.at("result").at("reward").to_number<double>(), 1);
  EXPECT_EQ(json::serialize(v.at("result").at("trajectory").at("branches").at(0).at("token_generated")),
            "[false,false,false,true,true]");
  // A restart does not read acknowledged payloads back into memory.
  auto snapshot = journal_->Load();
  ASSERT_THAT(snapshot, IsOk());
  ASSERT_EQ(snapshot->results.size(), 1u);
  EXPECT_TRUE(snapshot->results[0].acked);
  EXPECT_EQ(snapshot->results[0].result, "");

  EXPECT_THAT(journal_->DropAckedBefore(absl::Now() - absl::Minutes(1)), IsOkAndHolds(0));
  EXPECT_THAT(journal_->DropAckedBefore(absl::Now() + absl::Seconds(1)), IsOkAndHolds(1));
  EXPECT_THAT(inspector_->EpisodeJson(id), StatusIs(absl::StatusCode::kNotFound, HasSubstr("result_retention")));
  EXPECT_THAT(inspector_->EpisodeJson("b1:g7:e0"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(inspector_->EpisodeJson("../etc"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(InspectorTest, WithoutRetentionTheAckDropsThePayload) {
  Open(absl::ZeroDuration());
  ASSERT_NO_FATAL_FAILURE(Submit("b1", 1, 1));
  const std::string id = Finish(1);
  Ack(id);
  EXPECT_THAT(inspector_->EpisodeJson(id), StatusIs(absl::StatusCode::kNotFound));
}

TEST(SchedulerJournalTest, AJournalFromBeforeRetentionIsMigrated) {
  const std::string path = testing::MakeTestDir() + "/old.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(db,
                   "CREATE TABLE results (seq INTEGER PRIMARY KEY, episode_id TEXT NOT NULL UNIQUE, status INTEGER "
                   "NOT NULL, reward TEXT NOT NULL, redundant INTEGER NOT NULL, acked INTEGER NOT NULL DEFAULT 0, "
                   "result BLOB); INSERT INTO results VALUES (1, 'b:g0:e0', 1, '1', 0, 0, x'08');",
                   nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  auto journal = SchedulerJournal::Open(path, false, absl::Hours(1));
  ASSERT_THAT(journal, IsOk());
  std::promise<absl::Status> acked;
  (*journal)->Acked({"b:g0:e0"}, [&](absl::Status s) { acked.set_value(s); });
  ASSERT_THAT(acked.get_future().get(), IsOk());
  EXPECT_THAT((*journal)->AckedResult("b:g0:e0"), IsOkAndHolds(std::string("\x08")));
  // Opening again finds the column there.
  journal->reset();
  EXPECT_THAT(SchedulerJournal::Open(path, false, absl::Hours(1)), IsOk());
}

class InspectorHttpTest : public InspectorTest {
 protected:
  void Serve(bool require_token) {
    server_ = std::make_unique<http::HttpServer>(http::ServerLimits{},
                                                 MakeInspectorHandler(inspector_.get(), &auth_, require_token), 1);
    port_ = *server_->Listen("127.0.0.1:0");
  }
  void TearDown() override {
    if (server_) server_->Stop();
    InspectorTest::TearDown();
  }
  http::FetchResult Get(const std::string& target, const std::string& bearer = "",
                        bhttp::verb method = bhttp::verb::get) {
    http::Request req{method, target, 11};
    req.set(bhttp::field::host, "scheduler");
    if (!bearer.empty()) req.set(bhttp::field::authorization, "Bearer " + bearer);
    req.prepare_payload();
    auto r = io_.RunSync(http::Fetch(io_.context().get_executor(), "127.0.0.1", port_, req, absl::Seconds(10)));
    EXPECT_THAT(r, IsOk());
    return r.ok() ? *r : http::FetchResult{};
  }

  TokenSigner signer_ = TokenSigner::Ephemeral();
  CallAuthenticator auth_{signer_};
  std::unique_ptr<http::HttpServer> server_;
  uint16_t port_ = 0;
};

TEST_F(InspectorHttpTest, TheApiWantsTheClusterTokenButThePageDoesNot) {
  ASSERT_NO_FATAL_FAILURE(Submit("b1", 1, 1));
  Serve(/*require_token=*/true);
  const std::string token = MintClusterToken(signer_);
  http::FetchResult r = Get("/api/batches");
  EXPECT_EQ(r.status, 401);
  EXPECT_THAT(r.body, HasSubstr("cluster token"));
  EXPECT_EQ(Get("/api/batches", "corral.forged").status, 401);
  EXPECT_EQ(Get("/api/batches?token=corral.forged").status, 401);
  r = Get("/api/batches", token);
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(r.body, HasSubstr(R"("batch_id":"b1")"));
  EXPECT_EQ(Get("/api/batch?id=b1&token=" + token).status, 200);

  r = Get("/");
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(r.content_type, HasSubstr("text/html"));
  EXPECT_THAT(r.body, HasSubstr("inspector.js"));
  r = Get("/inspector.js");
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(r.content_type, HasSubstr("javascript"));
  EXPECT_THAT(r.body, HasSubstr("api('/api/batches"));
  EXPECT_EQ(Get("/inspector.css").status, 200);
}

TEST_F(InspectorHttpTest, BadRequestsGetClearErrors) {
  ASSERT_NO_FATAL_FAILURE(Submit("b1", 1, 1));
  Serve(/*require_token=*/false);
  EXPECT_EQ(Get("/api/batches").status, 200);
  http::FetchResult r = Get("/api/batches", "", bhttp::verb::post);
  EXPECT_EQ(r.status, 405);
  EXPECT_THAT(r.body, HasSubstr("read-only"));
  EXPECT_EQ(Get("/api/batches", "", bhttp::verb::delete_).status, 405);
  r = Get("/api/episode");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("?id="));
  EXPECT_EQ(Get("/api/batches?page_size=x").status, 400);
  EXPECT_EQ(Get("/api/batch?id=nope").status, 404);
  EXPECT_EQ(Get("/api/episode?id=b1%3Ag0%3Ae0").status, 409);  // queued: no result yet
  EXPECT_EQ(Get("/api/nothing").status, 404);
  EXPECT_EQ(Get("/../secret").status, 404);
  EXPECT_EQ(Get("/a%zz").status, 400);
  EXPECT_EQ(Get("/health").status, 200);
}

}  // namespace
}  // namespace corral::scheduler
