#include "libs/rpc/server_config.h"

#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "spdlog/spdlog.h"

namespace corral {

void RegisterServerFlags(ConfigSchema& schema, ServerConfig* config) {
  schema.String("grpc_listen", &config->grpc_listen, "gRPC listen address HOST:PORT (port 0: any free port)");
  schema.String("metrics_listen", &config->metrics_listen,
                "Prometheus /metrics listen address HOST:PORT (port 0: any free port)");
  schema.String("secret_file", &config->secret_file,
                "file holding the cluster secret that signs tokens (mode 0600, at least 32 bytes)");
  schema.Bool("insecure", &config->insecure,
              "run without a cluster secret (local playground only: tokens die with the process)");
  schema.String("log_level", &config->log.level, "trace, debug, info, warn, error, critical or off");
  schema.String("log_format", &config->log.format, "text (human-readable) or json (one object per line)");
  RegisterTlsFlags(schema, "tls", &config->tls);
  schema.Duration("shutdown_grace", &config->shutdown_grace,
                  "on SIGTERM, how long in-flight calls may run before they are cancelled", absl::ZeroDuration(),
                  absl::Hours(1));
  schema.String("ready_file", &config->ready_file,
                "once listening, write {\"service\",\"pid\",\"grpc\",\"metrics\"} as JSON to this file");
}

absl::Status ValidateServerConfig(const ServerConfig& config) {
  auto grpc = SplitHostPort(config.grpc_listen);
  if (!grpc.ok()) return absl::InvalidArgumentError(absl::StrCat("grpc_listen: ", grpc.status().message()));
  auto metrics = SplitHostPort(config.metrics_listen);
  if (!metrics.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("metrics_listen: ", metrics.status().message()));
  }
  return ValidateLogOptions(config.log);
}

absl::StatusOr<TokenSigner> LoadClusterSecret(const ServerConfig& config) {
  if (!config.secret_file.empty()) return TokenSigner::FromKeyFile(config.secret_file);
  if (!config.insecure) {
    return absl::FailedPreconditionError(
        "no cluster secret: pass --secret-file FILE (create one with `openssl rand -hex 32 > FILE; chmod 600 FILE`), "
        "or --insecure for a local playground");
  }
  spdlog::warn("running --insecure: tokens are signed with a random key that dies with this process");
  return TokenSigner::Ephemeral();
}

CallAuthenticator MakeCallAuthenticator(const ServerConfig& config, const TokenSigner& secret) {
  if (config.insecure && config.secret_file.empty()) return CallAuthenticator(std::nullopt);
  return CallAuthenticator(secret);
}

std::optional<int> HandleCommandLine(ConfigSchema& schema, int argc, char** argv, std::string* config_file) {
  auto cmd = LoadConfig(schema, argc, argv);
  if (!cmd.ok()) {
    std::cerr << schema.program() << ": " << cmd.status().message() << "\n";
    return 2;
  }
  if (cmd->help) {
    std::cout << schema.Help();
    return 0;
  }
  if (config_file != nullptr) *config_file = cmd->config_file;
  return std::nullopt;
}

}  // namespace corral
