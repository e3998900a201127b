// What the sandbox API's core tests share: a stream sink that records what is flushed, and a fixture with an
// in-memory scheduler (leases) and host on a FakeClock, its coroutines polled on the test's own thread.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"
#include "gtest/gtest.h"
#include "libs/async/testing/poll_await.h"
#include "libs/core/testing/fake_clock.h"
#include "services/sandbox_api/e2b/envd.h"
#include "services/sandbox_api/testing/fake_leases.h"

namespace corral::sandbox_api::testing_support {

// A stream's events (JSON text) in the order they were flushed; `gone` makes every flush fail (the reader left).
class RecordedStream final : public EnvdStream {
 public:
  void SendJson(std::string json) override { pending_.push_back(std::move(json)); }
  boost::asio::awaitable<bool> Flush() override {
    for (std::string& e : pending_) events.push_back(std::move(e));
    pending_.clear();
    ++flushes;
    co_return !gone;
  }
  std::vector<std::string> events;
  int flushes = 0;
  bool gone = false;

 private:
  std::vector<std::string> pending_;
};

class PolledSandboxTest : public ::testing::Test {
 protected:
  // Runs `aw` to its end, the clock's due timers run between polls.
  template <typename T>
  T Run(boost::asio::awaitable<T> aw) {
    return async::PollAwait(io_, std::move(aw), [this] { clock_.RunDue(); });
  }
  // Starts a stream in the background; Poll() moves it on.
  std::future<absl::Status> Spawn(boost::asio::awaitable<absl::Status> aw) {
    return boost::asio::co_spawn(io_, std::move(aw), boost::asio::use_future);
  }
  void Poll() {
    async::PollIdle(io_, [this] { clock_.RunDue(); });
  }
  static bool Done(const std::future<absl::Status>& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
  // A sandbox leased by `owner`.
  absl::StatusOr<v1::SandboxLease> LeaseOne(const std::string& owner = "alice") {
    v1::LeaseSandboxRequest request;
    request.set_owner(owner);
    return Run(leases_.Lease(request, clock_.Now() + absl::Minutes(1)));
  }

  boost::asio::io_context io_;
  FakeClock clock_;
  std::shared_ptr<sandbox::FakeHost> host_ = std::make_shared<sandbox::FakeHost>("host-a:1", &clock_);
  FakeLeases leases_{host_};
};

}  // namespace corral::sandbox_api::testing_support
