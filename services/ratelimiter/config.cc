#include "services/ratelimiter/config.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "libs/core/host_port.h"
#include "libs/core/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace corral::ratelimiter {

void RegisterConfig(ConfigSchema& schema, Config* config) {
  config->server.grpc_listen = "127.0.0.1:7400";
  config->server.metrics_listen = "127.0.0.1:9400";
  RegisterServerFlags(schema, &config->server);
  schema.Custom("limits", "LIST", "[]",
                "limits to declare: [{name: code_exec/{language}, kind: concurrency, permits: 64}, "
                "{name: llm_tokens, kind: rate, rate_per_s: 5000, burst: 20000}]",
                [config](const YAML::Node& node) -> absl::Status {
                  CORRAL_ASSIGN_OR_RETURN(config->limits, ParseLimitsYaml(node));
                  return absl::OkStatus();
                });
  schema.Duration("default_lease_ttl", &config->limiter.default_lease_ttl,
                  "lease TTL when a request names none; clients keep leases alive well within it",
                  absl::Milliseconds(100), absl::Hours(24));
  schema.Duration("max_lease_ttl", &config->limiter.max_lease_ttl,
                  "longest TTL a request may ask for; also the length of learning mode without a state_path",
                  absl::Milliseconds(100), absl::Hours(24));
  schema.String("state_path", &config->state_path,
                "SQLite file keeping the held leases (on a volume), so a restart grants again at once; unset: "
                "beside the config file, else under /var/lib/corral when writable (said at start-up); "
                "'none': nothing on disk and learning mode after every start");
  schema.Bool("learning_mode", &config->limiter.learning_mode,
              "without a state_path: after a start grant only re-claims for one max_lease_ttl, so a restart "
              "never over-grants (ignored with a state_path, which needs no learning)");
}

absl::Status ValidateConfig(const Config& config) {
  CORRAL_RETURN_IF_ERROR(ValidateServerConfig(config.server));
  if (config.limiter.default_lease_ttl > config.limiter.max_lease_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("default_lease_ttl (", absl::FormatDuration(config.limiter.default_lease_ttl),
                     ") must not exceed max_lease_ttl (", absl::FormatDuration(config.limiter.max_lease_ttl), ")"));
  }
  return absl::OkStatus();
}

namespace {

bool WritableDir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return std::filesystem::is_directory(dir, ec) && access(dir.c_str(), W_OK | X_OK) == 0;
}

}  // namespace

StatePath ResolveStatePath(const Config& config) {
  if (config.state_path == "none") return {"", "state_path: none"};
  if (!config.state_path.empty()) return {config.state_path, "state_path"};
  if (!config.server.config_file.empty()) {
    const std::filesystem::path file = std::filesystem::absolute(config.server.config_file);
    if (WritableDir(file.parent_path())) {
      return {(file.parent_path() / (file.stem().string() + ".leases.db")).string(),
              absl::StrCat("beside the config file ", file.string())};
    }
  }
  auto listen = SplitHostPort(config.server.grpc_listen);
  if (listen.ok() && listen->second != 0 && WritableDir("/var/lib/corral")) {
    return {absl::StrCat("/var/lib/corral/ratelimiter-", listen->second, ".leases.db"),
            "the state directory /var/lib/corral"};
  }
  return {"", "no writable state directory (beside the config file or /var/lib/corral) and no state_path"};
}

}  // namespace corral::ratelimiter
