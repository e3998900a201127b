// HTTP/1.1 client side on Boost.Beast for upstream calls: a connection that sends a request and then yields the
// response body piece by piece as it arrives (for relaying streams without buffering), and a small keep-alive
// pool of idle connections per upstream.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/awaitable.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/http/buffer_body.hpp"
#include "boost/beast/http/parser.hpp"
#include "libs/http/server.h"

namespace corral::http {

// One connection to host:port. Not thread-safe (one coroutine uses it at a time).
class ClientConnection {
 public:
  // UNAVAILABLE when the connection cannot be made within `timeout`.
  static asio::awaitable<absl::StatusOr<std::unique_ptr<ClientConnection>>> Connect(asio::any_io_executor executor,
                                                                                    std::string host, uint16_t port,
                                                                                    absl::Duration timeout);

  // Sends `request` and reads the response header within `timeout`. UNAVAILABLE when the connection fails before
  // any response byte (safe to retry elsewhere); DEADLINE_EXCEEDED when no header came in time.
  asio::awaitable<absl::Status> Send(Request& request, absl::Duration timeout);
  int status() const { return parser_ ? static_cast<int>(parser_->get().result_int()) : 0; }
  std::string header(absl::string_view name) const;

  // The next piece of the body as it arrives (waiting at most `timeout` for it); an empty string once the body
  // is complete (then done()). UNAVAILABLE if the upstream disconnects mid-body.
  asio::awaitable<absl::StatusOr<std::string>> ReadSome(absl::Duration timeout);
  // Reads the rest of the body (at most `limit` bytes).
  asio::awaitable<absl::StatusOr<std::string>> ReadAll(absl::Duration timeout, size_t limit = 64 << 20);
  bool done() const { return parser_ && parser_->is_done(); }
  // The response was read to its end and the upstream keeps the connection: it may serve another request.
  bool reusable() const { return done() && parser_->keep_alive() && !broken_; }
  // Moves the connection onto `executor` (a pooled connection is reused from another connection's strand: its
  // timer and handlers must run on the new owner's). False if the socket cannot be moved.
  bool Rebind(asio::any_io_executor executor);
  asio::any_io_executor executor() { return stream_->get_executor(); }
  // Ends the exchange now: the connection is closed (the server sees its client leave), a pending Send or read
  // completes with an error, and so does every later one. Call on the connection's executor.
  void Cancel() {
    broken_ = cancelled_ = true;
    stream_->close();
  }
  const std::string& key() const { return key_; }

 private:
  ClientConnection(beast::tcp_stream stream, std::string key) : key_(std::move(key)) {
    stream_.emplace(std::move(stream));
  }
  std::optional<beast::tcp_stream> stream_;
  std::string key_;
  beast::flat_buffer buffer_;
  std::optional<beast::http::response_parser<beast::http::buffer_body>> parser_;
  bool broken_ = false;
  bool cancelled_ = false;
};

// Idle keep-alive connections per "host:port". Thread-safe.
class ConnectionPool {
 public:
  explicit ConnectionPool(size_t max_idle_per_host = 256) : max_idle_(max_idle_per_host) {}
  // An idle connection to host:port if there is one (`reused` = true), else a new one.
  asio::awaitable<absl::StatusOr<std::unique_ptr<ClientConnection>>> Get(asio::any_io_executor executor,
                                                                         const std::string& host, uint16_t port,
                                                                         absl::Duration timeout, bool* reused);
  // Keeps the connection for reuse when reusable(); drops it otherwise.
  void Put(std::unique_ptr<ClientConnection> connection);
  // Closes every idle connection. Call before the io_contexts the connections belong to are destroyed.
  void Clear();

 private:
  const size_t max_idle_;
  absl::Mutex mu_;
  std::map<std::string, std::deque<std::unique_ptr<ClientConnection>>> idle_ ABSL_GUARDED_BY(mu_);
};

// A whole exchange (tests, health checks): status and body. UNAVAILABLE / DEADLINE_EXCEEDED as above.
struct FetchResult {
  int status = 0;
  std::string content_type;
  std::string body;
};
asio::awaitable<absl::StatusOr<FetchResult>> Fetch(asio::any_io_executor executor, const std::string& host,
                                                   uint16_t port, Request request, absl::Duration timeout);

}  // namespace corral::http
