// The pieces of Fetch (fetch.h) its two units share: one HTTP/1.1 exchange over a connected stream, a template
// each unit instantiates for its own stream (fetch.cc plain TCP, fetch_tls.cc TLS), and the TLS half. Internal to
// libs/http.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "boost/asio/ssl/context.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "libs/async/use_tuple.h"
#include "libs/http/url.h"

namespace corral::http::fetch_internal {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
constexpr size_t kMaxErrorBody = 64 << 10;

// What one exchange needs besides its stream, and where its reply goes (FetchReply's parts).
struct Exchange {
  absl::Duration timeout;
  bhttp::request<bhttp::empty_body>* request;
  const std::function<absl::Status(absl::string_view)>* sink;
  uint64_t max_bytes;
  std::string what;     // "GET <url>", for messages
  std::string ca_hint;  // FetchOptions.ca_hint: added to a certificate the TLS half could not verify
  int* status;
  std::map<std::string, std::string>* headers;
  std::string* error_body;
};

// One HTTP/1.1 exchange over `stream` (plain or TLS, connected; `tcp` its lowest layer, for the timeouts). The
// body of a 2xx reply goes to the sink, any other reply's into the reply's error_body.
template <typename Stream>
asio::awaitable<absl::Status> Talk(Stream& stream, beast::tcp_stream& tcp, const Exchange& x) {
  using async::kUseTuple;
  const absl::Duration timeout = x.timeout;
  const std::string& what = x.what;
  std::string* error_body = x.error_body;
  tcp.expires_after(absl::ToChronoNanoseconds(timeout));
  auto [wec, wn] = co_await bhttp::async_write(stream, *x.request, kUseTuple);
  if (wec) co_return absl::UnavailableError(absl::StrCat(what, ": sending: ", wec.message()));
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(boost::none);
  tcp.expires_after(absl::ToChronoNanoseconds(timeout));
  auto [hec, hn] = co_await bhttp::async_read_header(stream, buffer, parser, kUseTuple);
  if (hec == beast::error::timeout) co_return absl::DeadlineExceededError(absl::StrCat(what, ": no answer in time"));
  if (hec) co_return absl::UnavailableError(absl::StrCat(what, ": reading: ", hec.message()));
  *x.status = static_cast<int>(parser.get().result_int());
  for (const auto& field : parser.get()) {
    (*x.headers)[absl::AsciiStrToLower(std::string(field.name_string()))] = std::string(field.value());
  }
  const bool ok = *x.status >= 200 && *x.status < 300;
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
    if (received > x.max_bytes)
      co_return absl::ResourceExhaustedError(absl::StrCat(what, ": over ", x.max_bytes, " bytes"));
    if (n == 0) continue;
    if (absl::Status s = (*x.sink)(absl::string_view(piece.data(), n)); !s.ok()) co_return s;
  }
  co_return absl::OkStatus();
}

// The TLS half (fetch_tls.cc): the handshake over `tcp` (connected), verifying `url.host`, then the exchange.
asio::awaitable<absl::Status> TalkTls(beast::tcp_stream tcp, asio::ssl::context& tls, const Url& url,
                                      const Exchange& x);

}  // namespace corral::http::fetch_internal
