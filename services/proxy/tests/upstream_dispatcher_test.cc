// UpstreamDispatcher against real HTTP upstreams on loopback: retries elsewhere before the first byte, gives up
// with the reason after its attempts, keeps a streaming agent company while the upstream is slow, and counts a
// call against its upstream exactly while the caller holds the response. HealthChecker marks a dead upstream.
#include "services/proxy/upstream_dispatcher.h"

#include <atomic>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/async/sleep.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "prometheus/registry.h"
#include "services/proxy/health_checker.h"
#include "services/proxy/tests/proxy_test_support.h"

namespace corral::proxy {
namespace {

namespace asio = boost::asio;
using ::testing::HasSubstr;

http::Handler Answer(int status, std::string body, absl::Duration delay = absl::ZeroDuration(),
                     std::atomic<int>* calls = nullptr) {
  return [=](http::Request& req, http::Responder& res) -> asio::awaitable<void> {
    if (calls != nullptr && req.target() != "/health") ++*calls;
    co_await async::SleepFor(delay);
    co_await res.Send(status, "application/json", body);
  };
}

class DispatcherTest : public ::testing::Test {
 protected:
  testing::IoThread io_;  // first: destroyed last, after everything bound to its context

  void Build(std::vector<std::string> urls, RelayOptions options = {}) {
    std::vector<UpstreamSpec> specs;
    for (const auto& url : urls) specs.push_back(*ParseUpstreamUrl(url));
    pool_ = std::make_unique<UpstreamPool>(std::move(specs), &clock_);
    std::vector<std::string> names;
    for (const auto* u : pool_->all()) names.push_back(u->spec.name);
    metrics_.SetUpstreams(std::move(names));
    dispatcher_ = std::make_unique<UpstreamDispatcher>(pool_.get(), &metrics_, &clock_, options);
  }
  // An env_id whose sticky upstream is `u`, so a test knows which upstream is tried first.
  std::string EnvStickyTo(const Upstream* u) {
    for (int i = 0;; ++i) {
      std::string env = "env-" + std::to_string(i);
      if (pool_->Pick(env, "m", {}) == u) return env;
    }
  }
  DispatchRequest Request(const std::string& env, bool stream = false) {
    return {env, "m", "/v1/chat/completions", R"({"model":"m","messages":[]})", stream};
  }

