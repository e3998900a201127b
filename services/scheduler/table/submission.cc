#include "services/scheduler/table/submission.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <tuple>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "boost/json.hpp"
#include "libs/api/ids.h"
#include "libs/api/proto_digest.h"
#include "libs/api/proto_time.h"
#include "libs/core/status_macros.h"
#include "libs/harness/harnesses.h"
#include "re2/re2.h"

namespace corral::scheduler {
namespace {

namespace pb = google::protobuf;

// INVALID_ARGUMENT "<who><what>": `who` is "task '<id>': ", or empty for an environment on its own.
absl::Status Bad(absl::string_view who, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(who, what));
}
std::string Who(const v1::Task& task) { return absl::StrCat("task '", task.id(), "': "); }
absl::Status Bad(const v1::Task& task, absl::string_view what) { return Bad(Who(task), what); }

bool IsJsonObject(const std::string& text) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec);
  return !ec && v.is_object();
}

bool IsFunctionName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

// Batch overrides onto a task: set scalars replace, messages merge field by field, non-empty repeated and map
// fields replace the task's. Fields are matched by name (TaskOverrides mirrors Task's names).
void OverrideMerge(const pb::Message& from, pb::Message* to) {
  const pb::Reflection* fr = from.GetReflection();
  const pb::Reflection* tr = to->GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  fr->ListFields(from, &fields);
  for (const pb::FieldDescriptor* f : fields) {
    const pb::FieldDescriptor* t = to->GetDescriptor()->FindFieldByName(f->name());
    if (t == nullptr) continue;
    if (f->is_repeated()) {
      tr->ClearField(to, t);
      for (int i = 0; i < fr->FieldSize(from, f); ++i) {
        if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
          tr->AddMessage(to, t)->CopyFrom(fr->GetRepeatedMessage(from, f, i));
        } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING) {
          tr->AddString(to, t, fr->GetRepeatedString(from, f, i));
        } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_UINT32) {
          tr->AddUInt32(to, t, fr->GetRepeatedUInt32(from, f, i));
        } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_DOUBLE) {
          tr->AddDouble(to, t, fr->GetRepeatedDouble(from, f, i));
        }
      }
    } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      const pb::Message& sub = fr->GetMessage(from, f);
      // Well-known leaf messages (Duration, Timestamp) are values: replace them whole.
      if (sub.GetDescriptor()->file()->package() == "google.protobuf") {
        tr->MutableMessage(to, t)->CopyFrom(sub);
      } else {
        OverrideMerge(sub, tr->MutableMessage(to, t));
      }
    } else {
      switch (f->cpp_type()) {
        case pb::FieldDescriptor::CPPTYPE_INT32: tr->SetInt32(to, t, fr->GetInt32(from, f)); break;
        case pb::FieldDescriptor::CPPTYPE_INT64: tr->SetInt64(to, t, fr->GetInt64(from, f)); break;
        case pb::FieldDescriptor::CPPTYPE_UINT32: tr->SetUInt32(to, t, fr->GetUInt32(from, f)); break;
        case pb::FieldDescriptor::CPPTYPE_UINT64: tr->SetUInt64(to, t, fr->GetUInt64(from, f)); break;
        case pb::FieldDescriptor::CPPTYPE_DOUBLE: tr->SetDouble(to, t, fr->GetDouble(from, f)); break;
        case pb::FieldDescriptor::CPPTYPE_FLOAT: tr->SetFloat(to, t, fr->GetFloat(from, f)); break;
        case pb::FieldDescriptor::CPPTYPE_BOOL: tr->SetBool(to, t, fr->GetBool(from, f)); break;
        case pb::FieldDescriptor::CPPTYPE_ENUM: tr->SetEnumValue(to, t, fr->GetEnumValue(from, f)); break;
        case pb::FieldDescriptor::CPPTYPE_STRING: tr->SetString(to, t, fr->GetString(from, f)); break;
        default: break;
      }
    }
  }
}

