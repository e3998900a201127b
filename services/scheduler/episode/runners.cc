// The runners. Coroutines here compute every co_await argument into a local first: GCC 12 double-destroys
// conditional temporaries in co_await expressions. JSON is built in chat.cc (plain functions) for the same reason.
#include "services/scheduler/episode/runners.h"

#include <algorithm>
#include <atomic>
#include <variant>

#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/async_result.hpp"
#include "boost/asio/experimental/awaitable_operators.hpp"
#include "boost/asio/experimental/concurrent_channel.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"
#include "libs/harness/harnesses.h"
#include "services/scheduler/episode/branching.h"
#include "services/scheduler/episode/chat.h"
#include "services/scheduler/episode/episode_calls.h"
#include "services/scheduler/episode/mcp_tools.h"
#include "services/scheduler/episode/persistent_tools.h"
#include "services/scheduler/episode/verifier.h"

namespace corral::scheduler {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// CORRAL_INSTRUCTION carries the instruction's text up to this size (one argument may hold 128 KiB on Linux).
constexpr size_t kInstructionInEnvMax = 32 * 1024;

}  // namespace

namespace {

std::vector<std::string> Interpreter(const std::string& language) {
  if (language.empty() || language == "python" || language == "python3") return {"python3", "-c"};
  if (language == "node" || language == "javascript" || language == "js") return {"node", "-e"};
  if (language == "ruby" || language == "perl") return {language, "-e"};
  return {language, "-c"};
}

std::string ExitNote(const sandbox::ExecOutcome& out, absl::Duration timeout) {
  if (out.exit.timed_out()) {
    return absl::StrCat("\n[the command timed out after ", absl::FormatDuration(timeout), " and was killed]");
  }
  if (out.exit.signal() != 0) return absl::StrCat("\n[killed by signal ", out.exit.signal(), "]");
  if (out.exit.exit_code() != 0) return absl::StrCat("\n[exit code ", out.exit.exit_code(), "]");
  return "";
}

// The read_file and write_file tools: the host's ReadFile and WriteFile of the sandbox, by `deadline`.
asio::awaitable<std::variant<std::string, Failure>> FileTool(Attempt& a, const v1::ToolSpec& spec,
                                                             const json::object& args, absl::Time deadline,
                                                             size_t limit) {
  using Out = std::variant<std::string, Failure>;
  if (spec.kind() == v1::TOOL_KIND_READ_FILE) {
    const std::string path = StringArg(args, "path");
    if (path.empty()) co_return Out(std::string("error: the argument 'path' is required"));
    auto data = co_await a.slot->client->ReadFile(a.sandbox_id, path, limit * 4, a.Call(deadline));
    if (!data.ok()) {
      if (data.status().code() == absl::StatusCode::kUnavailable) {
        co_return Out(a.FromStatus(data.status(), v1::EPISODE_PHASE_TOOL, v1::FAILURE_CLASS_INFRA, "read_file"));
      }
      co_return Out(absl::StrCat("error: ", data.status().message()));
    }
    if (!data->has_value()) co_return Out(absl::StrCat("error: no such file: ", path));
    sandbox::OutputTail text(limit);
    text.Append(**data);
    co_return Out(text.Text());
  }
  v1::InlineFile file;
  file.set_path(StringArg(args, "path"));
  file.set_content(StringArg(args, "content"));
  if (file.path().empty()) co_return Out(std::string("error: the argument 'path' is required"));
  absl::Status s = co_await a.slot->client->WriteFile(a.sandbox_id, file, a.Call(deadline));
  if (s.code() == absl::StatusCode::kUnavailable) {
    co_return Out(a.FromStatus(s, v1::EPISODE_PHASE_TOOL, v1::FAILURE_CLASS_INFRA, "write_file"));
  }
  co_return Out(s.ok() ? absl::StrCat("wrote ", file.content().size(), " bytes to ", file.path())
                       : absl::StrCat("error: ", s.message()));
}

// Executes one tool call; what it returns is the tool message's content (errors included: they are for the
// model). An infra failure (the sandbox is gone, the limiter refuses) ends the episode instead.
asio::awaitable<std::variant<std::string, Failure>> RunTool(Attempt& a, const v1::ToolSpec& spec,
                                                            const std::string& arguments) {
  using Out = std::variant<std::string, Failure>;
  const PhaseScope phase(a.control(), RunPhase::kTool);
  auto args = ParseArguments(arguments);
  if (!args.ok()) co_return Out(absl::StrCat("error: ", args.status().message(), ": ", arguments.substr(0, 200)));
  const absl::Duration timeout = a.Timeout(a.task().timeouts().tool(), a.options->timeouts.tool);
  const size_t limit =
      a.task().tool_loop().max_tool_output_bytes() == 0 ? 16 * 1024 : a.task().tool_loop().max_tool_output_bytes();
  const std::string language = spec.kind() == v1::TOOL_KIND_CODE_INTERPRETER
                                   ? (spec.language().empty() ? "python" : spec.language())
                                   : (spec.kind() == v1::TOOL_KIND_BASH ? "bash" : "");
  v1::Command command;
  std::string stdin_data;
  switch (spec.kind()) {
    case v1::TOOL_KIND_CODE_INTERPRETER:
    case v1::TOOL_KIND_BASH: {
      const char* field = spec.kind() == v1::TOOL_KIND_BASH ? "command" : "code";
      const std::string code = StringArg(*args, field);
      if (code.empty()) co_return Out(absl::StrCat("error: the argument '", field, "' is required"));
      if (spec.persistent()) {
        auto permit = co_await TakePermit(a, a.options->tool_limit, language, timeout);
        if (!permit.ok() && permit.status().code() == absl::StatusCode::kDeadlineExceeded) {
          co_return Out(absl::StrCat("error: no execution slot became free within ", absl::FormatDuration(timeout)));
        }
        if (!permit.ok()) {
          co_return Out(a.FromStatus(permit.status(), v1::EPISODE_PHASE_TOOL, v1::FAILURE_CLASS_INFRA,
                                     absl::StrCat("permit ", a.options->tool_limit, "/", language)));
        }
        const absl::Time started = a.clock->Now();
        auto result = co_await RunPersistent(a, spec, code, timeout, limit);
        permit->Release();
        a.ToolRan(spec.name(), a.clock->Now() - started);
        co_return result;
      }
      std::vector<std::string> argv = Interpreter(language);
      for (const auto& arg : argv) command.add_argv(arg);
      command.add_argv(code);
      break;
    }
    case v1::TOOL_KIND_COMMAND:
      command = spec.command();
      stdin_data = arguments;
      break;
    case v1::TOOL_KIND_READ_FILE:
    case v1::TOOL_KIND_WRITE_FILE: {
      const absl::Time started = a.clock->Now();
      Out out = co_await FileTool(a, spec, *args, std::min(started + timeout, a.EpisodeDeadline()), limit);
      a.ToolRan(spec.name(), a.clock->Now() - started);
      co_return out;
    }
    default: co_return Out(std::string("error: unknown tool kind"));
  }
  const std::string key = spec.kind() == v1::TOOL_KIND_COMMAND ? "command" : language;
  auto permit = co_await TakePermit(a, a.options->tool_limit, key, timeout);
  if (!permit.ok()) {
    if (permit.status().code() == absl::StatusCode::kDeadlineExceeded) {
      co_return Out(absl::StrCat("error: no execution slot became free within ", absl::FormatDuration(timeout)));
    }
    co_return Out(a.FromStatus(permit.status(), v1::EPISODE_PHASE_TOOL, v1::FAILURE_CLASS_INFRA,
                               absl::StrCat("permit ", a.options->tool_limit, "/", key)));
  }
  const absl::Time started = a.clock->Now();
  auto out = co_await Exec(a, std::move(command), std::move(stdin_data), timeout, limit);
  permit->Release();  // held for exactly the execution
  a.ToolRan(spec.name(), a.clock->Now() - started);
  if (!out.ok()) {
    if (out.status().code() == absl::StatusCode::kInvalidArgument ||
        (out.status().code() == absl::StatusCode::kNotFound && !a.control()->stopped())) {
      co_return Out(absl::StrCat("error: ", out.status().message()));
    }
    co_return Out(a.FromStatus(out.status(), v1::EPISODE_PHASE_TOOL, v1::FAILURE_CLASS_INFRA, spec.name()));
  }
  a.output.Append(out->tail);
  co_return Out(out->output + ExitNote(*out, timeout));
}

}  // namespace

