// Runs a coroutine to its end on a test's own io_context, polled on the test's thread (no I/O thread): unit tests
// drive their fakes and FakeClock this way, deterministically — no real-time wait, no sleep.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <utility>

#include "boost/asio/awaitable.hpp"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"

namespace corral::async {

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

// Runs whatever `io` has ready — work a finished coroutine left in the background — until nothing is.
inline void PollIdle(boost::asio::io_context& io, const std::function<void()>& each_round = {}) {
  do {
    io.restart();
    if (each_round) each_round();
  } while (io.poll() > 0);
}

}  // namespace corral::async
