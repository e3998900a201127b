#include "libs/http/url.h"

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
    auto value = eq == absl::string_view::npos ? absl::StatusOr<std::string>("") : PercentDecode(pair.substr(eq + 1), true);
    if (!value.ok()) return value.status();
    out.query[*std::move(key)] = *std::move(value);
  }
  return out;
}

std::string HttpUrl::authority() const { return JoinHostPort(host, port); }

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url, absl::string_view what) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", url, "' must start with http://"));
  }
  const size_t slash = rest.find('/');
  auto host_port = SplitHostPort(std::string(rest.substr(0, slash)));
  if (!host_port.ok() || host_port->first.empty() || host_port->second < 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", url, "' must be http://HOST:PORT[/path]"));
  }
  HttpUrl out;
  out.host = host_port->first;
  out.port = host_port->second;
  if (slash != absl::string_view::npos) out.path = std::string(rest.substr(slash));
  while (!out.path.empty() && out.path.back() == '/') out.path.pop_back();
  return out;
}

}  // namespace corral::http