asio::awaitable<std::optional<Failure>> RunSingleTurn(Attempt& a) {
  const json::array messages = InitialMessages(a.task());
  const json::array no_tools;
  ChatOutcome out = co_await Chat(a, messages, no_tools);
  if (out.failure) co_return out.failure;
  if (out.reply) a.final_message = out.reply->content;
  co_return co_await Reward(a);
}

asio::awaitable<std::optional<Failure>> RunToolLoop(Attempt& a) {
  // A branch (Task.branch) takes up its parent's conversation at the turn it samples anew.
  json::array messages = a.branching.resume ? a.branching.resume->messages : InitialMessages(a.task());
  json::array tools = ToolsJson(a.task());
  if (!a.task().mcp_servers().empty()) {
    if (auto f = co_await StartMcpServers(a, tools)) co_return f;
  }
  const int64_t max_turns =
      a.task().tool_loop().max_turns() == 0 ? a.options->default_max_turns : a.task().tool_loop().max_turns();
  for (int64_t turn = a.branching.resume ? a.branching.resume->turn : 0; turn < max_turns; ++turn) {
    ChatOutcome out = co_await Chat(a, messages, tools);
    if (out.failure) co_return out.failure;
    if (out.budget_exhausted) break;
    if (a.ticket.branch_plan) {
      const bool last = out.reply->tool_calls.empty() || turn + 1 >= max_turns;
      co_await SplitIfDue(a, messages, turn, last);
    }
    messages.push_back(out.reply->message);
    a.final_message = out.reply->content;
    if (out.reply->tool_calls.empty()) break;
    for (const ToolCallRequest& call : out.reply->tool_calls) {
      const v1::ToolSpec* spec = nullptr;
      for (const auto& t : a.task().tool_loop().tools()) {
        if (t.name() == call.name) spec = &t;
      }
      std::string content;
      if (spec != nullptr) {
        a.result.set_tool_calls(a.result.tool_calls() + 1);
        auto ran = co_await RunTool(a, *spec, call.arguments);
        if (auto* f = std::get_if<Failure>(&ran)) co_return *f;
        content = std::get<std::string>(std::move(ran));
      } else if (a.mcp.tools.contains(call.name)) {
        a.result.set_tool_calls(a.result.tool_calls() + 1);
        auto ran = co_await CallMcpTool(a, call.name, call.arguments);
        if (auto* f = std::get_if<Failure>(&ran)) co_return *f;
        content = std::get<std::string>(std::move(ran));
      } else {
        content = absl::StrCat("error: there is no tool named '", call.name, "'");
      }
      messages.push_back(ToolMessage(call.id, content));
    }
    if (a.clock->Now() >= a.AgentDeadline()) {
      co_return a.FromStatus(absl::DeadlineExceededError("the conversation ran past its timeout"),
                             v1::EPISODE_PHASE_AGENT, v1::FAILURE_CLASS_AGENT, "conversation");
    }
  }
  co_return co_await Reward(a);
}

