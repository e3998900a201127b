// Helpers for the proxy's unit tests: an upstream that is a real HTTP server on loopback answering as each test
// scripts it (and IoThread, from tests/support).
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_future.hpp"
#include "libs/async/use_tuple.h"
#include "libs/http/server.h"
#include "libs/http/sse.h"
#include "tests/support/io_thread.h"

namespace corral::proxy::testing {

using corral::testing::IoThread;

// The `event:` types of an SSE stream, in order, as the proxy's own SSE parser reads them.
inline std::vector<std::string> EventTypes(const std::string& sse) {
  http::SseParser parser;
  std::vector<std::string> types;
  auto events = parser.Feed(sse);
  if (events.ok()) {
    for (const http::SseEvent& e : *events) types.push_back(e.event);
  }
  return types;
}

// Where a scripted backend hangs: the handler waits until its server stops at the end of the test (the wait is
// dropped with the server's I/O context), not for a number of seconds that a slow machine might reach.
inline boost::asio::awaitable<void> HangUntilTheServerStops() {
  boost::asio::steady_timer never(co_await boost::asio::this_coro::executor,
                                  boost::asio::steady_timer::time_point::max());
  co_await never.async_wait(async::kUseTuple);
}

// A real HTTP server on 127.0.0.1 answering with `handler`.
class ScriptedUpstream {
 public:
  explicit ScriptedUpstream(http::Handler handler) : server_(http::ServerLimits{}, std::move(handler), 1) {
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
