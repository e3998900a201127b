// Process-wide logging setup: spdlog to stderr, human-readable lines by default or JSON lines
// (--log-format=json) for log shippers. Call once from main before any thread logs.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/fmt/fmt.h"

namespace corral {

struct LogOptions {
  std::string level = "info";   // trace | debug | info | warn | error | critical | off
  std::string format = "text";  // text | json
};

// INVALID_ARGUMENT (naming the accepted values) for an unknown level or format; nothing changes then.
absl::Status ValidateLogOptions(const LogOptions& options);
// Installs the default logger named `service`. Returns the validation error, if any.
absl::Status InitLogging(absl::string_view service, const LogOptions& options);

// Formats one record as a JSON object line: {"ts":…,"level":…,"service":…,"msg":…}. Exposed for tests.
std::string FormatJsonLogLine(absl::string_view timestamp, absl::string_view level, absl::string_view service,
                              absl::string_view message);

}  // namespace corral

// Debian's Abseil has its own string_view type (not std::string_view); teach fmt/spdlog to print it and
// absl::Status, so `spdlog::info("{}", status)` just works.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

template <>
struct fmt::formatter<absl::Status> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(const absl::Status& s, Context& ctx) const {
    std::string text = s.ToString();
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(text), ctx);
  }
};
