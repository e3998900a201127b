// Fetch's TLS half (fetch_exchange.h): a unit of its own, as Beast's TLS stream makes the exchange's instantiation
// heavy.
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "boost/asio/ip/address.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/ssl.hpp"
#include "libs/http/fetch_exchange.h"

namespace corral::http::fetch_internal {

asio::awaitable<absl::Status> TalkTls(beast::tcp_stream tcp, asio::ssl::context& tls, const Url& url,
                                      const Exchange& x) {
  using async::kUseTuple;
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
  beast::get_lowest_layer(stream).expires_after(absl::ToChronoNanoseconds(x.timeout));
  auto [hec] = co_await stream.async_handshake(asio::ssl::stream_base::client, kUseTuple);
  if (hec) {
    const long verify = SSL_get_verify_result(ssl);
    co_return absl::UnavailableError(absl::StrCat(
        x.what, ": TLS handshake failed: ", hec.message(),
        verify != X509_V_OK
            ? absl::StrCat(" (", X509_verify_cert_error_string(verify), x.ca_hint.empty() ? "" : "; ", x.ca_hint, ")")
            : ""));
  }
  co_return co_await Talk(stream, beast::get_lowest_layer(stream), x);
}

}  // namespace corral::http::fetch_internal
