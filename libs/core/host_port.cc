#include "libs/core/host_port.h"

#include <arpa/inet.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace corral {

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address) {
  size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' is not a HOST:PORT address (e.g. 127.0.0.1:7100 or [::]:7100)"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::make_pair(host, port);
}

std::string JoinHostPort(const std::string& host, int port) {
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", port) : absl::StrCat(host, ":", port);
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr v4;
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

}  // namespace corral
