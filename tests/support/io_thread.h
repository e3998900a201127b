// Runs coroutines to completion on a private I/O thread: for unit tests of coroutine code (HTTP handlers,
// clients). Declare it first in a fixture, so that it is destroyed last.
#pragma once

#include <thread>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"

namespace corral::testing {

// Runs coroutines on one I/O thread of its own; RunSync waits for each.
class IoThread {
 public:
  IoThread() : work_(context_.get_executor()), thread_([this] { context_.run(); }) {}
  ~IoThread() {
    work_.reset();
    context_.stop();
    thread_.join();
  }
  template <typename T>
  T RunSync(boost::asio::awaitable<T> coroutine) {
    return boost::asio::co_spawn(context_, std::move(coroutine), boost::asio::use_future).get();
  }
  void RunSync(boost::asio::awaitable<void> coroutine) {
    boost::asio::co_spawn(context_, std::move(coroutine), boost::asio::use_future).get();
  }
  boost::asio::io_context& context() { return context_; }

 private:
  boost::asio::io_context context_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
};

}  // namespace corral::testing
