// The fixture of the episode path's unit tests: an EpisodeDriver over in-memory hosts, proxy and limiter on a
// FakeClock, with helpers to start a task, run the loop to the attempt's end and read its result.
#pragma once

#include <future>
#include <map>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"
#include "libs/async/spawn.h"
#include "libs/async/testing/poll_await.h"
#include "services/ratelimiter/client/testing/fake_limiter.h"
#include "services/sandbox_host/client/testing/fake_host.h"
#include "services/scheduler/episode/episode_driver.h"
#include "services/scheduler/remote/warm_pool.h"
#include "services/scheduler/table/submission.h"
#include "services/scheduler/testing/fake_proxy.h"
#include "services/scheduler/tests/episode_table_fixture.h"

namespace corral::scheduler {
namespace driver_test {

namespace asio = boost::asio;
using namespace testing_support;  // NOLINT: the fakes and the table's helpers
using ::testing::SizeIs;

inline v1::Task SingleTurn(const std::string& answer) {
  v1::Task t;
  t.set_id("t0");
  t.set_prompt("What is 2+2?");
  t.set_runner(v1::RUNNER_SINGLE_TURN);
  t.set_answer(answer);
  t.mutable_reward()->set_function(v1::REWARD_FUNCTION_EXACT);
  return t;
}

// The program an exec runs: its argv[0], or the one the verifier's clean-environment shell execs
// (`sh -c '…exec "$@"' verifier PROGRAM ARGS…`).
inline std::string Program(const v1::ExecRequest& r) {
  const auto& argv = r.command().argv();
  if (argv.size() > 4 && argv[0] == "sh" && argv[3] == "verifier") return argv[4];
  return argv.empty() ? "" : argv[0];
}

// An agent task: `run-agent` in a sandbox, then `verify`, whose reward the fake host writes when asked.
inline v1::Task Agent(absl::Duration agent_timeout = absl::Seconds(60)) {
  v1::Task t;
  t.set_id("t0");
  t.set_prompt("Fix the bug.");
  t.set_runner(v1::RUNNER_AGENT);
  t.mutable_agent()->mutable_command()->add_argv("run-agent");
  t.mutable_verifier()->mutable_command()->add_argv("verify");
  ToProto(agent_timeout, t.mutable_timeouts()->mutable_agent());
  return t;
}

class EpisodeDriverTest : public ::testing::Test {
 protected:
  EpisodeDriverTest() : table_(&clock_, &log_, SubmitLimits{}, 1000) {}
  ~EpisodeDriverTest() override {
    // The registry's poller ends at its next wake-up.
    polling_stopped_ = true;
    clock_.Advance(absl::Seconds(3));
    Settle();
  }

  // Hosts by address (once per test, before anything else; by default one host, "host-a"), polled once now
  // (healthy) and then every 2 s of fake time, as the service does (a host marked full is tried again).
  void UseHosts(const std::vector<std::string>& addresses, uint32_t capacity = 8) {
    ASSERT_EQ(hosts_, nullptr) << "UseHosts is called once, first";
    for (const auto& a : addresses) fakes_[a] = std::make_shared<sandbox::FakeHost>(a, &clock_, capacity);
    hosts_ = std::make_unique<HostRegistry>(
        RegistryOptions{}, addresses, &clock_, HostRegistry::Events{},
        [this](const std::string& address) -> absl::StatusOr<std::shared_ptr<sandbox::HostApi>> {
          return fakes_.at(address);
        });
    Await(hosts_->PollOnce());
    async::Spawn(io_, hosts_->Run(&polling_stopped_), "the host registry's poller");
    MakeDriver();
  }
  void EnsureHosts() {
    if (hosts_ == nullptr) UseHosts({"host-a"});
  }
  void MakeDriver(WarmPool* pool = nullptr) {
    RunnerOptions options;
    options.llm_limit = "llm";
    driver_ = std::make_unique<EpisodeDriver>(DriverParts{.executor = io_.get_executor(),
                                                          .clock = &clock_,
                                                          .table = &table_,
                                                          .hosts = hosts_.get(),
                                                          .proxies = {proxy_},
                                                          .occupancy = &occupancy_,
                                                          .limiter = &limiter_,
                                                          .pool = pool,
                                                          .pauses = &pauses_,
                                                          .on_finished = [this] { ++finished_; }},
                                              options);
  }
  sandbox::FakeHost& host(const std::string& address = "host-a") {
    EnsureHosts();
    return *fakes_.at(address);
  }

