#include "services/proxy/upstreams.h"

#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::proxy {
namespace {

std::vector<UpstreamSpec> Three() {
  std::vector<UpstreamSpec> specs;
  for (int i = 0; i < 3; ++i) specs.push_back(*ParseUpstreamUrl("http://127.0.0.1:" + std::to_string(8000 + i)));
  return specs;
}

TEST(UpstreamPoolTest, SessionsAreStickyAndSpreadAcrossUpstreams) {
  FakeClock clock;
  UpstreamPool pool(Three(), &clock);
  std::map<std::string, int> hits;
  for (int s = 0; s < 300; ++s) {
    const std::string env = "episode-" + std::to_string(s);
    Upstream* first = pool.Pick(env, "m", {});
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(pool.Pick(env, "m", {}), first);  // sticky
    hits[first->spec.name]++;
  }
  ASSERT_EQ(hits.size(), 3u);
  for (const auto& [name, n] : hits) EXPECT_GT(n, 50) << name;  // roughly even
}

TEST(UpstreamPoolTest, AnOpenCircuitOrAFailedHealthCheckMovesTheSessionToTheLeastLoaded) {
  FakeClock clock;
  UpstreamPool pool(Three(), &clock, BreakerOptions{.failures_to_open = 2, .open_for = absl::Seconds(10)});
  Upstream* sticky = pool.Pick("env", "m", {});
  for (int i = 0; i < 2; ++i) pool.Failed(sticky);
  Upstream* fallback = pool.Pick("env", "m", {});
  ASSERT_NE(fallback, nullptr);
  EXPECT_NE(fallback, sticky);
  clock.Advance(absl::Seconds(11));
  EXPECT_EQ(pool.Pick("env", "m", {}), sticky);  // the circuit closed again
  sticky->healthy = false;
  EXPECT_NE(pool.Pick("env", "m", {}), sticky);
  // Excluding what a call already tried, until none is left.
  std::vector<Upstream*> tried = pool.all();
  EXPECT_EQ(pool.Pick("env", "m", tried), nullptr);
}

TEST(UpstreamPoolTest, WhenTooFewUpstreamsOfAModelAreHealthyCallsGoToAllOfThem) {
  FakeClock clock;
  UpstreamPool pool(Three(), &clock);
  // One of three down: the two others take its calls, and the error would say why it was passed over.
  pool.all()[0]->SetHealth(false, "GET /health: timed out");
  for (int s = 0; s < 50; ++s) EXPECT_NE(pool.Pick("env-" + std::to_string(s), "m", {}), pool.all()[0]);
  EXPECT_EQ(pool.Skipped("m", {}), "127.0.0.1:8000 (unhealthy: GET /health: timed out)");
  // Two of three down (33% < 50%): panic, every upstream is tried again, and none is passed over.
  pool.all()[1]->SetHealth(false, "GET /health answered HTTP 503");
  std::set<Upstream*> picked;
  for (int s = 0; s < 50; ++s) picked.insert(pool.Pick("env-" + std::to_string(s), "m", {}));
  EXPECT_EQ(picked.size(), 3u);
  EXPECT_EQ(pool.Skipped("m", {}), "");
  // A call that gets through is a sign of health: out of panic again.
  pool.Succeeded(pool.all()[1]);
  EXPECT_TRUE(pool.all()[1]->healthy.load());
  EXPECT_EQ(pool.all()[1]->health_error(), "");
  EXPECT_NE(pool.Skipped("m", {}), "");
}

TEST(UpstreamPoolTest, TheOnlyUpstreamOfAModelIsTriedWhenUnhealthyUnlessPanicIsOff) {
  FakeClock clock;
  auto one = [] { return std::vector<UpstreamSpec>{*ParseUpstreamUrl("http://127.0.0.1:8000")}; };
  UpstreamPool pool(one(), &clock);
  pool.all()[0]->SetHealth(false, "GET /health: timed out");
  EXPECT_EQ(pool.Pick("env", "m", {}), pool.all()[0]);
  for (int i = 0; i < 3; ++i) pool.Failed(pool.all()[0]);  // circuit open too: still the only one
  EXPECT_EQ(pool.Pick("env", "m", {}), pool.all()[0]);
  EXPECT_EQ(pool.Pick("env", "m", pool.all()), nullptr);  // but never twice in one call

  UpstreamPool strict(one(), &clock, BreakerOptions{.panic_threshold_percent = 0});
  strict.all()[0]->SetHealth(false, "GET /health: timed out");
  EXPECT_EQ(strict.Pick("env", "m", {}), nullptr);
  EXPECT_EQ(strict.Skipped("m", {}), "127.0.0.1:8000 (unhealthy: GET /health: timed out)");
  strict.all()[0]->SetHealth(true, "");
  for (int i = 0; i < 3; ++i) strict.Failed(strict.all()[0]);
  EXPECT_EQ(strict.Skipped("m", {}), "127.0.0.1:8000 (circuit open for 10s more after 3 consecutive failures)");
}

TEST(UpstreamPoolTest, ModelsRestrictWhichUpstreamsServeACall) {
  FakeClock clock;
  auto specs = Three();
  specs[0].models = {"small"};
  specs[1].models = {"big"};
  specs[2].models = {"big"};
  UpstreamPool pool(specs, &clock);
  EXPECT_EQ(pool.Pick("env", "small", {})->spec.name, "127.0.0.1:8000");
  EXPECT_NE(pool.Pick("env", "big", {})->spec.name, "127.0.0.1:8000");
  EXPECT_EQ(pool.Pick("env", "unknown", {}), nullptr);
  EXPECT_THAT(pool.models(), ::testing::ElementsAre("big", "small"));
}

TEST(UpstreamPoolTest, ACallGoesNativeOnlyWhenEveryUpstreamServingTheModelServesTheApi) {
  FakeClock clock;
  auto specs = Three();
  specs[0].models = {"small"};
  specs[0].dialects = {"responses", "messages"};
  specs[1].models = {"big"};
  specs[1].dialects = {"responses"};
  specs[2].models = {"big"};
  UpstreamPool pool(specs, &clock);
  EXPECT_TRUE(pool.ServesNatively("small", "responses"));
  EXPECT_TRUE(pool.ServesNatively("small", "messages"));
  EXPECT_FALSE(pool.ServesNatively("big", "responses"));  // the third would get it, and cannot answer it
  EXPECT_FALSE(pool.ServesNatively("unknown", "responses"));
}

TEST(ParseUpstreamUrlTest, RefusesWhatIsNotHttpHostPort) {
  EXPECT_THAT(ParseUpstreamUrl("https://127.0.0.1:1"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseUpstreamUrl("http://127.0.0.1"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseUpstreamUrl("http://127.0.0.1:70000"), StatusIs(absl::StatusCode::kInvalidArgument));
  auto ok = ParseUpstreamUrl("http://10.0.0.5:8000/v1");
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ(ok->name, "10.0.0.5:8000");
}

}  // namespace
}  // namespace corral::proxy
