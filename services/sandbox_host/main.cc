// corral-sandbox-host: parses its configuration, then builds and runs the service (sandbox_host_root.h).
#include <utility>

#include "libs/core/logging.h"
#include "libs/rpc/server_config.h"
#include "libs/rpc/server_runner.h"
#include "services/sandbox_host/config.h"
#include "services/sandbox_host/sandbox_host_root.h"
#include "spdlog/spdlog.h"

using corral::sandbox::Config;
using corral::sandbox::SandboxHostRoot;

int main(int argc, char** argv) {
  corral::BlockShutdownSignals();  // before any thread exists, so only the runner receives SIGTERM
  Config config;
  if (auto exit_code = corral::LoadServiceConfig(
          "corral-sandbox-host",
          "Hundreds of isolated sandboxes on one machine: a uid, a private home, Landlock, rlimits, "
          "cgroups and private namespaces each.",
          "sandbox-host", config, corral::sandbox::RegisterConfig, corral::sandbox::ValidateConfig, argc, argv)) {
    return *exit_code;
  }
  auto root = SandboxHostRoot::Build(std::move(config));
  if (!root.ok()) {
    spdlog::error("cannot start: {}", root.status().message());
    return 1;
  }
  const int code = (*root)->Run();
  root->reset();
  spdlog::info("sandbox-host: all sandboxes removed");
  return code;
}
