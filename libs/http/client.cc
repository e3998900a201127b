#include "libs/http/client.h"

#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/write.hpp"
#include "libs/async/use_tuple.h"

namespace corral::http {
namespace {

namespace bhttp = beast::http;
using async::kUseTuple;
constexpr size_t kPiece = 16 * 1024;

}  // namespace

asio::awaitable<absl::StatusOr<std::unique_ptr<ClientConnection>>> ClientConnection::Connect(
    asio::any_io_executor executor, std::string host, uint16_t port, absl::Duration timeout) {
  beast::error_code ec;
  std::vector<asio::ip::tcp::endpoint> endpoints;
  auto address = asio::ip::make_address(host, ec);
  if (!ec) {
    endpoints.emplace_back(address, port);
  } else {
    // A name (a compose service, a Kubernetes Service): resolved at every connect, so a moved backend is found.
    asio::ip::tcp::resolver resolver(executor);
    auto [rec, results] = co_await resolver.async_resolve(host, std::to_string(port), kUseTuple);
    if (rec || results.empty()) {
      co_return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", rec ? rec.message() : "no address"));
    }
    for (const auto& entry : results) endpoints.push_back(entry.endpoint());
  }
  beast::tcp_stream stream(executor);
  stream.expires_after(absl::ToChronoNanoseconds(timeout));
  auto [cec, connected] = co_await stream.async_connect(endpoints, kUseTuple);
  if (cec) co_return absl::UnavailableError(absl::StrCat("cannot connect to ", host, ":", port, ": ", cec.message()));
  beast::error_code nodelay_ec;
  stream.socket().set_option(asio::ip::tcp::no_delay(true), nodelay_ec);
  co_return std::unique_ptr<ClientConnection>(new ClientConnection(std::move(stream), absl::StrCat(host, ":", port)));
}

asio::awaitable<absl::Status> ClientConnection::Send(Request& request, absl::Duration timeout) {
  if (cancelled_) co_return absl::CancelledError(absl::StrCat(key_, ": the exchange was cancelled"));
  parser_.emplace();
  parser_->body_limit(boost::none);  // the body is relayed piece by piece, never held whole here
  stream_->expires_after(absl::ToChronoNanoseconds(timeout));
  request.prepare_payload();
  auto [wec, wn] = co_await bhttp::async_write(*stream_, request, kUseTuple);
  if (wec) {
    broken_ = true;
    co_return absl::UnavailableError(absl::StrCat("sending to ", key_, ": ", wec.message()));
  }
  auto [rec, rn] = co_await bhttp::async_read_header(*stream_, buffer_, *parser_, kUseTuple);
  if (rec) {
    broken_ = true;
    if (rec == beast::error::timeout)
      co_return absl::DeadlineExceededError(absl::StrCat(key_, " sent no response in time"));
    co_return absl::UnavailableError(absl::StrCat("reading from ", key_, ": ", rec.message()));
  }
  co_return absl::OkStatus();
}

std::string ClientConnection::header(absl::string_view name) const {
  if (!parser_) return "";
  auto it = parser_->get().find(beast::string_view(name.data(), name.size()));
  return it == parser_->get().end() ? "" : std::string(it->value());
}

asio::awaitable<absl::StatusOr<std::string>> ClientConnection::ReadSome(absl::Duration timeout) {
  if (cancelled_) co_return absl::CancelledError(absl::StrCat(key_, ": the exchange was cancelled"));
  if (!parser_) co_return absl::FailedPreconditionError("no request sent");
  if (parser_->is_done()) co_return std::string();
  std::string piece(kPiece, '\0');
  parser_->get().body().data = piece.data();
  parser_->get().body().size = piece.size();
  stream_->expires_after(absl::ToChronoNanoseconds(timeout));
  auto [ec, n] = co_await bhttp::async_read_some(*stream_, buffer_, *parser_, kUseTuple);
  if (ec == bhttp::error::need_buffer) ec = {};
  if (ec) {
    broken_ = true;
    if (ec == beast::error::timeout) co_return absl::DeadlineExceededError(absl::StrCat(key_, " stalled"));
    co_return absl::UnavailableError(absl::StrCat(key_, " disconnected mid-response: ", ec.message()));
  }
  piece.resize(kPiece - parser_->get().body().size);
  if (piece.empty() && !parser_->is_done()) {
    co_return co_await ReadSome(timeout);  // header bytes or chunk framing only: wait for data
  }
  co_return piece;
}

asio::awaitable<absl::StatusOr<std::string>> ClientConnection::ReadAll(absl::Duration timeout, size_t limit) {
  std::string body;
  while (!done()) {
    absl::StatusOr<std::string> piece = co_await ReadSome(timeout);
    if (!piece.ok()) co_return piece.status();
    body += *piece;
    if (body.size() > limit)
      co_return absl::ResourceExhaustedError(absl::StrCat(key_, " sent a body over ", limit, " bytes"));
  }
  co_return body;
}

bool ClientConnection::Rebind(asio::any_io_executor executor) {
  beast::error_code ec;
  asio::ip::tcp::socket& old = stream_->socket();
  const auto protocol = old.local_endpoint(ec).protocol();
  if (ec) return false;
  const auto fd = old.release(ec);
  if (ec) return false;
  asio::ip::tcp::socket moved(executor);
  moved.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    return false;
  }
  stream_.emplace(std::move(moved));
  return true;
}

