// Subcommands of the `corral` CLI. Each Register* adds one subcommand (with its own --help) to the app;
// its callback sets the process exit code through `exit_code`.
#pragma once

#include "CLI/CLI.hpp"

namespace corral::cli {

void RegisterVersion(CLI::App& app, int& exit_code);
void RegisterHealth(CLI::App& app, int& exit_code);
void RegisterLimiter(CLI::App& app, int& exit_code);
void RegisterUp(CLI::App& app, int& exit_code);
void RegisterSandbox(CLI::App& app, int& exit_code);
void RegisterImage(CLI::App& app, int& exit_code);
void RegisterSession(CLI::App& app, int& exit_code);
// batch submit|ls|get|cancel, results, hosts ls, drain (the scheduler).
void RegisterBatch(CLI::App& app, int& exit_code);
// run DATASET|TASK_DIR: submit, live progress, summary.
void RegisterRun(CLI::App& app, int& exit_code);
// top: a live view of the cluster.
void RegisterTop(CLI::App& app, int& exit_code);
// policy update|pause|resume: asynchronous RL.
void RegisterPolicy(CLI::App& app, int& exit_code);
// ui: the rollout inspector's link.
void RegisterUi(CLI::App& app, int& exit_code);
// harness list|install: installed agent harnesses.
void RegisterHarness(CLI::App& app, int& exit_code);
// audit DATASET|TASK_DIR: exploits against every agent task's verifier.
void RegisterAudit(CLI::App& app, int& exit_code);
// sandbox-api key NAME: keys for the E2B API.
void RegisterSandboxApi(CLI::App& app, int& exit_code);

}  // namespace corral::cli
