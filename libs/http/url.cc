#include "libs/http/url.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "libs/core/host_port.h"

namespace corral::http {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

absl::StatusOr<std::string> PercentDecode(absl::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      const int hi = i + 2 < s.size() ? HexValue(s[i + 1]) : -1;
      const int lo = i + 2 < s.size() ? HexValue(s[i + 2]) : -1;
      if (hi < 0 || lo < 0) return absl::InvalidArgumentError(absl::StrCat("malformed %-escape at offset ", i));
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (s[i] == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

absl::StatusOr<Target> ParseTarget(absl::string_view target) {
  if (target.empty() || target[0] != '/') return absl::InvalidArgumentError("the request target must start with '/'");
  const size_t hash = target.find('#');
  if (hash != absl::string_view::npos) target = target.substr(0, hash);
  const size_t q = target.find('?');
  Target out;
  auto path = PercentDecode(target.substr(0, q), /*plus_is_space=*/false);
  if (!path.ok()) return path.status();
  out.path = *std::move(path);
  if (q == absl::string_view::npos) return out;
  for (absl::string_view pair : absl::StrSplit(target.substr(q + 1), '&', absl::SkipEmpty())) {
    const size_t eq = pair.find('=');
    auto key = PercentDecode(pair.substr(0, eq), true);
    if (!key.ok()) return key.status();
    auto value =
        eq == absl::string_view::npos ? absl::StatusOr<std::string>("") : PercentDecode(pair.substr(eq + 1), true);
    if (!value.ok()) return value.status();
    out.query[*std::move(key)] = *std::move(value);
  }
  return out;
}

std::string HttpUrl::authority() const { return JoinHostPort(host, port); }

std::string Url::authority() const { return JoinHostPort(host, port); }

std::string Url::ToString() const { return absl::StrCat(tls ? "https://" : "http://", authority(), target); }

absl::StatusOr<Url> ParseUrl(absl::string_view text) {
  Url url;
  absl::string_view rest = text;
  if (absl::ConsumePrefix(&rest, "https://")) {
    url.tls = true;
  } else if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not an http(s) URL"));
  }
  const size_t path = rest.find_first_of("/?#");
  const std::string authority(rest.substr(0, path));
  absl::string_view target = path == absl::string_view::npos ? "" : rest.substr(path);
  target = target.substr(0, target.find('#'));  // a fragment is not sent
  url.target = absl::StartsWith(target, "/") ? std::string(target) : absl::StrCat("/", target);
  // host:port, [v6]:port, or a host alone (the scheme's port).
  // A port is named when a ':' follows the host (after the brackets of an IPv6 address).
  const size_t v6_end = authority.rfind(']');
  url.explicit_port = authority.find(':', v6_end == std::string::npos ? 0 : v6_end) != std::string::npos;
  auto split = SplitHostPort(url.explicit_port ? authority : absl::StrCat(authority, ":", url.tls ? 443 : 80));
  if (!split.ok() || split->first.empty() || split->second < 1) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' has no usable host and port"));
  }
  url.host = split->first;
  url.port = split->second;
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
