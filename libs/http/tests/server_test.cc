// The HTTP server against raw sockets (framing attacks, slowloris, limits) and the client library (streams
// arrive piece by piece while the handler is still producing them).
#include "libs/http/server.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/synchronization/notification.h"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/asio/use_future.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/core/unique_fd.h"
#include "libs/http/client.h"
#include "tests/support/subprocess.h"

namespace corral::http {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends `data` on a fresh connection and returns everything the server writes until it closes (or `wait`).
// A TCP connection to 127.0.0.1:`port`; an invalid fd when it cannot connect.
UniqueFd ConnectLoopback(uint16_t port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return UniqueFd();
  return fd;
}

std::string RawExchange(uint16_t port, const std::string& data, absl::Duration wait = absl::Seconds(5)) {
  UniqueFd fd = ConnectLoopback(port);
  if (!fd.valid()) return "<connect failed>";
  if (!data.empty() && write(fd.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size())) return "<write>";
  std::string out;
  const absl::Time deadline = absl::Now() + wait;
  while (absl::Now() < deadline) {
    pollfd p{fd.get(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()))) <= 0) break;
    char buf[4096];
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(ServerLimits limits = {}) {
    server_ = std::make_unique<HttpServer>(limits, [this](Request& req, Responder& res) { return Handle(req, res); });
    auto port = server_->Listen("127.0.0.1:0");
    ASSERT_THAT(port, IsOk());
    port_ = *port;
  }

  asio::awaitable<void> Handle(Request& req, Responder& res) {
    if (req.target() == "/stream") {
      co_await res.StartStream(200, "text/event-stream");
      co_await res.WriteChunk("data: first\n\n");
      // Hold the stream until the client has seen the first event: proves nothing is buffered.
      asio::steady_timer timer(co_await asio::this_coro::executor);
      while (!first_seen_.HasBeenNotified()) {
        timer.expires_after(std::chrono::milliseconds(5));
        co_await timer.async_wait(asio::use_awaitable);
      }
      co_await res.WriteChunk("data: second\n\n");
      co_await res.EndStream();
      co_return;
    }
    co_await res.Send(200, "text/plain", "echo:" + req.body());
  }

  std::unique_ptr<HttpServer> server_;
  uint16_t port_ = 0;
  absl::Notification first_seen_;
};

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  Start();
  std::string out = RawExchange(port_,
                                "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"
                                "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nyou",
                                absl::Seconds(5));
  EXPECT_THAT(out, HasSubstr("echo:hi"));
  EXPECT_THAT(out, HasSubstr("echo:you"));
}

