#include "tools/fake-llm/shell_agent.h"

#include <array>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "tools/fake-llm/json_text.h"

namespace corral::fakellm {
namespace {

namespace json = boost::json;

// The rest of the line after the first `marker` in `text`, trimmed of spaces and backticks; nullopt without it.
std::optional<std::string> AfterMarker(absl::string_view text, absl::string_view marker) {
  const size_t at = text.find(marker);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view rest = text.substr(at + marker.size());
  rest = absl::StripAsciiWhitespace(rest.substr(0, rest.find('\n')));
  while (!rest.empty() && rest.front() == '`') rest.remove_prefix(1);
  while (!rest.empty() && rest.back() == '`') rest.remove_suffix(1);
  return std::string(absl::StripAsciiWhitespace(rest));
}

// The shell tool among the offered ones: a known name first, then any name with "bash" or "shell" in it.
const json::object* ShellTool(const json::value* tools) {
  if (tools == nullptr || !tools->is_array()) return nullptr;
  std::vector<const json::object*> functions;
  for (const auto& t : tools->as_array()) {
    const json::value* fn = t.is_object() ? t.as_object().if_contains("function") : nullptr;
    if (fn != nullptr && fn->is_object()) functions.push_back(&fn->as_object());
  }
  static constexpr std::array<absl::string_view, 7> kKnown = {
      "bash", "shell", "exec_command", "shell_command", "local_shell", "run_shell_command", "run_commands"};
  for (absl::string_view known : kKnown) {
    for (const json::object* fn : functions) {
      if (absl::AsciiStrToLower(Str(fn->if_contains("name"))) == known) return fn;
    }
  }
  for (const json::object* fn : functions) {
    const std::string name = absl::AsciiStrToLower(Str(fn->if_contains("name")));
    if (absl::StrContains(name, "bash") || absl::StrContains(name, "shell")) return fn;
  }
  return nullptr;
}

// `v` as Python's json.dumps writes it (", " and ": " between items): how vLLM's tool-call parsers spell the
// arguments they return, so that harnesses that send them back re-encoded are seen doing it.
std::string DumpsStyle(const json::value& v) {
  std::string out;
  if (v.is_object()) {
    out = "{";
    for (const auto& [key, value] : v.as_object()) {
      if (out.size() > 1) out += ", ";
      out += json::serialize(json::string(key)) + ": " + DumpsStyle(value);
    }
    return out + "}";
  }
  if (v.is_array()) {
    out = "[";
    for (const auto& item : v.as_array()) {
      if (out.size() > 1) out += ", ";
      out += DumpsStyle(item);
    }
    return out + "]";
  }
  return json::serialize(v);
}

}  // namespace

std::optional<ShellAgentPlan> PlanShellAgent(const json::object& body, const std::string& default_command) {
  std::string user_text;
  bool tool_result = false;
  if (const json::value* msgs = body.if_contains("messages"); msgs != nullptr && msgs->is_array()) {
    for (const auto& m : msgs->as_array()) {
      if (!m.is_object()) continue;
      const std::string role = Str(m.as_object().if_contains("role"));
      if (role == "user") user_text += ContentText(m.as_object().if_contains("content"), "\n") + "\n";
      if (role == "tool") tool_result = true;
    }
  }
  std::optional<std::string> command = AfterMarker(user_text, "RUN:");
  if (!command.has_value() && !default_command.empty() && !user_text.empty()) command = default_command;
  const std::optional<std::string> answer = AfterMarker(user_text, "ANSWER:");
  const json::object* shell = ShellTool(body.if_contains("tools"));
  if (shell == nullptr && !answer.has_value()) return std::nullopt;
  ShellAgentPlan plan;
  plan.reply = answer.value_or("done");
  if (shell == nullptr || !command.has_value() || tool_result) return plan;
  // The command's property: "command" or "cmd" (else the schema's first), as a string, an argv array, or (a
  // property named "commands", Cline's) a list of whole command lines.
  const json::value* params = shell->if_contains("parameters");
  const json::value* props =
      params != nullptr && params->is_object() ? params->as_object().if_contains("properties") : nullptr;
  std::string property = "command";
  const json::object* schema = nullptr;
  if (props != nullptr && props->is_object() && !props->as_object().empty()) {
    const json::object& p = props->as_object();
    property = p.contains("command") ? "command" : p.contains("cmd") ? "cmd" : std::string(p.begin()->key());
    if (const json::value* s = p.if_contains(property); s != nullptr && s->is_object()) schema = &s->as_object();
  }
  json::object args;
  if (schema != nullptr && Str(schema->if_contains("type")) == "array") {
    args[property] = property == "commands" ? json::array{json::string(*command)}
                                            : json::array{"bash", "-lc", json::string(*command)};
  } else {
    args[property] = *command;
  }
  plan.tool_call = true;
  plan.tool_name = Str(shell->if_contains("name"));
  plan.arguments = DumpsStyle(args);
  return plan;
}

}  // namespace corral::fakellm