  FakeClock clock_;
  prometheus::Registry registry_;
  ProxyMetrics metrics_{registry_};
  std::unique_ptr<UpstreamPool> pool_;
  std::unique_ptr<UpstreamDispatcher> dispatcher_;
};

TEST_F(DispatcherTest, AFailingStickyUpstreamIsRetriedElsewhereBeforeTheFirstByte) {
  std::atomic<int> broken_calls = 0;
  testing::ScriptedUpstream broken(Answer(503, R"({"error":"overloaded"})", absl::ZeroDuration(), &broken_calls));
  testing::ScriptedUpstream good(Answer(200, R"({"choices":[]})"));
  Build({broken.url(), good.url()});
  Upstream* first = pool_->all()[0];
  Upstream* second = pool_->all()[1];
  io_.RunSync([&]() -> asio::awaitable<void> {
    Dispatch d = co_await dispatcher_->Send(Request(EnvStickyTo(first)), nullptr);
    EXPECT_NE(d.connection, nullptr) << d.error;
    if (d.connection == nullptr) co_return;
    EXPECT_EQ(d.connection->status(), 200);
    EXPECT_EQ(d.attempts, 2);
    EXPECT_EQ(d.lease.get(), second);
    EXPECT_EQ(second->outstanding.load(), 1);  // counted while the caller holds the response…
    EXPECT_EQ(first->outstanding.load(), 0);
    auto body = co_await d.connection->ReadAll(absl::Seconds(5));
    EXPECT_THAT(body, IsOkAndHolds(R"({"choices":[]})"));
    dispatcher_->Return(std::move(d.connection));
  }());
  EXPECT_EQ(pool_->all()[1]->outstanding.load(), 0);  // …and no longer once it is done
  EXPECT_EQ(broken_calls.load(), 1);
  EXPECT_EQ(metrics_.retries.Value(), 1);
  // The failed attempt is counted against the upstream that failed, and only there.
  EXPECT_EQ(metrics_.upstream_errors.Add({{"upstream", first->spec.name}}).Value(), 1);
  EXPECT_EQ(metrics_.upstream_errors.Add({{"upstream", second->spec.name}}).Value(), 0);
}

TEST_F(DispatcherTest, WhenNoUpstreamAnswersTheReasonAndTheAttemptsAreReported) {
  testing::ScriptedUpstream broken(Answer(500, "{}"));
  Build({broken.url(), "http://127.0.0.1:1"},
        {.connect_timeout = absl::Seconds(1), .max_attempts = 3, .retry_backoff = absl::Milliseconds(1)});
  Dispatch d = io_.RunSync(dispatcher_->Send(Request("env"), nullptr));
  EXPECT_EQ(d.connection, nullptr);
  EXPECT_EQ(d.http_status, 502);
  EXPECT_EQ(d.attempts, 2);  // each upstream once: a third would repeat one
  EXPECT_THAT(d.error, HasSubstr("no upstream answered (2 attempts)"));
  EXPECT_FALSE(d.lease);
  for (Upstream* u : pool_->all()) EXPECT_EQ(u->outstanding.load(), 0);
  // No upstream serves an unknown model at all: 503.
  DispatchRequest other = Request("env");
  std::vector<UpstreamSpec> specs = {*ParseUpstreamUrl(broken.url())};
  specs[0].models = {"only-this"};
  pool_ = std::make_unique<UpstreamPool>(specs, &clock_);
  dispatcher_ = std::make_unique<UpstreamDispatcher>(pool_.get(), &metrics_, &clock_, RelayOptions{});
  d = io_.RunSync(dispatcher_->Send(other, nullptr));
  EXPECT_EQ(d.http_status, 503);
  EXPECT_EQ(d.attempts, 0);
}

TEST_F(DispatcherTest, AStreamingCallIsKeptCompanyWhileTheUpstreamIsSlowToAnswer) {
  testing::ScriptedUpstream slow(Answer(200, "data: [DONE]\n\n", absl::Milliseconds(400)));
  Build({slow.url()}, {.keepalive_interval = absl::Milliseconds(50)});
  int waits = 0;
  Dispatch d = io_.RunSync(dispatcher_->Send(Request("env", /*stream=*/true), [&]() -> asio::awaitable<void> {
    ++waits;
    co_return;
  }));
  ASSERT_NE(d.connection, nullptr) << d.error;
  EXPECT_GE(waits, 2);
  // A non-streaming call has nobody to keep company: no calls.
  waits = 0;
  d = io_.RunSync(dispatcher_->Send(Request("env", /*stream=*/false), [&]() -> asio::awaitable<void> {
    ++waits;
    co_return;
  }));
  EXPECT_EQ(waits, 0);
}

TEST_F(DispatcherTest, HealthChecksMarkADeadUpstreamAndLearnTheModelsOfALiveOne) {
  testing::ScriptedUpstream live([](http::Request& req, http::Responder& res) -> asio::awaitable<void> {
    if (req.target() == "/v1/models") {
      co_await res.Send(200, "application/json", R"({"object":"list","data":[{"id":"served-model"}]})");
    } else {
      co_await res.Send(200, "application/json", "{}");
    }
  });
  Build({live.url(), "http://127.0.0.1:1"});
  HealthChecker health(pool_.get(), &metrics_, &clock_);
  io_.RunSync(health.CheckAll());
  EXPECT_TRUE(pool_->all()[0]->healthy.load());
  EXPECT_FALSE(pool_->all()[1]->healthy.load());
  EXPECT_THAT(pool_->all()[0]->discovered(), ::testing::ElementsAre("served-model"));
  EXPECT_EQ(pool_->Pick("any", "served-model", {}), pool_->all()[0]);
}

TEST_F(DispatcherTest, AnUpstreamWhoseHealthCheckHangsStillAnswersEveryCall) {
  // A saturated backend: /health never answers in time, completions do.
  std::atomic<int> calls = 0;
  testing::ScriptedUpstream busy([&](http::Request& req, http::Responder& res) -> asio::awaitable<void> {
    if (req.target() == "/health") co_await testing::HangUntilTheServerStops();
    if (req.target() != "/health") ++calls;
    co_await res.Send(200, "application/json", "{}");
  });
  Build({busy.url()});
  HealthChecker health(pool_.get(), &metrics_, &clock_, absl::Milliseconds(100));
  io_.RunSync(health.CheckAll());
  ASSERT_FALSE(pool_->all()[0]->healthy.load());
  for (int i = 0; i < 5; ++i) {
    Dispatch d = io_.RunSync(dispatcher_->Send(Request("env-" + std::to_string(i)), nullptr));
    EXPECT_NE(d.connection, nullptr) << d.error;
  }
  EXPECT_EQ(calls.load(), 5);
  EXPECT_TRUE(pool_->all()[0]->healthy.load());  // the calls that got through count as health
}

TEST_F(DispatcherTest, AnUpstreamThatRefusesEverythingIsNamedInTheError) {
  testing::ScriptedUpstream refusing(Answer(503, "{}"));
  Build({refusing.url()}, {.max_attempts = 3, .retry_backoff = absl::Milliseconds(1)});
  HealthChecker health(pool_.get(), &metrics_, &clock_, absl::Milliseconds(500));
  io_.RunSync(health.CheckAll());
  ASSERT_FALSE(pool_->all()[0]->healthy.load());
  Dispatch d = io_.RunSync(dispatcher_->Send(Request("env"), nullptr));
  EXPECT_EQ(d.connection, nullptr);
  EXPECT_EQ(d.attempts, 1);  // tried, unhealthy as it is: it is the only one
  EXPECT_THAT(d.error, HasSubstr(pool_->all()[0]->spec.name + " answered HTTP 503"));
  // Where another upstream is healthy, the unhealthy one is passed over, and the error says so and why.
  testing::ScriptedUpstream healthy_but_failing([](http::Request& req, http::Responder& res) -> asio::awaitable<void> {
    co_await res.Send(req.target() == "/health" ? 200 : 500, "application/json", "{}");
  });
  Build({refusing.url(), healthy_but_failing.url()}, {.max_attempts = 3, .retry_backoff = absl::Milliseconds(1)});
  HealthChecker both(pool_.get(), &metrics_, &clock_, absl::Milliseconds(500));
  io_.RunSync(both.CheckAll());
  d = io_.RunSync(dispatcher_->Send(Request("env"), nullptr));
  EXPECT_EQ(d.attempts, 1);
  EXPECT_THAT(d.error, HasSubstr(pool_->all()[1]->spec.name + " answered HTTP 500"));
  EXPECT_THAT(d.error,
              HasSubstr("not tried: " + pool_->all()[0]->spec.name + " (unhealthy: GET /health answered HTTP 503)"));
}

}  // namespace
}  // namespace corral::proxy
