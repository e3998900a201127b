// corral-sandbox-host's configuration: the common server keys plus where homes live, capacity, uid range and
// the isolation floor.
#pragma once

#include "libs/core/config.h"
#include "libs/rpc/server_config.h"
#include "services/sandbox_host/sandbox_manager.h"

namespace corral::sandbox {

struct Config {
  ServerConfig server;
  HostOptions host;
  std::string default_network = "none";
  int64_t min_landlock_abi = 1;
  bool allow_unconfined = false;
  absl::Duration exit_when_empty_for = absl::ZeroDuration();  // 0: never
  int64_t uid_first = 20000;
  int64_t uid_last = 65000;
  int64_t max_template_bytes = int64_t{20} << 30;
  int64_t max_image_bytes = int64_t{100} << 30;  // 0: no budget
  std::string host_id;
  std::string harness_root = "/opt/corral/harnesses";  // what HostInfo.harnesses lists
  std::string registry_ca_file;
  std::string registry_auth_file;
  std::vector<std::string> insecure_registries;
  absl::Duration registry_timeout = absl::Seconds(60);
};

void RegisterConfig(ConfigSchema& schema, Config* config);
// Cross-key checks; changes nothing. INVALID_ARGUMENT naming the key.
absl::Status ValidateConfig(const Config& config);
// The managers' options: `host` with the keys kept in their configuration form (network policy, uid range,
// template bytes) converted. For a validated config.
HostOptions EffectiveHostOptions(const Config& config);
// `host_id`, or the machine's hostname.
std::string EffectiveHostId(const Config& config);

}  // namespace corral::sandbox
