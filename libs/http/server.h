// An HTTP/1.1 server on Boost.Beast + Asio with C++20 coroutines: keep-alive, strict framing (Beast's parser
// refuses conflicting Content-Length and chunked+Content-Length), limits on header size, body size, header read
// time and open connections (503 beyond), and responses that are either whole or streamed chunk by chunk with
// an explicit flush per chunk (Server-Sent Events are never buffered). One I/O thread per io_context, each
// connection served by one coroutine on one of them (round robin), so a connection never needs a strand or a
// hop between threads; handlers are coroutines too.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/http/message.hpp"
#include "boost/beast/http/string_body.hpp"

namespace corral::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using Request = beast::http::request<beast::http::string_body>;
using Fields = std::vector<std::pair<std::string, std::string>>;

struct ServerLimits {
  size_t max_header_bytes = 16 * 1024;
  size_t max_body_bytes = 16 * 1024 * 1024;
  absl::Duration header_timeout = absl::Seconds(10);  // to read a request's header (slowloris)
  absl::Duration body_timeout = absl::Seconds(60);    // to read its body
  absl::Duration idle_timeout = absl::Seconds(75);    // between keep-alive requests
  absl::Duration write_timeout = absl::Minutes(2);    // for one response write (a client that stops reading)
  int64_t max_connections = 10000;                    // beyond: 503 and close
};

// The response side of one request. A handler either calls Send once, or StartStream, then WriteChunk any number
// of times, then EndStream. Every call returns false once the client is gone (then stop writing).
class Responder {
 public:
  Responder(beast::tcp_stream& stream, unsigned version, bool keep_alive,
            absl::Duration write_timeout = absl::Minutes(2))
      : stream_(stream), version_(version), keep_alive_(keep_alive), write_timeout_(write_timeout) {}

  asio::awaitable<bool> Send(int status, absl::string_view content_type, std::string body, const Fields& headers = {});
  asio::awaitable<bool> StartStream(int status, absl::string_view content_type, const Fields& headers = {});
  // Written to the socket at once as one chunk (an empty `data` is skipped: it would end the stream).
  asio::awaitable<bool> WriteChunk(absl::string_view data);
  asio::awaitable<bool> EndStream();
  // Closes the connection at once (a stream ends without its terminating chunk): for fault injection.
  void Abort();

  bool started() const { return started_; }
  bool finished() const { return finished_; }
  bool client_gone() const { return gone_; }
  int status() const { return status_; }
  bool keep_alive() const { return keep_alive_ && !gone_; }

 private:
  // Every write must finish within the write timeout: a client that stops reading cannot hold a call forever.
  void ArmWrite() { stream_.expires_after(absl::ToChronoNanoseconds(write_timeout_)); }
  beast::tcp_stream& stream_;
  unsigned version_;
  bool keep_alive_;
  absl::Duration write_timeout_;
  bool started_ = false, finished_ = false, gone_ = false;
  bool raw_ = false;  // an HTTP/1.0 client: the stream is written unframed
  int status_ = 0;
};

// Handles one request. Must answer through the responder (a handler that returns without answering gets a 500).
using Handler = std::function<asio::awaitable<void>(Request& request, Responder& responder)>;

// Thread-safe. Runs its own io_context threads.
class HttpServer {
 public:
  HttpServer(ServerLimits limits, Handler handler, int threads = 2);
  ~HttpServer();  // Stop()

  // Binds "host:port" (port 0: the kernel chooses); returns the bound port. Starts serving.
  absl::StatusOr<uint16_t> Listen(const std::string& host_port);
  // Stops accepting, closes every connection, joins the threads.
  void Stop();

  // The first I/O context (for background coroutines such as health checks).
  asio::io_context& context() { return *contexts_.front(); }
  int64_t open_connections() const { return connections_.load(); }

 private:
  asio::awaitable<void> Accept(asio::ip::tcp::acceptor& acceptor);
  asio::awaitable<void> Serve(asio::ip::tcp::socket socket);

  const ServerLimits limits_;
  const Handler handler_;
  std::vector<std::unique_ptr<asio::io_context>> contexts_;  // one per thread
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::atomic<size_t> next_context_{0};
  std::vector<std::unique_ptr<asio::ip::tcp::acceptor>> acceptors_;
  std::vector<std::thread> threads_;
  std::atomic<int64_t> connections_{0};
  std::atomic<bool> stopped_{false};
};

}  // namespace corral::http