TEST_F(HttpServerTest, AfterStopThePortRefusesConnections) {
  Start();
  server_->Stop();
  EXPECT_EQ(RawExchange(port_, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", absl::Seconds(2)), "<connect failed>");
}

TEST_F(HttpServerTest, SmugglingAndOversizeRequestsGetPreciseErrors) {
  ServerLimits limits;
  limits.max_header_bytes = 1024;
  limits.max_body_bytes = 100;
  Start(limits);
  // Content-Length together with chunked, and two different Content-Lengths: refused, never guessed.
  EXPECT_THAT(RawExchange(port_,
                          "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(RawExchange(port_, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde"),
              StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(RawExchange(port_, "POST /a HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n"),
              StartsWith("HTTP/1.1 431"));
  EXPECT_THAT(RawExchange(port_, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n" + std::string(101, 'b')),
              StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(RawExchange(port_, "NOT HTTP AT ALL\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  // The server is still healthy afterwards.
  EXPECT_THAT(RawExchange(port_, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), HasSubstr("echo:"));
}

TEST_F(HttpServerTest, AClientStillSendingAnOversizeBodyReadsThe413NotAReset) {
  ServerLimits limits;
  limits.max_body_bytes = 1024;
  Start(limits);
  UniqueFd fd = ConnectLoopback(port_);
  ASSERT_TRUE(fd.valid());
  // Far more than the socket buffers hold: the whole body is only sent if the server keeps reading it.
  const size_t body = 32 << 20;
  std::string data = absl::StrCat("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: ", body, "\r\n\r\n");
  data.append(body, 'x');
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = send(fd.get(), data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  EXPECT_EQ(sent, data.size()) << "the server closed on unread bytes: " << strerror(errno);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd.get(), buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  EXPECT_THAT(out, StartsWith("HTTP/1.1 413"));
}

TEST_F(HttpServerTest, ASlowHeaderIsCutOffAtTheHeaderTimeout) {
  ServerLimits limits;
  limits.header_timeout = absl::Milliseconds(300);
  Start(limits);
  const absl::Time start = absl::Now();
  std::string out = RawExchange(port_, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ", absl::Seconds(10));
  EXPECT_EQ(out, "");  // closed without an answer
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(HttpServerTest, ConnectionsBeyondTheLimitGet503) {
  ServerLimits limits;
  limits.max_connections = 1;
  Start(limits);
  UniqueFd held = ConnectLoopback(port_);
  ASSERT_TRUE(held.valid());
  // An answer on the held connection proves the server counts it (and keeps it: keep-alive).
  const std::string request = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi";
  ASSERT_EQ(write(held.get(), request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string answer;
  while (answer.find("echo:hi") == std::string::npos) {
    pollfd p{held.get(), POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 5000), 1) << "no answer on the held connection: " << answer;
    char buf[4096];
    const ssize_t n = read(held.get(), buf, sizeof(buf));
    ASSERT_GT(n, 0) << answer;
    answer.append(buf, static_cast<size_t>(n));
  }
  EXPECT_EQ(server_->open_connections(), 1);
  EXPECT_THAT(RawExchange(port_, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"), StartsWith("HTTP/1.1 503"));
}

TEST_F(HttpServerTest, StreamedChunksReachTheClientWhileTheHandlerStillHolds) {
  Start();
  asio::io_context client_ioc;
  auto done = asio::co_spawn(
      client_ioc,
      [&]() -> asio::awaitable<std::vector<std::string>> {
        auto c = co_await ClientConnection::Connect(co_await asio::this_coro::executor, "127.0.0.1", port_,
                                                    absl::Seconds(5));
        std::vector<std::string> pieces;
        if (!c.ok()) co_return pieces;
        Request req{beast::http::verb::get, "/stream", 11};
        req.set(beast::http::field::host, "x");
        if (!(co_await (*c)->Send(req, absl::Seconds(5))).ok()) co_return pieces;
        while (true) {
          auto piece = co_await (*c)->ReadSome(absl::Seconds(5));
          if (!piece.ok() || piece->empty()) break;
          pieces.push_back(*piece);
          if (piece->find("first") != std::string::npos) first_seen_.Notify();
        }
        co_return pieces;
      },
      asio::use_future);
  client_ioc.run();
  std::vector<std::string> pieces = done.get();
  ASSERT_GE(pieces.size(), 2u);
  EXPECT_EQ(pieces.front(), "data: first\n\n");
  EXPECT_EQ(pieces.back(), "data: second\n\n");
}

// Upstreams in compose and Kubernetes are names (a service, a Service's DNS name), not addresses.
TEST_F(HttpServerTest, TheClientConnectsByNameAndSaysWhenANameDoesNotResolve) {
  Start();
  asio::io_context client_ioc;
  auto done = asio::co_spawn(
      client_ioc,
      [&]() -> asio::awaitable<std::pair<std::string, absl::Status>> {
        auto executor = co_await asio::this_coro::executor;
        auto unknown = co_await ClientConnection::Connect(executor, "no-such-host.invalid", port_, absl::Seconds(5));
        std::string body;
        auto c = co_await ClientConnection::Connect(executor, "localhost", port_, absl::Seconds(5));
        if (!c.ok())
          co_return std::make_pair(std::string("<connect: ") + std::string(c.status().message()), unknown.status());
        Request req{beast::http::verb::get, "/", 11};
        req.set(beast::http::field::host, "x");
        if (!(co_await (*c)->Send(req, absl::Seconds(5))).ok()) co_return std::make_pair(body, unknown.status());
        while (true) {
          auto piece = co_await (*c)->ReadSome(absl::Seconds(5));
          if (!piece.ok() || piece->empty()) break;
          body += *piece;
        }
        co_return std::make_pair(body, unknown.status());
      },
      asio::use_future);
  client_ioc.run();
  auto [body, unknown] = done.get();
  EXPECT_THAT(body, HasSubstr("echo:"));
  EXPECT_THAT(unknown, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("cannot resolve no-such-host.invalid"));
}

}  // namespace
}  // namespace corral::http
