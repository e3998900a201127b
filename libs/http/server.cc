#include "libs/http/server.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/chunk_encode.hpp"
#include "boost/beast/http/empty_body.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/serializer.hpp"
#include "boost/beast/http/write.hpp"
#include "boost/json/serialize.hpp"
#include "boost/json/value.hpp"
#include "libs/async/spawn.h"
#include "libs/async/use_tuple.h"
#include "libs/core/host_port.h"
#include "libs/http/openai_json.h"

namespace corral::http {
namespace {

namespace bhttp = beast::http;
using async::kUseTuple;

std::chrono::steady_clock::duration Chrono(absl::Duration d) { return absl::ToChronoNanoseconds(d); }

const char* ReasonFor(beast::error_code ec) {
  if (ec == bhttp::error::header_limit) return "request header too large";
  if (ec == bhttp::error::body_limit) return "request body too large";
  return "malformed HTTP request";
}

int StatusFor(beast::error_code ec) {
  if (ec == bhttp::error::header_limit) return 431;
  if (ec == bhttp::error::body_limit) return 413;
  return 400;
}

}  // namespace

// ------------------------------------------------------------------------------------------------ Responder

namespace {

// A client refused for its body's size is usually still sending it; closing on unread bytes resets the connection
// and it would see the reset, not the answer. So the rest is read and dropped (the header timeout and 1 GiB at
// most), as nginx's lingering close does, once the answer is out and our side is shut.
asio::awaitable<void> Linger(beast::tcp_stream& stream) {
  beast::error_code ec;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  std::array<char, 64 * 1024> sink;
  for (uint64_t drained = 0; drained < (uint64_t{1} << 30);) {
    auto [read_ec, n] = co_await stream.async_read_some(asio::buffer(sink), kUseTuple);
    if (read_ec) break;
    drained += n;
  }
}

}  // namespace

asio::awaitable<bool> Responder::Send(int status, absl::string_view content_type, std::string body,
                                      const Fields& headers) {
  if (started_ || gone_) co_return false;
  started_ = finished_ = true;
  status_ = status;
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), version_};
  res.set(bhttp::field::server, "corral");
  res.set(bhttp::field::content_type, std::string(content_type));
  for (const auto& [k, v] : headers) res.set(k, v);
  res.keep_alive(keep_alive_);
  res.body() = std::move(body);
  res.prepare_payload();
  ArmWrite();
  auto [ec, n] = co_await bhttp::async_write(stream_, res, kUseTuple);
  stream_.expires_never();
  if (ec) gone_ = true;
  co_return !gone_;
}

asio::awaitable<bool> Responder::StartStream(int status, absl::string_view content_type, const Fields& headers) {
  if (started_ || gone_) co_return false;
  started_ = true;
  status_ = status;
  bhttp::response<bhttp::empty_body> res{static_cast<bhttp::status>(status), version_};
  res.set(bhttp::field::server, "corral");
  res.set(bhttp::field::content_type, std::string(content_type));
  res.set(bhttp::field::cache_control, "no-cache");
  res.set("X-Accel-Buffering", "no");  // tell any proxy in front not to buffer either
  for (const auto& [k, v] : headers) res.set(k, v);
  if (version_ < 11) {
    keep_alive_ = false;  // HTTP/1.0 has no chunked encoding: the body ends when the connection closes
    raw_ = true;
  }
  res.keep_alive(keep_alive_);
  res.chunked(!raw_);
  bhttp::response_serializer<bhttp::empty_body> sr{res};
  ArmWrite();
  auto [ec, n] = co_await bhttp::async_write_header(stream_, sr, kUseTuple);
  stream_.expires_never();
  if (ec) gone_ = true;
  co_return !gone_;
}

asio::awaitable<bool> Responder::WriteChunk(absl::string_view data) {
  if (!started_ || finished_ || gone_) co_return false;
  if (data.empty()) co_return true;
  // Straight to the socket: one write per chunk, nothing held back.
  ArmWrite();
  beast::error_code ec;
  if (raw_) {
    std::tie(ec, std::ignore) = co_await asio::async_write(stream_, asio::buffer(data.data(), data.size()), kUseTuple);
  } else {
    std::tie(ec, std::ignore) =
        co_await asio::async_write(stream_, bhttp::make_chunk(asio::buffer(data.data(), data.size())), kUseTuple);
  }
  stream_.expires_never();
  if (ec) gone_ = true;
  co_return !gone_;
}

asio::awaitable<bool> Responder::EndStream() {
  if (!started_ || finished_ || gone_) co_return false;
  finished_ = true;
  if (raw_) co_return true;  // HTTP/1.0: closing the connection ends the body
  ArmWrite();
  auto [ec, n] = co_await asio::async_write(stream_, bhttp::make_chunk_last(), kUseTuple);
  stream_.expires_never();
  if (ec) gone_ = true;
  co_return !gone_;
}

void Responder::Abort() {
  beast::error_code ignored;
  stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
  gone_ = true;
}

// ----------------------------------------------------------------------------------------------- HttpServer

