// "HOST:PORT" addresses as every listen flag and upstream takes them: IPv4, a name, or [IPv6]; port 0-65535.
#pragma once

#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace corral {

// Splits "host:port" / "[v6]:port" (the brackets are dropped). INVALID_ARGUMENT with the offending text otherwise.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address);
// The inverse: "host:port", "[v6]:port" for an IPv6 host.
std::string JoinHostPort(const std::string& host, int port);
// True for a host only this machine can reach: 127.0.0.0/8, ::1, "localhost" (as SplitHostPort returns hosts).
bool IsLoopbackHost(const std::string& host);

}  // namespace corral
