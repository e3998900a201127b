// corral: the person's door into a Corral cluster. Subcommands live in their own files (commands.h).
#include "CLI/CLI.hpp"
#include "tools/corral/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"corral — rollout orchestration for agentic RL: sandboxes, rate limits, LLM proxy, scheduler"};
  app.require_subcommand(1);
  int exit_code = 0;
  corral::cli::RegisterVersion(app, exit_code);
  corral::cli::RegisterHealth(app, exit_code);
  corral::cli::RegisterLimiter(app, exit_code);
  corral::cli::RegisterUp(app, exit_code);
  corral::cli::RegisterSandbox(app, exit_code);
  corral::cli::RegisterImage(app, exit_code);
  corral::cli::RegisterSession(app, exit_code);
  corral::cli::RegisterBatch(app, exit_code);
  corral::cli::RegisterRun(app, exit_code);
  corral::cli::RegisterTop(app, exit_code);
  corral::cli::RegisterPolicy(app, exit_code);
  corral::cli::RegisterUi(app, exit_code);
  corral::cli::RegisterHarness(app, exit_code);
  corral::cli::RegisterAudit(app, exit_code);
  corral::cli::RegisterSandboxApi(app, exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
