// corral-sandbox-api's settings: its HTTP endpoint, the scheduler it leases sandboxes from, the ratelimiter and
// limit that bound /run_code across every replica, and the sandbox /run_code runs in.
#pragma once

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "libs/core/config.h"
#include "libs/core/price_table.h"
#include "libs/rpc/server_config.h"

namespace corral::sandbox_api {

struct Config {
  ServerConfig server;
  std::string http_listen = "127.0.0.1:8090";
  int64_t http_threads = 2;
  int64_t max_body_bytes = 96 << 20;  // verl's files come base64-encoded (64 MiB decoded)
  std::string scheduler = "127.0.0.1:7700";
  // /run_code's cluster-wide limit: a ratelimiter concurrency limit keyed by language (declared as
  // code_exec/{language}, the limit the scheduler's tool executions hold too), one permit held for each run. No
  // ratelimiter: no limit.
  std::string ratelimiter;
  std::string code_limit = "code_exec";
  bool limiter_fail_open = false;
  // How long a /run_code call waits for a permit and a sandbox before answering 504 (which verl retries).
  absl::Duration wait = absl::Minutes(2);
  // The sandbox /run_code runs in: an image (empty: the host's own toolchains), or per language the image that
  // has its toolchain (`images`, language -> image).
  std::string image;
  std::map<std::string, std::string> images;
  // Reported as executor_pod_name (default: the MY_POD_NAME environment variable, as SandboxFusion does).
  std::string executor_name;
  // A metadata key that names the OCI image of an E2B sandbox made from the default template (how slime picks
  // its image); empty: none.
  std::string e2b_image_metadata_key;
  // What a sandbox's usage costs (GET /sandboxes/{id}/usage); empty: no cost.
  PriceTable prices;
  // E2B processes start fork-ready where the host can carry them (E2bOptions::fork_ready).
  bool e2b_fork_ready = true;
};

void RegisterConfig(ConfigSchema& schema, Config* config);
// INVALID_ARGUMENT naming the key.
absl::Status ValidateConfig(Config& config);

}  // namespace corral::sandbox_api
