// Wakes the dispatcher. Anything may ring it — a finished attempt, a host with room again, a new policy version,
// the tick — from any thread, cheaply: rings while one is on its way coalesce. The one waiter (the dispatcher,
// on the io_context) clears it, does its round, then waits for the next ring or a timeout. Thread-safe.
#pragma once

#include <atomic>

#include "absl/time/time.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/awaitable.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/use_awaitable.hpp"

namespace corral::scheduler {

class Doorbell {
 public:
  explicit Doorbell(boost::asio::io_context& io) : io_(io), timer_(io) {}

  void Ring() {
    if (rung_.exchange(true)) return;  // a wake-up is already on its way
    boost::asio::post(io_, [this] { timer_.cancel(); });
  }
  // Forgets the rings so far (the waiter is about to look at everything anyway).
  void Clear() { rung_ = false; }
  // Returns at once when rung since Clear(), else at the next ring or after `max`. On the io_context.
  boost::asio::awaitable<void> Wait(absl::Duration max) {
    if (rung_) co_return;
    timer_.expires_after(absl::ToChronoNanoseconds(max));
    (void)co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  }

 private:
  boost::asio::io_context& io_;
  boost::asio::steady_timer timer_;
  std::atomic<bool> rung_{false};
};

}  // namespace corral::scheduler
