// Runs a coroutine to its end on a test's own io_context, polled on the test's thread (no I/O thread): the
// scheduler's unit tests drive their fakes and FakeClock this way, deterministically.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <utility>

#include "boost/asio/awaitable.hpp"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"

namespace corral::scheduler::testing_support {

// Polls `io` until `aw` ends and returns its result; `each_round` (e.g. FakeClock::RunDue) runs after every poll.
template <typename T>
T PollAwait(boost::asio::io_context& io, boost::asio::awaitable<T> aw, const std::function<void()>& each_round = {}) {
  std::future<T> done = boost::asio::co_spawn(io, std::move(aw), boost::asio::use_future);
  while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    io.restart();
    io.poll();
    if (each_round) each_round();
  }
  return done.get();
}

}  // namespace corral::scheduler::testing_support