absl::Status CheckCommand(absl::string_view who, const std::string& field, const v1::Command& c) {
  if (c.argv().empty() || c.argv(0).empty()) return Bad(who, absl::StrCat(field, ".argv must not be empty"));
  for (const auto& [k, v] : c.env()) {
    if (!IsValidEnvName(k)) return Bad(who, absl::StrCat(field, ".env: '", k, "' is not a variable name"));
  }
  if (c.has_timeout() && FromProto(c.timeout()) <= absl::ZeroDuration()) {
    return Bad(who, absl::StrCat(field, ".timeout must be positive"));
  }
  return absl::OkStatus();
}

// The agent: a command, or an installed harness by name (whose command.env still applies).
absl::Status CheckAgent(const v1::Task& task) {
  const v1::AgentSpec& agent = task.agent();
  if (agent.harness().empty()) {
    if (agent.command().argv().empty()) {
      return Bad(task, "the agent runner needs agent.command.argv or agent.harness");
    }
    return CheckCommand(Who(task), "agent.command", agent.command());
  }
  if (auto harness = ResolveHarness(agent.harness()); !harness.ok()) {
    return Bad(task, absl::StrCat("agent.harness ", harness.status().message()));
  }
  if (!agent.command().argv().empty()) {
    return Bad(task, "agent.harness and agent.command.argv exclude each other (command.env may go with a harness)");
  }
  for (const auto& [k, v] : agent.command().env()) {
    if (!IsValidEnvName(k)) return Bad(task, absl::StrCat("agent.command.env: '", k, "' is not a variable name"));
  }
  return absl::OkStatus();
}

absl::Status CheckFiles(absl::string_view who, const std::string& field,
                        const pb::RepeatedPtrField<v1::InlineFile>& files) {
  for (int i = 0; i < files.size(); ++i) {
    const std::string& p = files[i].path();
    if (p.empty() || absl::StrContains(p, '\0') || p.size() > 4096) {
      return Bad(who, absl::StrCat(field, "[", i, "].path must be a sandbox path"));
    }
    for (absl::string_view part : absl::StrSplit(p, '/')) {
      if (part == "..") return Bad(who, absl::StrCat(field, "[", i, "].path must not contain '..'"));
    }
    if (files[i].permissions() > 07777) return Bad(who, absl::StrCat(field, "[", i, "].permissions above 07777"));
  }
  return absl::OkStatus();
}

absl::Status CheckTools(const v1::Task& task) {
  const auto& tools = task.tool_loop().tools();
  if (tools.empty() && task.mcp_servers().empty()) {
    return Bad(task, "tool_loop.tools (or mcp_servers) must not be empty for the tool_loop runner");
  }
  std::set<std::string> names;
  for (int i = 0; i < tools.size(); ++i) {
    const v1::ToolSpec& t = tools[i];
    const std::string field = absl::StrCat("tool_loop.tools[", i, "]");
    if (!IsFunctionName(t.name()))
      return Bad(task, absl::StrCat(field, ".name must be 1-64 characters of [A-Za-z0-9_-]"));
    if (!names.insert(t.name()).second) return Bad(task, absl::StrCat(field, ".name '", t.name(), "' is used twice"));
    if (t.kind() == v1::TOOL_KIND_UNSPECIFIED || !v1::ToolKind_IsValid(t.kind())) {
      return Bad(task, absl::StrCat(field, ".kind is required"));
    }
    if (!t.parameters_json().empty() && !IsJsonObject(t.parameters_json())) {
      return Bad(task, absl::StrCat(field, ".parameters_json must be a JSON object (a JSON Schema)"));
    }
    if (t.kind() == v1::TOOL_KIND_COMMAND) {
      if (!t.has_command()) return Bad(task, absl::StrCat(field, ".command is required for kind COMMAND"));
      if (absl::Status s = CheckCommand(Who(task), field + ".command", t.command()); !s.ok()) return s;
      if (t.description().empty() || t.parameters_json().empty()) {
        return Bad(task, absl::StrCat(field, ": kind COMMAND needs description and parameters_json"));
      }
    }
    if (t.persistent() && t.kind() != v1::TOOL_KIND_BASH &&
        !(t.kind() == v1::TOOL_KIND_CODE_INTERPRETER &&
          (t.language().empty() || t.language() == "python" || t.language() == "python3"))) {
      return Bad(task, absl::StrCat(field, ".persistent is for bash and python code_interpreter tools"));
    }
    if (!t.language().empty() && !IsFunctionName(t.language())) {
      return Bad(task, absl::StrCat(field, ".language must be an interpreter name like python"));
    }
  }
  return absl::OkStatus();
}