HttpServer::HttpServer(ServerLimits limits, Handler handler, int threads)
    : limits_(limits), handler_(std::move(handler)) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    contexts_.push_back(std::make_unique<asio::io_context>(1));
    work_.push_back(asio::make_work_guard(*contexts_.back()));
  }
}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<uint16_t> HttpServer::Listen(const std::string& host_port) {
  auto split = SplitHostPort(host_port);
  if (!split.ok()) return split.status();
  const auto& [host, port] = *split;
  beast::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("'", host, "' is not an IP address"));
  auto acceptor = std::make_unique<asio::ip::tcp::acceptor>(*contexts_.front());
  asio::ip::tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot listen on ", host_port, ": ", ec.message()));
  const uint16_t bound = acceptor->local_endpoint().port();
  async::Spawn(*contexts_.front(), Accept(*acceptor), "accepting HTTP connections");
  acceptors_.push_back(std::move(acceptor));
  if (threads_.empty()) {
    for (auto& ioc : contexts_) threads_.emplace_back([ctx = ioc.get()] { ctx->run(); });
  }
  return bound;
}

void HttpServer::Stop() {
  if (stopped_.exchange(true)) return;
  asio::post(*contexts_.front(), [this] {
    for (auto& a : acceptors_) {
      beast::error_code ec;
      a->close(ec);
    }
  });
  work_.clear();
  for (auto& ioc : contexts_) ioc->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  // The close posted above may not have run before its context stopped; with the threads gone, nothing else
  // touches the acceptors: close them here, so the port refuses connections from now on.
  for (auto& a : acceptors_) {
    beast::error_code ec;
    a->close(ec);
  }
}

asio::awaitable<void> HttpServer::Accept(asio::ip::tcp::acceptor& acceptor) {
  while (true) {
    // Each connection lives on one I/O thread's context (round robin): its coroutine never runs on two threads.
    asio::io_context& home = *contexts_[next_context_++ % contexts_.size()];
    auto [ec, socket] = co_await acceptor.async_accept(home.get_executor(), kUseTuple);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // e.g. EMFILE: the listening socket stays readable, so pause instead of spinning, and keep serving the
      // connections there are.
      asio::steady_timer pause(acceptor.get_executor());
      pause.expires_after(std::chrono::milliseconds(50));
      co_await pause.async_wait(kUseTuple);
      continue;
    }
    async::Spawn(socket.get_executor(), Serve(std::move(socket)), "an HTTP connection");
  }
}

asio::awaitable<void> HttpServer::Serve(asio::ip::tcp::socket socket) {
  struct Count {
    std::atomic<int64_t>& n;
    ~Count() { --n; }
  } count{connections_};
  const bool over = ++connections_ > limits_.max_connections;
  beast::tcp_stream stream(std::move(socket));
  beast::error_code nodelay_ec;
  stream.socket().set_option(asio::ip::tcp::no_delay(true), nodelay_ec);
  beast::flat_buffer buffer;
  if (over) {
    // Read the request's header first (briefly): closing with unread bytes would reset the connection and the
    // client would see that instead of the 503.
    bhttp::request_parser<bhttp::empty_body> head;
    head.header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
    stream.expires_after(std::chrono::seconds(1));
    (void)co_await bhttp::async_read_header(stream, buffer, head, kUseTuple);
    Responder busy(stream, 11, false, limits_.header_timeout);
    co_await busy.Send(503, "application/json", ErrorJson("too many open connections", "server_overloaded"));
    beast::error_code ignored;
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    co_return;
  }
  bool first = true;
  while (true) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
    parser.body_limit(limits_.max_body_bytes);
    // The whole header must arrive in time (slowloris); an idle keep-alive connection gets longer.
    stream.expires_after(Chrono(first ? limits_.header_timeout : limits_.idle_timeout));
    auto [ec, n] = co_await bhttp::async_read_header(stream, buffer, parser, kUseTuple);
    if (!ec && !first) {
      stream.expires_after(Chrono(limits_.header_timeout));  // (a keep-alive request's header has arrived)
    }
    if (!ec && !parser.is_done()) {
      stream.expires_after(Chrono(limits_.body_timeout));
      std::tie(ec, n) = co_await bhttp::async_read(stream, buffer, parser, kUseTuple);
    }
    first = false;
    if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted) {
      break;
    }
    if (ec) {
      // Bad framing, oversize header or body: answer precisely, then close (the stream may be out of sync).
      Responder bad(stream, 11, false, limits_.header_timeout);
      stream.expires_after(Chrono(limits_.header_timeout));
      co_await bad.Send(StatusFor(ec), "application/json", ErrorJson(ReasonFor(ec), "invalid_request_error"));
      if (ec == bhttp::error::body_limit) co_await Linger(stream);
      break;
    }
    Request request = parser.release();
    stream.expires_never();  // a handler may stream for as long as the upstream does
    Responder responder(stream, request.version(), request.keep_alive(), limits_.write_timeout);
    co_await handler_(request, responder);
    if (!responder.started()) {
      co_await responder.Send(500, "application/json", ErrorJson("the handler did not answer", "server_error"));
    } else if (!responder.finished() && !responder.client_gone()) {
      co_await responder.EndStream();
    }
    if (!responder.keep_alive()) break;
  }
  beast::error_code ignored;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
}

}  // namespace corral::http