asio::awaitable<absl::StatusOr<std::unique_ptr<ClientConnection>>> ConnectionPool::Get(
    asio::any_io_executor executor, const std::string& host, uint16_t port, absl::Duration timeout, bool* reused) {
  const std::string key = absl::StrCat(host, ":", port);
  {
    absl::MutexLock lock(&mu_);
    auto it = idle_.find(key);
    if (it != idle_.end()) {
      auto& idle = it->second;
      // Prefer a connection already on the caller's I/O context; moving one costs epoll and fcntl calls.
      for (auto c = idle.rbegin(); c != idle.rend(); ++c) {
        if ((*c)->executor() == executor) {
          std::unique_ptr<ClientConnection> found = std::move(*c);
          idle.erase(std::next(c).base());
          *reused = true;
          co_return found;
        }
      }
      while (!idle.empty()) {
        std::unique_ptr<ClientConnection> c = std::move(idle.back());
        idle.pop_back();
        if (!c->Rebind(executor)) continue;
        *reused = true;
        co_return c;
      }
    }
  }
  *reused = false;
  co_return co_await ClientConnection::Connect(executor, host, port, timeout);
}

void ConnectionPool::Put(std::unique_ptr<ClientConnection> connection) {
  if (connection == nullptr || !connection->reusable()) return;
  absl::MutexLock lock(&mu_);
  auto& idle = idle_[connection->key()];
  if (idle.size() < max_idle_) idle.push_back(std::move(connection));
}

void ConnectionPool::Clear() {
  absl::MutexLock lock(&mu_);
  idle_.clear();
}

asio::awaitable<absl::StatusOr<FetchResult>> Fetch(asio::any_io_executor executor, const std::string& host,
                                                   uint16_t port, Request request, absl::Duration timeout) {
  auto connection = co_await ClientConnection::Connect(executor, host, port, timeout);
  if (!connection.ok()) co_return connection.status();
  request.set(bhttp::field::host, absl::StrCat(host, ":", port));
  if (absl::Status s = co_await (*connection)->Send(request, timeout); !s.ok()) co_return s;
  auto body = co_await (*connection)->ReadAll(timeout);
  if (!body.ok()) co_return body.status();
  co_return FetchResult{(*connection)->status(), (*connection)->header("Content-Type"), *std::move(body)};
}

}  // namespace corral::http
