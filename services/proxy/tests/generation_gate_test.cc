// GenerationGate on its own: calls held at the gate while paused and released by the resume, a tick that gives
// up, ABORT cutting only the continuable calls upstream, and control requests that are stale or repeated. The
// clock is fake; the gate's waits are asio timers on the test's own io_context, run on the test's thread and
// ended by the resume (or a 1 ms tick).
#include "services/proxy/generation_gate.h"

#include <future>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"
#include "libs/async/testing/poll_await.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "prometheus/registry.h"
#include "services/proxy/tests/proxy_test_support.h"

namespace corral::proxy {
namespace {

namespace asio = boost::asio;

v1::PauseGenerationRequest PauseRequest(uint64_t sequence, v1::PauseMode mode = v1::PAUSE_MODE_DRAIN) {
  v1::PauseGenerationRequest r;
  r.set_sequence(sequence);
  r.set_mode(mode);
  return r;
}

v1::ResumeGenerationRequest ResumeRequest(uint64_t sequence) {
  v1::ResumeGenerationRequest r;
  r.set_sequence(sequence);
  return r;
}

class GenerationGateTest : public ::testing::Test {
 protected:
  // Enters `call`, run until it waits at the gate or is through; the future holds Enter's answer.
  std::future<bool> EnterAsync(const GenerationGate::CallRef& call, absl::Duration interval,
                               GenerationGate::OnTick on_tick = nullptr) {
    if (!on_tick) on_tick = []() -> asio::awaitable<bool> { co_return true; };
    auto entered = asio::co_spawn(io_, gate_.Enter(call, interval, std::move(on_tick)), asio::use_future);
    Barrier();
    return entered;
  }
  // Everything posted to the calls' executor before this call has run when it returns.
  void Barrier() { async::PollIdle(io_); }
  // Enter's answer, once the gate lets the call through or it gives up (its ticks are real 1 ms timers: each
  // round runs the next handler, bounded so that a gate that never answers fails the test instead of hanging).
  bool Entered(std::future<bool>& entered) {
    while (entered.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      io_.restart();
      if (io_.run_one_for(std::chrono::seconds(10)) == 0) {
        ADD_FAILURE() << "the gate did not answer";
        return false;
      }
    }
    return entered.get();
  }

  // Enters `call` while the gate is open: Enter's answer.
  bool EnterNow(const GenerationGate::CallRef& call) {
    std::future<bool> entered = EnterAsync(call, absl::Hours(1));
    return Entered(entered);
  }

