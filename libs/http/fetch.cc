#include "libs/http/fetch.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <exception>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/address.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "boost/beast/ssl.hpp"
#include "libs/async/use_tuple.h"

namespace corral::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using async::kUseTuple;
constexpr size_t kMaxErrorBody = 64 << 10;

// One HTTP/1.1 exchange over `stream` (plain or TLS, connected). The body of a 2xx reply goes to `sink`, any
// other reply's into `error_body`.
template <typename Stream>
asio::awaitable<absl::Status> Talk(Stream& stream, beast::tcp_stream& tcp, absl::Duration timeout,
                                   bhttp::request<bhttp::empty_body>& request, int* status,
                                   std::map<std::string, std::string>* headers,
                                   const std::function<absl::Status(absl::string_view)>& sink, uint64_t max_bytes,
                                   std::string* error_body, const std::string& what) {
  tcp.expires_after(absl::ToChronoNanoseconds(timeout));
  auto [wec, wn] = co_await bhttp::async_write(stream, request, kUseTuple);
  if (wec) co_return absl::UnavailableError(absl::StrCat(what, ": sending: ", wec.message()));
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(boost::none);
  tcp.expires_after(absl::ToChronoNanoseconds(timeout));
  auto [hec, hn] = co_await bhttp::async_read_header(stream, buffer, parser, kUseTuple);
  if (hec == beast::error::timeout) co_return absl::DeadlineExceededError(absl::StrCat(what, ": no answer in time"));
  if (hec) co_return absl::UnavailableError(absl::StrCat(what, ": reading: ", hec.message()));
  *status = static_cast<int>(parser.get().result_int());
  for (const auto& field : parser.get()) {
    (*headers)[absl::AsciiStrToLower(std::string(field.name_string()))] = std::string(field.value());
  }
  const bool ok = *status >= 200 && *status < 300;
  uint64_t received = 0;
  std::string piece(64 << 10, '\0');
  while (!parser.is_done()) {
    parser.get().body().data = piece.data();
    parser.get().body().size = piece.size();
    tcp.expires_after(absl::ToChronoNanoseconds(timeout));
    auto [rec, rn] = co_await bhttp::async_read_some(stream, buffer, parser, kUseTuple);
    if (rec == bhttp::error::need_buffer) rec = {};
    if (rec == beast::error::timeout) co_return absl::DeadlineExceededError(absl::StrCat(what, ": stalled"));
    if (rec) co_return absl::UnavailableError(absl::StrCat(what, ": the connection broke mid-body: ", rec.message()));
    const size_t n = piece.size() - parser.get().body().size;
    received += n;
    if (!ok) {
      error_body->append(piece.data(), std::min(n, kMaxErrorBody - std::min(kMaxErrorBody, error_body->size())));
      if (received > kMaxErrorBody) break;  // the error is what matters, not all of its page
      continue;
    }
    if (received > max_bytes)
      co_return absl::ResourceExhaustedError(absl::StrCat(what, ": over ", max_bytes, " bytes"));
    if (n == 0) continue;
    if (absl::Status s = sink(absl::string_view(piece.data(), n)); !s.ok()) co_return s;
  }
  co_return absl::OkStatus();
}

}  // namespace

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
    if (!url.tls) {
      result = co_await Talk(tcp, tcp, options.timeout, request, &reply.status, &reply.headers, sink, options.max_bytes,
                             &reply.error_body, what);
      co_return;
    }
    beast::ssl_stream<beast::tcp_stream> stream(std::move(tcp), tls);
    SSL* ssl = stream.native_handle();
    boost::system::error_code aec;
    asio::ip::make_address(url.host, aec);
    if (!aec) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), url.host.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl, url.host.c_str());
      SSL_set1_host(ssl, url.host.c_str());
    }
    beast::get_lowest_layer(stream).expires_after(absl::ToChronoNanoseconds(options.timeout));
    auto [hec] = co_await stream.async_handshake(asio::ssl::stream_base::client, kUseTuple);
    if (hec) {
      const long verify = SSL_get_verify_result(ssl);
      result = absl::UnavailableError(
          absl::StrCat(what, ": TLS handshake failed: ", hec.message(),
                       verify != X509_V_OK ? absl::StrCat(" (", X509_verify_cert_error_string(verify),
                                                          options.ca_hint.empty() ? "" : "; ", options.ca_hint, ")")
                                           : ""));
      co_return;
    }
    result = co_await Talk(stream, beast::get_lowest_layer(stream), options.timeout, request, &reply.status,
                           &reply.headers, sink, options.max_bytes, &reply.error_body, what);
  };
  asio::co_spawn(io, run(), [&](std::exception_ptr e) {
    if (e) result = absl::InternalError(absl::StrCat(what, ": unexpected failure"));
  });
  io.run();
  if (!result.ok()) return result;
  return reply;
}

}  // namespace corral::http
