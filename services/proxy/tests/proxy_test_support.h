// Helpers for the proxy's unit tests: coroutines run to completion on a private I/O thread, and an upstream
// that is a real HTTP server on loopback answering as each test scripts it.
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"
#include "libs/http/server.h"

namespace corral::proxy::testing {

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

// A real HTTP server on 127.0.0.1 answering with `handler`.
class ScriptedUpstream {
 public:
  explicit ScriptedUpstream(http::Handler handler)
      : server_(http::ServerLimits{}, std::move(handler), 1) {
    auto port = server_.Listen("127.0.0.1:0");
    port_ = port.ok() ? *port : 0;
  }
  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  http::HttpServer server_;
  uint16_t port_ = 0;
};

}  // namespace corral::proxy::testing
