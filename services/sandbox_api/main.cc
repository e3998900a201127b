// corral-sandbox-api: parses its configuration, then builds and runs the service (sandbox_api_root.h).
#include <utility>

#include "libs/core/fd_limit.h"
#include "libs/rpc/server_config.h"
#include "libs/rpc/server_runner.h"
#include "services/sandbox_api/config.h"
#include "services/sandbox_api/sandbox_api_root.h"
#include "spdlog/spdlog.h"

using corral::sandbox_api::Config;
using corral::sandbox_api::SandboxApiRoot;

int main(int argc, char** argv) {
  corral::BlockShutdownSignals();  // before any thread exists, so only the runner receives SIGTERM
  Config config;
  if (auto exit_code = corral::LoadServiceConfig(
          "corral-sandbox-api",
          "The sandbox APIs people already call, served by Corral: SandboxFusion's /run_code (verl's code tools "
          "and rewards), each run in a sandbox leased from the scheduler under a cluster-wide limit.",
          "sandbox-api", config, corral::sandbox_api::RegisterConfig, corral::sandbox_api::ValidateConfig, argc,
          argv)) {
    return *exit_code;
  }
  corral::RaiseOpenFileLimit();
  auto root = SandboxApiRoot::Build(std::move(config));
  if (!root.ok()) {
    spdlog::error("cannot start: {}", root.status());
    return 1;
  }
  return (*root)->Run();
}
