#include "libs/http/prometheus_text.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace corral::http {
namespace {

bool IsNameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
}

absl::StatusOr<double> ParseValue(absl::string_view text) {
  if (text == "+Inf") return std::numeric_limits<double>::infinity();
  if (text == "-Inf") return -std::numeric_limits<double>::infinity();
  if (absl::EqualsIgnoreCase(text, "nan")) return std::numeric_limits<double>::quiet_NaN();
  double v = 0;
  if (!absl::SimpleAtod(text, &v)) return absl::InvalidArgumentError(absl::StrCat("bad value '", text, "'"));
  return v;
}

// The family a sample belongs to: itself, or its name without a histogram/summary/counter suffix.
std::string FamilyOf(const std::string& name, const std::map<std::string, std::string>& types) {
  if (types.count(name)) return name;
  for (const char* suffix : {"_bucket", "_sum", "_count", "_total"}) {
    if (absl::EndsWith(name, suffix)) {
      std::string base = name.substr(0, name.size() - strlen(suffix));
      if (types.count(base)) return base;
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<double> Exposition::Value(const std::string& name,
                                         const std::map<std::string, std::string>& labels) const {
  for (const Sample& s : samples) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return absl::NotFoundError(absl::StrCat("no sample ", name));
}

absl::StatusOr<Exposition> ParsePrometheusText(const std::string& text) {
  Exposition out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": ", what, ": '", line, "'"));
    };
    if (line.empty()) continue;
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      if (parts.size() != 2) return error("malformed TYPE");
      static const char* kTypes[] = {"counter", "gauge", "histogram", "summary", "untyped"};
      if (std::find(std::begin(kTypes), std::end(kTypes), parts[1]) == std::end(kTypes)) return error("unknown type");
      if (!out.types.emplace(parts[0], parts[1]).second) return error("duplicate TYPE");
      continue;
    }
    if (line.front() == '#') continue;  // HELP and comments
    size_t i = 0;
    while (i < line.size() && IsNameChar(line[i], i == 0)) ++i;
    if (i == 0) return error("sample without a metric name");
    Sample sample;
    sample.name = std::string(line.substr(0, i));
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t start = i;
        while (i < line.size() && IsNameChar(line[i], i == start)) ++i;
        std::string label(line.substr(start, i - start));
        if (label.empty() || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return error("bad label");
        i += 2;
        std::string value;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < line.size()) ++i;
          value.push_back(line[i++]);
        }
        if (i >= line.size()) return error("unterminated label value");
        ++i;
        if (!sample.labels.emplace(label, value).second) return error("duplicate label");
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return error("unterminated label set");
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') return error("missing value");
    std::vector<absl::string_view> rest = absl::StrSplit(line.substr(i + 1), ' ', absl::SkipEmpty());
    if (rest.empty() || rest.size() > 2) return error("expected a value and an optional timestamp");
    auto value = ParseValue(rest[0]);
    if (!value.ok()) return error(value.status().message());
    sample.value = *value;
    if (FamilyOf(sample.name, out.types).empty()) return error("sample has no # TYPE line");
    out.samples.push_back(std::move(sample));
  }
  return out;
}

absl::StatusOr<std::string> HttpGet(const std::string& host_port, const std::string& path) {
  size_t colon = host_port.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(host_port.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("bad address ", host_port));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", host_port));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", host_port));
  }
  std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host_port, "\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("short write");
  }
  std::string response;
  char buf[16384];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
  close(fd);
  size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) return absl::UnavailableError("no HTTP response");
  if (!absl::StartsWith(response, "HTTP/1.1 200") && !absl::StartsWith(response, "HTTP/1.0 200")) {
    return absl::UnavailableError(absl::StrCat("HTTP error: ", response.substr(0, response.find('\r'))));
  }
  return response.substr(body + 4);
}

}  // namespace corral::http