asio::awaitable<std::optional<Failure>> RunAgent(Attempt& a) {
  const v1::Task& task = a.task();
  const absl::Duration timeout = a.Timeout(task.timeouts().agent(), a.options->timeouts.agent);
  v1::Command command = task.agent().command();
  command.clear_timeout();
  if (auto harness = ResolveHarness(task.agent().harness()); !task.agent().harness().empty() && harness.ok()) {
    for (std::string& arg : HarnessArgv(*harness)) command.add_argv(std::move(arg));
    a.result.set_harness(harness->id());
  }
  auto& env = *command.mutable_env();
  env["OPENAI_BASE_URL"] = a.session.base_url();
  env["OPENAI_API_KEY"] = a.session.env_token();
  env["OPENAI_MODEL"] = ModelOf(a);
  env["CORRAL_SEED"] = absl::StrCat(a.ticket.ids.seed());
  env["CORRAL_TASK_ID"] = task.id();
  // Absolute: the agent's working directory is /workspace (or the image's), not the home the path is under.
  env["CORRAL_INSTRUCTION_FILE"] = a.InSandbox(InstructionPath(task));
  // Most harnesses take the prompt on their command line: the text itself too, when an argument can hold it.
  if (task.prompt().size() <= kInstructionInEnvMax && task.prompt().find('\0') == std::string::npos) {
    env["CORRAL_INSTRUCTION"] = task.prompt();
  }
  if (!task.mcp_servers().empty()) {  // the agent starts them itself, from the configuration it is pointed at
    std::vector<v1::InlineFile> config(1);
    config[0].set_path(".corral/mcp.json");
    config[0].set_content(McpConfigJson(task, a.home));
    const absl::Time deadline = a.Deadline(task.timeouts().setup(), a.options->timeouts.setup);
    if (auto f = co_await Upload(a, config, deadline, v1::EPISODE_PHASE_SETUP)) co_return f;
    env["CORRAL_MCP_CONFIG"] = a.InSandbox(".corral/mcp.json");
  }
  const absl::Time started = a.clock->Now();
  absl::StatusOr<sandbox::ExecOutcome> out;
  if (a.pauses == nullptr) {
    out = co_await Exec(a, std::move(command), "", timeout, 4096);
  } else {
    // Paused time does not count: the scheduler keeps the agent's time and stops it once the agent phase's
    // deadline (later by every pause) has passed; stopping cancels the exec, and the host kills the process.
    using namespace asio::experimental::awaitable_operators;
    auto raced =
        co_await (Exec(a, std::move(command), "", a.AgentDeadline() - started, 4096, false) || StopAtAgentDeadline(a));
    if (raced.index() == 1) {
      const absl::Duration paused = a.PausedSince(started);
      const bool episode = a.AgentDeadline() >= a.EpisodeDeadline();
      ToProto(a.clock->Now() - started, a.result.mutable_timings()->mutable_agent());
      co_return Failure{
          v1::EPISODE_STATUS_TIMEOUT, v1::FAILURE_CLASS_AGENT,
          episode ? v1::EPISODE_PHASE_EPISODE : v1::EPISODE_PHASE_AGENT,
          absl::StrCat("the agent ran past its ", episode ? "episode timeout" : "timeout", " (",
                       absl::FormatDuration(episode ? a.EpisodeDeadline() - a.start - a.PausedSince(a.start) : timeout),
                       paused > absl::ZeroDuration()
                           ? absl::StrCat(", not counting ", absl::FormatDuration(paused), " paused")
                           : "",
                       ") and was killed")};
    }
    out = std::get<0>(std::move(raced));
  }
  ToProto(a.clock->Now() - started, a.result.mutable_timings()->mutable_agent());
  if (!out.ok()) {
    const bool start_failed = out.status().code() == absl::StatusCode::kNotFound ||
                              out.status().code() == absl::StatusCode::kInvalidArgument ||
                              out.status().code() == absl::StatusCode::kFailedPrecondition;
    co_return a.FromStatus(out.status(), v1::EPISODE_PHASE_AGENT,
                           start_failed ? v1::FAILURE_CLASS_AGENT : v1::FAILURE_CLASS_INFRA, "agent");
  }
  a.result.set_agent_output_tail(out->tail);
  if (out->exit.timed_out()) {
    co_return Failure{
        v1::EPISODE_STATUS_TIMEOUT, v1::FAILURE_CLASS_AGENT, v1::EPISODE_PHASE_AGENT,
        absl::StrCat("the agent ran past its timeout (", absl::FormatDuration(timeout), ") and was killed")};
  }
  if (out->exit.signal() == 0) a.result.set_agent_exit_code(out->exit.exit_code());
  // The verifier decides, whatever the agent's exit code.
  co_return co_await RunVerifier(a);
}

}  // namespace corral::scheduler
