// Harbor task directories as agent-runner tasks, read the way the Python SDK's load_harbor reads them:
// instruction.md → the prompt; environment/Dockerfile → the template (RUN → setup commands, COPY/ADD of local
// files → setup files, ENV → env, WORKDIR → working directory and task path; FROM kept in the metadata as
// "image" — or, with `use_image`, the environment's image, the setup then becoming a template built on it),
// or without a Dockerfile every file of environment/ uploaded to the working directory (/workspace unless
// WORKDIR says otherwise); tests/ → the verifier's files, in <working directory>/tests (uploaded after
// the agent; the verifier runs `bash tests/test.sh` there); task.toml → [agent] and [verifier] timeout_sec,
// [environment] build_timeout_sec and memory_mb, [metadata] into the metadata; with `use_image`, task.toml's
// [environment] docker_image (a prebuilt image) is the image and the Dockerfile gives only WORKDIR and ENV.
// solution/ is never sent.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "corral/v1/scheduler.pb.h"

namespace corral::cli {

// `agent` as a task's agent: a harness's name ("codex": agent.harness) or else a command run with bash -c.
void SetAgent(const std::string& agent, v1::AgentSpec* spec);

// `agent` is a harness's name or the command that runs the agent in the sandbox (SetAgent). INVALID_ARGUMENT
// naming the file when the directory is not a Harbor task (no instruction.md) or task.toml / the Dockerfile cannot
// be read.
// With `use_image`, a multi-stage Dockerfile's last stage is what runs, and COPY --from another stage is refused.
absl::StatusOr<v1::Task> LoadHarborTask(const std::string& dir, const std::string& agent, bool use_image = false);
// Every Harbor task directly below `root`, by name; INVALID_ARGUMENT when there is none.
absl::StatusOr<std::vector<v1::Task>> LoadHarborTasks(const std::string& root, const std::string& agent,
                                                      bool use_image = false);

// Where `agent_files` land in each sandbox, below the working directory where the agent runs:
// `--agent 'python3 .corral/agent/x.py'`.
inline constexpr char kAgentDir[] = ".corral/agent";

// What `corral run` and `corral batch submit` accept: a JSONL dataset file, a Harbor task directory, or a
// directory of them (these need `agent`; INVALID_ARGUMENT saying so otherwise). `agent_files` (local paths) are
// uploaded into every Harbor task's sandbox under <working directory>/kAgentDir, executable: the agent program.
absl::StatusOr<std::vector<v1::Task>> LoadTaskInput(const std::string& path, const std::string& agent,
                                                    const std::vector<std::string>& agent_files = {},
                                                    bool use_image = false);

// A task.toml (TOML 1.0, read by toml++) as "table.key" → JSON text of the value: tables (nested, dotted or
// inline) flattened with dots, arrays as JSON, dates and times as strings. INVALID_ARGUMENT "line N: ..." when it
// is not TOML.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseToml(const std::string& text);
// Words of a shell-like line: whitespace-separated, with '…' and "…" quoting (backslash escapes inside "…").
std::vector<std::string> ShellWords(const std::string& line);

}  // namespace corral::cli
