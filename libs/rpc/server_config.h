// The flags every Corral service takes: where to listen, the cluster secret, logging,
// TLS, and how long to drain on shutdown. A service embeds ServerConfig in its own Config struct.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "libs/core/config.h"
#include "libs/core/host_port.h"
#include "libs/core/logging.h"
#include "libs/core/token.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/tls.h"

namespace corral {

struct ServerConfig {
  std::string grpc_listen = "127.0.0.1:0";
  std::string metrics_listen = "127.0.0.1:0";
  std::string secret_file;
  bool insecure = false;
  LogOptions log;
  TlsConfig tls;
  absl::Duration shutdown_grace = absl::Seconds(10);
  std::string ready_file;   // written once listening: {"service","pid","grpc","metrics"}
  std::string config_file;  // the --config file this process was started with; empty if none (not a key)
};

// Registers grpc_listen, metrics_listen, secret_file, insecure, log_level, log_format, tls.*,
// shutdown_grace and ready_file. The config's current values become the defaults.
void RegisterServerFlags(ConfigSchema& schema, ServerConfig* config);

// INVALID_ARGUMENT for a listen address that is not HOST:PORT, or bad log options.
absl::Status ValidateServerConfig(const ServerConfig& config);

// The cluster secret: from secret_file, or an ephemeral key with --insecure (logged as a warning).
// FAILED_PRECONDITION when neither is given, telling the operator which flag to pass.
absl::StatusOr<TokenSigner> LoadClusterSecret(const ServerConfig& config);

// How calls are authenticated: by cluster tokens from `secret`, or — with --insecure and no secret file — not at
// all (the ephemeral secret then only signs what the service hands out).
CallAuthenticator MakeCallAuthenticator(const ServerConfig& config, const TokenSigner& secret);

// Runs LoadConfig and handles its outcomes for a binary's main(): prints --help (exit 0) or the error
// (exit 2) and returns the exit code; returns nullopt when the program should go on.
// `config_file` (optional) receives the --config path.
std::optional<int> HandleCommandLine(ConfigSchema& schema, int argc, char** argv, std::string* config_file = nullptr);

// The start of every service's main(): registers `config`'s keys with `register_config`, loads flags and the
// config file, checks the result with `validate_config` (errors go to stderr, exit 2) and starts logging as
// `log_name`. Returns the exit code when the process should stop now (--help, bad config); nullopt to go on.
template <class Config, class Register, class Validate>
std::optional<int> LoadServiceConfig(const std::string& binary, const std::string& summary, const std::string& log_name,
                                     Config& config, Register register_config, Validate validate_config, int argc,
                                     char** argv) {
  ConfigSchema schema(binary, summary);
  register_config(schema, &config);
  if (auto exit_code = HandleCommandLine(schema, argc, argv, &config.server.config_file)) return exit_code;
  if (absl::Status s = validate_config(config); !s.ok()) {
    fprintf(stderr, "%s: %s\n", binary.c_str(), std::string(s.message()).c_str());
    return 2;
  }
  if (!InitLogging(log_name, config.server.log).ok()) return 2;
  // absl's mutex deadlock detection updates a lock graph on every acquisition; tests keep it, services do not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return std::nullopt;
}

}  // namespace corral