// Where a server in the sandbox listens (an environment server, an MCP server over HTTP): what is wrong, as
// `bad` says it, or OK. `required`: one of the two must be given.
absl::Status CheckListener(uint32_t port, const std::string& unix_socket, v1::NetworkPolicy network, bool required,
                           const std::function<absl::Status(const std::string&)>& bad) {
  if (port != 0 && !unix_socket.empty()) return bad("port or unix_socket: not both (where the server listens)");
  if (required && port == 0 && unix_socket.empty()) {
    return bad("port or unix_socket: exactly one is required (where the server listens)");
  }
  if (port > 65535) return bad("port must be 1-65535");
  if (port != 0 && network != v1::NETWORK_POLICY_NONE) {
    return bad(
        "port needs environment.network_policy NONE (the sandbox's own network, where a server may listen); "
        "use unix_socket with other policies");
  }
  if (unix_socket.size() > 100 || absl::StrContains(unix_socket, '\0')) {
    return bad("unix_socket must be a path of at most 100 bytes");
  }
  return absl::OkStatus();
}

// A path a relay writes into a request line: empty (the default), or '/' then printable ASCII, no space.
absl::Status CheckRequestPath(const std::string& name, const std::string& path,
                              const std::function<absl::Status(const std::string&)>& bad) {
  if (path.empty()) return absl::OkStatus();
  if (path.size() <= 256 && path[0] == '/' && absl::c_all_of(path, [](char c) { return c > ' ' && c < 0x7f; })) {
    return absl::OkStatus();
  }
  return bad(absl::StrCat(name, " must begin with '/' and hold printable ASCII without spaces (at most 256 bytes)"));
}

// The environment server's spec: what is wrong, named by field, or OK.
absl::Status CheckEnvServerSpec(const v1::EnvServerSpec& spec, v1::NetworkPolicy network) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("env_server.", what)); };
  if (spec.command().argv().empty()) return bad("command.argv is required: the command that starts the server");
  if (absl::Status s = CheckListener(spec.port(), spec.unix_socket(), network, /*required=*/true, bad); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRequestPath("health_path", spec.health_path(), bad); !s.ok()) return s;
  if (absl::Status s = CheckRequestPath("ws_path", spec.ws_path(), bad); !s.ok()) return s;
  if (!v1::EnvTransport_IsValid(spec.transport())) return bad("transport is not a known value");
  boost::system::error_code ec;
  if (!spec.action_template().empty()) {
    boost::json::parse(spec.action_template(), ec);
    if (ec) return bad("action_template must be JSON (a value with \"{{text}}\", \"{{tool}}\" or \"{{arguments}}\")");
  }
  if (!spec.tools_json().empty()) {
    boost::json::value tools = boost::json::parse(spec.tools_json(), ec);
    if (ec || !tools.is_array()) return bad("tools_json must be a JSON array of OpenAI tool definitions");
  }
  if (spec.action_format() == v1::ACTION_FORMAT_TOOL_CALL && spec.tools_json().empty()) {
    return bad("tools_json is required with action_format TOOL_CALL (the actions the model may call)");
  }
  if (!spec.reset_json().empty()) {
    boost::json::value extra = boost::json::parse(spec.reset_json(), ec);
    if (ec || !extra.is_object()) return bad("reset_json must be a JSON object");
  }
  if (!v1::ObservationFormat_IsValid(spec.observation_format()) || !v1::ActionFormat_IsValid(spec.action_format()) ||
      !v1::EnvRewardMode_IsValid(spec.reward_mode())) {
    return bad("observation_format, action_format or reward_mode is not a known value");
  }
  return absl::OkStatus();
}

