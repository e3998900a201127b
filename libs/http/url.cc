#include "libs/http/url.h"

#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "boost/url/parse.hpp"
#include "boost/url/pct_string_view.hpp"
#include "boost/url/url_view.hpp"
#include "libs/core/host_port.h"

namespace corral::http {
namespace {

namespace urls = boost::urls;

std::string_view View(absl::string_view s) { return std::string_view(s.data(), s.size()); }
absl::string_view AbslView(urls::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

absl::StatusOr<std::string> PercentDecode(absl::string_view s, bool plus_is_space) {
  urls::result<urls::pct_string_view> pct = urls::make_pct_string_view(View(s));
  if (!pct) return absl::InvalidArgumentError(absl::StrCat("malformed %-escape in '", s, "'"));
  urls::encoding_opts options;
  options.space_as_plus = plus_is_space;
  return pct->decode(options);
}

absl::StatusOr<Target> ParseTarget(absl::string_view target) {
  target = target.substr(0, target.find('#'));  // a fragment is not the server's
  urls::result<urls::url_view> parsed = urls::parse_origin_form(View(target));
  if (!parsed) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request target '", target, "' is not /path[?query]: ", parsed.error().message()));
  }
  Target out;
  out.path = parsed->path();
  urls::encoding_opts options;
  options.space_as_plus = true;
  for (const urls::param& p : parsed->params(options)) {
    if (p.key.empty() && !p.has_value) continue;  // "a&&b"
    out.query[p.key] = p.value;
  }
  return out;
}

std::string HttpUrl::authority() const { return JoinHostPort(host, port); }

std::string Url::authority() const { return JoinHostPort(host, port); }

std::string Url::ToString() const { return absl::StrCat(tls ? "https://" : "http://", authority(), target); }

absl::StatusOr<Url> ParseUrl(absl::string_view text) {
  urls::result<urls::url_view> parsed = urls::parse_uri(View(text));
  if (!parsed || (parsed->scheme_id() != urls::scheme::http && parsed->scheme_id() != urls::scheme::https)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not an http(s) URL"));
  }
  Url url;
  url.tls = parsed->scheme_id() == urls::scheme::https;
  url.host = parsed->host_type() == urls::host_type::ipv6 ? parsed->host_ipv6_address().to_string()
                                                          : std::string(parsed->host_address());
  url.explicit_port = parsed->has_port();
  url.port = url.tls ? 443 : 80;
  // (Boost.URL's port_number() wraps a port past 65535: its digits are checked here.)
  if (url.explicit_port && !absl::SimpleAtoi(AbslView(parsed->port()), &url.port)) url.port = 0;
  if (url.host.empty() || url.port < 1 || url.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' has no usable host and port"));
  }
  // After an authority the path is empty or starts with '/' (RFC 3986 3.3; Boost 1.81 lets "http://a:8x/" through
  // as port 8 and path "x/").
  const absl::string_view path = AbslView(parsed->encoded_path());
  if (!path.empty() && path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' has no usable host and port"));
  }
  url.target = std::string(parsed->encoded_target());  // a fragment is not sent
  if (!absl::StartsWith(url.target, "/")) url.target.insert(url.target.begin(), '/');
  return url;
}

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url, absl::string_view what) {
  auto parsed = ParseUrl(url);
  if (!parsed.ok() || parsed->tls) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", url, "' must start with http://"));
  }
  if (!parsed->explicit_port || parsed->target.find_first_of("?#") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", url, "' must be http://HOST:PORT[/path]"));
  }
  HttpUrl out;
  out.host = parsed->host;
  out.port = parsed->port;
  out.path = parsed->target;
  while (!out.path.empty() && out.path.back() == '/') out.path.pop_back();
  return out;
}

}  // namespace corral::http
