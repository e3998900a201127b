// Installed agent harnesses the agent runner can run by name (AgentSpec.harness): Claude Code, Codex CLI,
// OpenCode. An entry is data — the npm package pinned to a version, the program it installs, and the shell lines
// that point it at the episode's proxy session and run it non-interactively — so adding a harness is one entry
// in harnesses.cc, not a code path. The lines read only the agent's variables (OPENAI_BASE_URL, OPENAI_API_KEY,
// OPENAI_MODEL, CORRAL_INSTRUCTION / CORRAL_INSTRUCTION_FILE), so a test can run the same command outside any
// sandbox.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace corral::scheduler {

// Where `corral harness install` puts harnesses on a host: <root>/<name>@<version>/node_modules/.bin. Under /opt,
// which every plain sandbox may read and execute; CORRAL_HARNESS_ROOT overrides it for the agent.
inline constexpr absl::string_view kHarnessRoot = "/opt/corral/harnesses";

struct Harness {
  absl::string_view name;     // what a task names: "claude-code"
  absl::string_view package;  // the npm package: "@anthropic-ai/claude-code"
  absl::string_view version;  // pinned: "2.1.332"
  absl::string_view program;  // the executable it installs: "claude"
  absl::string_view api;      // the API it speaks to the proxy (for docs and logs)
  absl::string_view launch;   // bash lines: configure from the agent's variables, then exec the program
};

std::span<const Harness> Harnesses();
// "claude-code" or "claude-code@2.1.332" (a version must be the pinned one); nullptr when unknown.
const Harness* FindHarness(absl::string_view name);
// The names, for error messages and --help: "claude-code, codex, opencode".
std::string HarnessNames();
// The agent command of a harness: bash -c with the lines that find the program (on PATH — an image or template
// that carries it — else under the harness root) and the harness's launch lines.
std::vector<std::string> HarnessArgv(const Harness& harness);

}  // namespace corral::scheduler