  // Runs `aw` on the test's io_context to its end (nothing in it waits on the clock).
  void Await(asio::awaitable<void> aw) { async::PollAwait(io_, std::move(aw)); }

  // Submits a batch of one task and starts its episode on the driver. `max_attempts` 1 makes an infra failure the
  // episode's result (journaled) instead of a retry.
  EpisodeTicket Start(v1::Task task, const std::string& batch = "b", uint32_t max_attempts = 0) {
    EnsureHosts();
    std::vector<std::shared_ptr<const v1::Task>> tasks{std::make_shared<v1::Task>(std::move(task))};
    absl::StatusOr<v1::Batch> submitted = absl::UnknownError("not submitted");
    v1::BatchSpec spec = Spec(batch, 1);
    if (max_attempts > 0) spec.set_max_attempts(max_attempts);
    table_.Submit(spec, "digest-" + batch, std::move(tasks),
                  [&](absl::StatusOr<v1::Batch> b) { submitted = std::move(b); });
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    std::optional<EpisodeTicket> ticket = table_.StartNext(Any);
    EXPECT_TRUE(ticket.has_value());
    driver_->Start(*ticket);
    return *ticket;
  }

  // Runs the event loop, moving the fake clock by `step` whenever nothing is ready, until no attempt runs (or
  // `limit` of fake time passed: a failure). Background work that follows (deletes, acks) is run too.
  void RunToEnd(absl::Duration step = absl::Milliseconds(100), absl::Duration limit = absl::Hours(2)) {
    const absl::Time end = clock_.Now() + limit;
    while (true) {
      io_.restart();
      io_.poll();
      if (driver_->running() == 0) break;
      if (clock_.Now() >= end) {
        ADD_FAILURE() << "the attempt did not end within " << limit;
        return;
      }
      clock_.Advance(step);
    }
    io_.restart();
    io_.poll();
    log_.Commit();
  }
  // Like RunToEnd, until `done` holds.
  void RunUntil(const std::function<bool()>& done, absl::Duration step = absl::Milliseconds(100)) {
    const absl::Time end = clock_.Now() + absl::Hours(2);
    while (true) {
      io_.restart();
      io_.poll();
      log_.Commit();
      if (done()) return;
      if (clock_.Now() >= end) {
        ADD_FAILURE() << "not done within 2 h of fake time";
        return;
      }
      clock_.Advance(step);
    }
  }
  // Runs the event loop without moving the clock (the attempt runs up to its next wait).
  void Settle() {
    io_.restart();
    io_.poll();
  }

  // The one result journaled (the test fails when there is not exactly one).
  v1::EpisodeResult Journaled() {
    EXPECT_THAT(log_.journaled, SizeIs(1));
    return log_.journaled.empty() ? v1::EpisodeResult() : log_.journaled.back().first;
  }
  // The reward the verifier writes when `verify` runs.
  void VerifierWrites(const std::string& reward) {
    for (auto& [address, fake] : fakes_) {
      sandbox::FakeHost* h = fake.get();
      h->OnExec([h, reward](const std::string& sandbox, const v1::ExecRequest& r) {
        if (Program(r) == "verify") h->WriteSandboxFile(sandbox, "/logs/verifier/reward.txt", reward);
        sandbox::ExecOutcome out;
        out.exited = true;
        out.tail = Program(r) + " done";
        return out;
      });
    }
  }

  FakeClock clock_;
  FakeLog log_;
  EpisodeTable table_;
  PauseLedger pauses_;
  asio::io_context io_;
  std::map<std::string, std::shared_ptr<sandbox::FakeHost>> fakes_;
  std::unique_ptr<HostRegistry> hosts_;
  std::atomic<bool> polling_stopped_{false};
  std::shared_ptr<FakeProxy> proxy_ = std::make_shared<FakeProxy>("proxy-0", &clock_);
  ratelimiter::FakeLimiter limiter_;
  Occupancy occupancy_;
  int finished_ = 0;  // on_finished calls
  std::unique_ptr<EpisodeDriver> driver_;
};

}  // namespace driver_test
}  // namespace corral::scheduler
