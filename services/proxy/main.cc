// corral-proxy: parses its configuration, then builds and runs the service (proxy_root.h).
#include <utility>

#include "libs/core/fd_limit.h"
#include "libs/core/logging.h"
#include "libs/rpc/server_config.h"
#include "libs/rpc/server_runner.h"
#include "services/proxy/config.h"
#include "services/proxy/proxy_root.h"
#include "spdlog/spdlog.h"

using corral::proxy::Config;
using corral::proxy::ProxyRoot;

int main(int argc, char** argv) {
  corral::BlockShutdownSignals();  // before any thread exists, so only the runner receives SIGTERM
  Config config;
  if (auto exit_code = corral::LoadServiceConfig(
          "corral-proxy",
          "OpenAI-compatible interception proxy: routes agents' LLM calls by env token to "
          "inference backends, streams without buffering, records exact trajectories.",
          "proxy", config, corral::proxy::RegisterConfig, corral::proxy::ValidateConfig, argc, argv)) {
    return *exit_code;
  }
  // Two descriptors per relayed call (agent and upstream): raise the soft limit to the hard one.
  corral::RaiseOpenFileLimit();
  auto root = ProxyRoot::Build(std::move(config));
  if (!root.ok()) {
    spdlog::error("cannot start: {}", root.status());
    return 1;
  }
  return (*root)->Run();
}
