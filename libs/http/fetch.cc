#include "libs/http/fetch.h"

#include <algorithm>
#include <exception>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl/context.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "libs/async/use_tuple.h"
#include "libs/http/fetch_exchange.h"

namespace corral::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using async::kUseTuple;

absl::StatusOr<FetchReply> Fetch(const Url& url, const std::vector<std::pair<std::string, std::string>>& headers,
                                 const FetchOptions& options,
                                 const std::function<absl::Status(absl::string_view)>& sink) {
  const std::string what = absl::StrCat("GET ", url.ToString());
  asio::io_context io;
  asio::ssl::context tls(asio::ssl::context::tls_client);
  if (url.tls) {
    boost::system::error_code ec;
    tls.set_default_verify_paths(ec);
    if (!options.ca_file.empty()) {
      tls.load_verify_file(options.ca_file, ec);
      if (ec) return absl::FailedPreconditionError(absl::StrCat("CA file ", options.ca_file, ": ", ec.message()));
    }
    tls.set_verify_mode(asio::ssl::verify_peer);
  }
  bhttp::request<bhttp::empty_body> request(bhttp::verb::get, url.target, 11);
  const bool default_port = url.port == (url.tls ? 443 : 80);
  std::string authority = url.authority();
  if (default_port) authority.erase(authority.rfind(':'));  // "host", "[v6]"
  request.set(bhttp::field::host, authority);
  request.set(bhttp::field::user_agent, options.user_agent);
  for (const auto& [name, value] : headers) request.set(name, value);

  FetchReply reply;
  absl::Status result;
  auto run = [&]() -> asio::awaitable<void> {
    asio::ip::tcp::resolver resolver(io);
    auto [rec, endpoints] = co_await resolver.async_resolve(url.host, std::to_string(url.port), kUseTuple);
    if (rec) {
      result = absl::UnavailableError(absl::StrCat(what, ": cannot resolve ", url.host, ": ", rec.message()));
      co_return;
    }
    beast::tcp_stream tcp(io);
    tcp.expires_after(absl::ToChronoNanoseconds(options.timeout));
    auto [cec, connected] = co_await tcp.async_connect(endpoints, kUseTuple);
    if (cec) {
      result = absl::UnavailableError(absl::StrCat(what, ": cannot connect: ", cec.message()));
      co_return;
    }
    const fetch_internal::Exchange x{.timeout = options.timeout,
                                     .request = &request,
                                     .sink = &sink,
                                     .max_bytes = options.max_bytes,
                                     .what = what,
                                     .ca_hint = options.ca_hint,
                                     .status = &reply.status,
                                     .headers = &reply.headers,
                                     .error_body = &reply.error_body};
    if (!url.tls) {
      result = co_await fetch_internal::Talk(tcp, tcp, x);
      co_return;
    }
    result = co_await fetch_internal::TalkTls(std::move(tcp), tls, url, x);
  };
  asio::co_spawn(io, run(), [&](std::exception_ptr e) {
    if (e) result = absl::InternalError(absl::StrCat(what, ": unexpected failure"));
  });
  io.run();
  if (!result.ok()) return result;
  return reply;
}

}  // namespace corral::http