absl::Status CheckMcpServers(const v1::Task& task) {
  const auto& servers = task.mcp_servers();
  if (servers.empty()) return absl::OkStatus();
  if (task.runner() != v1::RUNNER_TOOL_LOOP && task.runner() != v1::RUNNER_AGENT) {
    return Bad(task, "mcp_servers are for the tool_loop and agent runners");
  }
  if (servers.size() > 8) return Bad(task, "mcp_servers: at most 8");
  std::set<std::string> names;
  for (int i = 0; i < servers.size(); ++i) {
    const v1::McpServerSpec& m = servers[i];
    const std::string field = absl::StrCat("mcp_servers[", i, "]");
    if (m.name().empty() || m.name().size() > 24 || !IsFunctionName(m.name())) {
      return Bad(task, absl::StrCat(field, ".name must be 1-24 characters of [A-Za-z0-9_-]"));
    }
    if (!names.insert(m.name()).second) return Bad(task, absl::StrCat(field, ".name '", m.name(), "' is used twice"));
    if (m.command().argv().empty()) return Bad(task, absl::StrCat(field, ".command.argv is required"));
    if (absl::Status s = CheckCommand(Who(task), field + ".command", m.command()); !s.ok()) return s;
    auto bad = [&](const std::string& what) { return Bad(task, absl::StrCat(field, ".", what)); };
    if (absl::Status s = CheckListener(m.port(), m.unix_socket(), NetworkOf(task), /*required=*/false, bad); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckRequestPath("path", m.path(), bad); !s.ok()) return s;
    if (!m.path().empty() && m.port() == 0 && m.unix_socket().empty()) {
      return bad("path is the endpoint of a server over HTTP: give its port or unix_socket");
    }
    for (int j = 0; j < m.tools_size(); ++j) {
      if (m.tools(j).empty() || m.tools(j).size() > 128) {
        return Bad(task, absl::StrCat(field, ".tools[", j, "] must be a tool name"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckReward(const v1::Task& task) {
  const v1::RewardSpec& r = task.reward();
  switch (r.function()) {
    case v1::REWARD_FUNCTION_VERIFIER:
      if (!task.has_verifier()) return Bad(task, "verifier is required for the VERIFIER reward");
      return absl::OkStatus();
    case v1::REWARD_FUNCTION_REGEX: {
      if (r.pattern().empty()) return Bad(task, "reward.pattern is required for the REGEX reward");
      RE2 re(r.pattern(), RE2::Quiet);
      if (!re.ok()) return Bad(task, absl::StrCat("reward.pattern does not compile: ", re.error()));
      break;
    }
    case v1::REWARD_FUNCTION_NUMERIC:
    case v1::REWARD_FUNCTION_GSM8K: {
      double x;
      std::string answer(absl::StripAsciiWhitespace(task.answer()));
      answer.erase(std::remove_if(answer.begin(), answer.end(), [](char c) { return c == ',' || c == '$'; }),
                   answer.end());
      if (!absl::SimpleAtod(answer, &x)) return Bad(task, "answer must be a number for the NUMERIC and GSM8K rewards");
      break;
    }
    default: break;
  }
  if (r.tolerance() < 0) return Bad(task, "reward.tolerance must not be negative");
  return absl::OkStatus();
}

absl::Status CheckTimeouts(const v1::Task& task) {
  const v1::PhaseTimeouts& t = task.timeouts();
  const std::pair<const char*, const pb::Duration*> all[] = {{"acquire", &t.acquire()},   {"setup", &t.setup()},
                                                             {"agent", &t.agent()},       {"tool", &t.tool()},
                                                             {"verifier", &t.verifier()}, {"episode", &t.episode()}};
  for (const auto& [name, d] : all) {
    if (FromProto(*d) < absl::ZeroDuration())
      return Bad(task, absl::StrCat("timeouts.", name, " must not be negative"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSpec(const v1::BatchSpec& spec, absl::Time now, const SubmitLimits& limits) {
  if (!spec.batch_id().empty()) {
    if (!IsValidId(spec.batch_id()) || spec.batch_id().size() > kMaxBatchIdLength) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.batch_id must be 1-", kMaxBatchIdLength, " characters of [A-Za-z0-9_:-]"));
    }
  }
  const int64_t group = std::max<uint32_t>(spec.group_size(), 1);
  if (group + spec.redundancy() > limits.max_group_size) {
    return absl::InvalidArgumentError(absl::StrCat("spec.group_size + spec.redundancy is ", group + spec.redundancy(),
                                                   "; at most ", limits.max_group_size, " (max_group_size)"));
  }
  if (spec.max_attempts() > 100) return absl::InvalidArgumentError("spec.max_attempts must be at most 100");
  CORRAL_RETURN_IF_ERROR(ValidateLabels("spec.labels", spec.labels()));
  if (!spec.tenant().empty() && !IsValidLabelKey(spec.tenant())) {
    return absl::InvalidArgumentError("spec.tenant must be 1-63 characters of [a-z0-9_./-]");
  }
  if (spec.has_deadline() && FromProto(spec.deadline()) <= now) {
    return absl::InvalidArgumentError("spec.deadline is in the past");
  }
  return ValidateAsyncSpec(spec);
}

absl::Status ValidateAsyncSpec(const v1::BatchSpec& spec) {
  if (spec.has_max_staleness() && spec.max_staleness() > 1'000'000) {
    return absl::InvalidArgumentError("spec.max_staleness must be at most 1000000");
  }
  if (spec.step_groups() > 0 && !spec.has_max_staleness()) {
    return absl::InvalidArgumentError("spec.step_groups needs spec.max_staleness (it is the staleness admission rule)");
  }
  if (spec.max_groups() > 0 && spec.target_groups() == 0) {
    return absl::InvalidArgumentError("spec.max_groups needs spec.target_groups (it is dynamic sampling's budget)");
  }
  if (spec.max_groups() > 0 && spec.max_groups() < spec.target_groups()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.max_groups (", spec.max_groups(), ") must be at least spec.target_groups (", spec.target_groups(), ")"));
  }
  if (spec.groups_in_flight() > 0 && spec.target_groups() > 0) {
    return absl::InvalidArgumentError("spec.groups_in_flight (a stream) and spec.target_groups cannot be combined");
  }
  if (!v1::GroupFailurePolicy_IsValid(spec.group_failure_policy())) {
    return absl::InvalidArgumentError("spec.group_failure_policy is not a known policy");
  }
  const v1::GroupFilter& f = spec.group_filter();
  for (const auto& [name, set, value] :
       {std::tuple("min_reward_std", f.has_min_reward_std(), f.min_reward_std()),
        std::tuple("max_reward_std", f.has_max_reward_std(), f.max_reward_std()),
        std::tuple("min_mean_reward", f.has_min_mean_reward(), f.min_mean_reward()),
        std::tuple("max_mean_reward", f.has_max_mean_reward(), f.max_mean_reward()),
        std::tuple("min_reward_range", f.has_min_reward_range(), f.min_reward_range())}) {
    if (set && !std::isfinite(value)) {
      return absl::InvalidArgumentError(absl::StrCat("spec.group_filter.", name, " must be a finite number"));
    }
  }
  if (f.has_min_reward_std() && f.has_max_reward_std() && f.min_reward_std() > f.max_reward_std()) {
    return absl::InvalidArgumentError("spec.group_filter: min_reward_std is above max_reward_std");
  }
  if (f.has_min_mean_reward() && f.has_max_mean_reward() && f.min_mean_reward() > f.max_mean_reward()) {
    return absl::InvalidArgumentError("spec.group_filter: min_mean_reward is above max_mean_reward");
  }
  return absl::OkStatus();
}

v1::BatchSpec WithDefaults(v1::BatchSpec spec, const SubmitLimits& limits, uint64_t random_seed) {
  if (spec.group_size() == 0) spec.set_group_size(1);
  if (spec.max_attempts() == 0) spec.set_max_attempts(static_cast<uint32_t>(limits.default_max_attempts));
  if (!spec.has_seed()) spec.set_seed(random_seed);
  if (spec.tenant().empty()) spec.set_tenant("default");
  return spec;
}

absl::Status CheckEnvironment(const v1::EnvironmentSpec& env) {
  if (absl::Status s = CheckFiles("", "environment.setup_files", env.setup_files()); !s.ok()) return s;
  if (absl::Status s = CheckFiles("", "environment.files", env.files()); !s.ok()) return s;
  for (int i = 0; i < env.setup_commands_size(); ++i) {
    if (absl::Status s = CheckCommand("", absl::StrCat("environment.setup_commands[", i, "]"), env.setup_commands(i));
        !s.ok()) {
      return s;
    }
  }
  for (const auto& [k, v] : env.env()) {
    if (!IsValidEnvName(k)) return Bad("", absl::StrCat("environment.env: '", k, "' is not a variable name"));
  }
  for (const auto& p : env.task_paths()) {
    if (p.empty() || p[0] != '/' || p == "/") return Bad("", "environment.task_paths must be absolute paths below /");
  }
  if (!env.image().empty()) {
    if (env.image().size() > 512 || absl::c_any_of(env.image(), [](char c) { return c <= ' ' || c == 0x7f; })) {
      return Bad("", "environment.image must be an image name or digest (no spaces, at most 512 characters)");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Task> EffectiveTask(const v1::Task& submitted, const v1::TaskOverrides& overrides,
                                       v1::Runner default_runner) {
  v1::Task task = submitted;
  OverrideMerge(overrides, &task);
  if (!IsValidId(task.id())) return Bad(task, "id must be 1-128 characters of [A-Za-z0-9_:-]");
  if (task.runner() == v1::RUNNER_UNSPECIFIED) task.set_runner(default_runner);
  if (!task.prompt().empty() && !task.messages().empty())
    return Bad(task, "exactly one of prompt and messages is required (the environment runner: at most one)");
  // An environment's first observation may be the whole prompt.
  if (task.prompt().empty() && task.messages().empty() && task.runner() != v1::RUNNER_ENVIRONMENT) {
    return Bad(task, "exactly one of prompt and messages is required (the environment runner: at most one)");
  }
  for (int i = 0; i < task.messages_size(); ++i) {
    const std::string& role = task.messages(i).role();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool") {
      return Bad(task, absl::StrCat("messages[", i, "].role must be system, developer, user, assistant or tool"));
    }
  }
  if (!v1::Runner_IsValid(task.runner())) return Bad(task, "runner is not a known runner");
  if (!task.llm().params_json().empty()) {
    if (!IsJsonObject(task.llm().params_json())) return Bad(task, "llm.params_json must be a JSON object");
    boost::json::object params = boost::json::parse(task.llm().params_json()).as_object();
    for (const char* reserved : {"messages", "prompt", "tools", "stream"}) {
      if (params.contains(reserved))
        return Bad(task, absl::StrCat("llm.params_json must not set '", reserved, "' (the runner does)"));
    }
  }
  if (!task.metadata_json().empty() && !IsJsonObject(task.metadata_json())) {
    return Bad(task, "metadata_json must be a JSON object");
  }
  if (absl::Status s = CheckTimeouts(task); !s.ok()) return s;
  if (absl::Status s = CheckEnvironment(task.environment()); !s.ok()) return Bad(task, s.message());
  if (absl::Status s = CheckFiles(Who(task), "verifier.files", task.verifier().files()); !s.ok()) return s;
  switch (task.runner()) {
    case v1::RUNNER_SINGLE_TURN:
      if (absl::Status s = CheckReward(task); !s.ok()) return s;
      break;
    case v1::RUNNER_TOOL_LOOP:
      if (absl::Status s = CheckTools(task); !s.ok()) return s;
      if (absl::Status s = CheckReward(task); !s.ok()) return s;
      break;
    case v1::RUNNER_AGENT:
      if (absl::Status s = CheckAgent(task); !s.ok()) return s;
      if (!task.has_verifier()) return Bad(task, "verifier is required for the agent runner");
      break;
    case v1::RUNNER_ENVIRONMENT: {
      if (!task.has_env_server()) return Bad(task, "env_server is required for the environment runner");
      if (absl::Status s = CheckEnvServerSpec(task.env_server(), NetworkOf(task)); !s.ok()) {
        return Bad(task, s.message());
      }
      if (absl::Status s = CheckCommand(Who(task), "env_server.command", task.env_server().command()); !s.ok())
        return s;
      if (task.reward().function() != v1::REWARD_FUNCTION_UNSPECIFIED) {
        if (absl::Status s = CheckReward(task); !s.ok()) return s;
      }
      break;
    }
    default: return Bad(task, "runner is not a known runner");
  }
  if (absl::Status s = CheckMcpServers(task); !s.ok()) return s;
  if (task.has_verifier() && !task.verifier().command().argv().empty()) {
    if (absl::Status s = CheckCommand(Who(task), "verifier.command", task.verifier().command()); !s.ok()) return s;
  }
  return task;
}

}  // namespace corral::scheduler
