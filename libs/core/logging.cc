#include "libs/core/logging.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace corral {
namespace {

void AppendJsonString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (c < 0x20) {
          absl::StrAppend(out, "\\u00", absl::Hex(c, absl::kZeroPad2));
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

// spdlog formatter writing one JSON object per record, with the message escaped properly (a pattern
// string cannot escape quotes or newlines inside %v).
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    absl::Time t = absl::FromChrono(msg.time);
    std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
    auto level = spdlog::level::to_string_view(msg.level);
    std::string line = FormatJsonLogLine(ts, absl::string_view(level.data(), level.size()),
                                         absl::string_view(msg.logger_name.data(), msg.logger_name.size()),
                                         absl::string_view(msg.payload.data(), msg.payload.size()));
    line.push_back('\n');
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

}  // namespace

std::string FormatJsonLogLine(absl::string_view timestamp, absl::string_view level, absl::string_view service,
                              absl::string_view message) {
  std::string out = "{\"ts\":";
  AppendJsonString(&out, timestamp);
  out.append(",\"level\":");
  AppendJsonString(&out, level);
  out.append(",\"service\":");
  AppendJsonString(&out, service);
  out.append(",\"msg\":");
  AppendJsonString(&out, message);
  out.push_back('}');
  return out;
}

absl::Status ValidateLogOptions(const LogOptions& options) {
  if (options.format != "text" && options.format != "json") {
    return absl::InvalidArgumentError(absl::StrCat("log format '", options.format, "' is not known; use text or json"));
  }
  if (spdlog::level::from_str(options.level) == spdlog::level::off && options.level != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "log level '", options.level, "' is not known; use trace, debug, info, warn, error, critical or off"));
  }
  return absl::OkStatus();
}

absl::Status InitLogging(absl::string_view service, const LogOptions& options) {
  if (absl::Status s = ValidateLogOptions(options); !s.ok()) return s;
  auto logger =
      std::make_shared<spdlog::logger>(std::string(service), std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (options.format == "json") {
    logger->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %n: %v");
  }
  logger->set_level(spdlog::level::from_str(options.level));
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

}  // namespace corral