  asio::io_context io_;  // first: destroyed last
  FakeClock clock_;
  prometheus::Registry registry_;
  ProxyMetrics metrics_{registry_};
  PolicyVersion version_;
  GenerationGate gate_{&version_, &metrics_, &clock_};
};

TEST_F(GenerationGateTest, APauseHoldsACallAtTheGateUntilTheResume) {
  auto call = gate_.Register(io_.get_executor());
  ASSERT_TRUE(gate_.Pause(PauseRequest(1)));
  EXPECT_TRUE(gate_.paused());
  std::future<bool> entered = EnterAsync(call, absl::Hours(1));
  ASSERT_EQ(gate_.Counts().held(), 1u);
  EXPECT_EQ(entered.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_EQ(metrics_.calls_held.Value(), 1);

  clock_.Advance(absl::Seconds(30));
  auto resumed = gate_.Resume(ResumeRequest(2));
  ASSERT_THAT(resumed, IsOk());
  EXPECT_EQ(FromProto(resumed->paused_for()), absl::Seconds(30));
  EXPECT_EQ(resumed->released(), 1u);
  EXPECT_TRUE(Entered(entered));
  EXPECT_FALSE(gate_.paused());
  EXPECT_EQ(gate_.Counts().held(), 0u);
  EXPECT_FALSE(gate_.Quiet());  // the call is upstream now
  gate_.Leave(*call);
  EXPECT_TRUE(gate_.Quiet());
  EXPECT_EQ(metrics_.paused_seconds.Value(), 30);
  gate_.Unregister(call);
}

TEST_F(GenerationGateTest, ATickThatGivesUpEndsTheWaitAndTheCallIsNotCounted) {
  auto call = gate_.Register(io_.get_executor());
  ASSERT_TRUE(gate_.Pause(PauseRequest(1)));
  int ticks = 0;
  std::future<bool> entered = EnterAsync(call, absl::Milliseconds(1), [&]() -> asio::awaitable<bool> {
    co_return ++ticks < 3;  // the agent went away on the third keepalive
  });
  EXPECT_FALSE(Entered(entered));
  EXPECT_EQ(ticks, 3);
  EXPECT_EQ(gate_.Counts().held(), 0u);
  EXPECT_TRUE(gate_.Quiet());
  gate_.Unregister(call);
}

TEST_F(GenerationGateTest, AnAbortCutsOnlyTheContinuableCallsUpstream) {
  auto upstream = gate_.Register(io_.get_executor());
  auto not_continuable = gate_.Register(io_.get_executor());
  auto waiting = gate_.Register(io_.get_executor());
  ASSERT_TRUE(EnterNow(upstream));
  ASSERT_TRUE(EnterNow(not_continuable));
  not_continuable->continuable = false;  // on the calls' thread: this one

  ASSERT_TRUE(gate_.Pause(PauseRequest(1, v1::PAUSE_MODE_ABORT)));
  Barrier();  // the cuts are posted to the calls' executor
  EXPECT_TRUE(upstream->aborted);
  EXPECT_FALSE(not_continuable->aborted);
  EXPECT_FALSE(waiting->aborted);  // never entered
  EXPECT_EQ(gate_.Counts().aborted(), 1u);
  EXPECT_EQ(metrics_.calls_aborted.Value(), 1);

  // The cut call leaves, waits at the gate, and goes on after the resume.
  gate_.Leave(*upstream);
  std::future<bool> again = EnterAsync(upstream, absl::Hours(1));
  ASSERT_EQ(gate_.Counts().held(), 1u);
  ASSERT_THAT(gate_.Resume(ResumeRequest(2)), IsOk());
  EXPECT_TRUE(Entered(again));
  gate_.Continued(*upstream);
  EXPECT_FALSE(upstream->aborted);
  EXPECT_EQ(metrics_.calls_continued.Value(), 1);
  for (auto* c : {&upstream, &not_continuable, &waiting}) gate_.Unregister(*c);
  EXPECT_TRUE(gate_.Quiet());
}

TEST_F(GenerationGateTest, StaleAndRepeatedControlRequestsChangeNothing) {
  ASSERT_TRUE(gate_.Pause(PauseRequest(5)));
  clock_.Advance(absl::Seconds(10));
  EXPECT_FALSE(gate_.Pause(PauseRequest(3)));  // older than one applied
  EXPECT_TRUE(gate_.Pause(PauseRequest(6)));   // a repeat: the pause does not start again
  EXPECT_EQ(metrics_.pauses.Value(), 1);
  // A stale resume leaves it paused; a current one measures the pause from its first request.
  auto stale = gate_.Resume(ResumeRequest(4));
  ASSERT_THAT(stale, IsOk());
  EXPECT_TRUE(gate_.paused());
  EXPECT_FALSE(stale->has_paused_for());
  clock_.Advance(absl::Seconds(5));
  auto resumed = gate_.Resume(ResumeRequest(7));
  ASSERT_THAT(resumed, IsOk());
  EXPECT_EQ(FromProto(resumed->paused_for()), absl::Seconds(15));
  // Sequence 0 (a caller that does not number its requests) is never stale.
  EXPECT_TRUE(gate_.Pause(PauseRequest(0)));
  ASSERT_THAT(gate_.Resume(ResumeRequest(0)), IsOk());
  // Versions only move forward.
  v1::UpdatePolicyRequest update;
  update.set_sequence(8);
  update.set_version(3);
  auto updated = gate_.UpdatePolicy(update);
  ASSERT_THAT(updated, IsOk());
  EXPECT_EQ(updated->previous_version(), 0);
  EXPECT_EQ(updated->version(), 3);
  update.set_sequence(9);
  update.set_version(2);
  EXPECT_THAT(gate_.UpdatePolicy(update).status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(version_.current(), 3);
}

TEST_F(GenerationGateTest, ADrainCountsTheCallsThatLeftSinceThePause) {
  auto a = gate_.Register(io_.get_executor());
  auto b = gate_.Register(io_.get_executor());
  ASSERT_TRUE(EnterNow(a));
  ASSERT_TRUE(EnterNow(b));
  ASSERT_TRUE(gate_.Pause(PauseRequest(1)));
  EXPECT_FALSE(gate_.Quiet());
  gate_.Leave(*a);
  EXPECT_EQ(gate_.Counts().drained(), 1u);
  EXPECT_FALSE(gate_.Quiet());
  gate_.Leave(*b);
  EXPECT_EQ(gate_.Counts().drained(), 2u);
  EXPECT_TRUE(gate_.Quiet());
  gate_.Unregister(a);
  gate_.Unregister(b);
}

}  // namespace
}  // namespace corral::proxy
