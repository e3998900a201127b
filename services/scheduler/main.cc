// corral-scheduler: parses its configuration, then builds and runs the service (scheduler_root.h).
#include <utility>

#include "libs/core/logging.h"
#include "libs/rpc/server_config.h"
#include "libs/rpc/server_runner.h"
#include "services/scheduler/config.h"
#include "services/scheduler/scheduler_root.h"
#include "spdlog/spdlog.h"

using corral::scheduler::Config;
using corral::scheduler::RegisterConfig;
using corral::scheduler::SchedulerRoot;
using corral::scheduler::ValidateConfig;

int main(int argc, char** argv) {
  corral::BlockShutdownSignals();  // before any thread exists, so only the runner receives SIGTERM
  Config config;
  if (auto exit_code = corral::LoadServiceConfig(
          "corral-scheduler", "Batches of RL episodes in, rewarded trajectories out: the trainer's door.", "scheduler",
          config, RegisterConfig, ValidateConfig, argc, argv)) {
    return *exit_code;
  }
  auto root = SchedulerRoot::Build(std::move(config));
  if (!root.ok()) {
    spdlog::error("cannot start: {}", root.status());
    return 1;
  }
  return (*root)->Run();
}
