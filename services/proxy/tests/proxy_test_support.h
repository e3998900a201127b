// Helpers for the proxy's unit tests: an upstream that is a real HTTP server on loopback answering as each test
// scripts it (and IoThread, from tests/support).
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
#include "tests/support/io_thread.h"

namespace corral::proxy::testing {

using corral::testing::IoThread;

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
