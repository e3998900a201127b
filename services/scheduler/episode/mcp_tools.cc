#include "services/scheduler/episode/mcp_tools.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "services/scheduler/episode/chat.h"
#include "services/scheduler/episode/episode_calls.h"
#include "services/scheduler/episode/resident_process.h"

namespace corral::scheduler {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

constexpr char kProtocolVersion[] = "2025-06-18";
// Starting a server and its first answers (node servers load for a second or two).
constexpr absl::Duration kStartTimeout = absl::Seconds(60);

std::string Key(const std::string& server) { return absl::StrCat("mcp:", server); }

std::string LogOf(const v1::McpServerSpec& spec) { return absl::StrCat(".corral/mcp-", spec.name(), ".log"); }

bool OverHttp(const v1::McpServerSpec& spec) { return spec.port() != 0 || !spec.unix_socket().empty(); }

// What runs for a server over HTTP: the relay (scripts/mcp_http.py) that starts it and speaks streamable HTTP
// to it, to the scheduler as a stdio server would.
v1::Command HttpRelay(const v1::McpServerSpec& spec, const std::string& home) {
  return RelayCommand("mcp_http.py", spec.command(), spec.port(), UnderHome(home, spec.unix_socket()),
                      UnderHome(home, LogOf(spec)),
                      json::object{{"path", spec.path().empty() ? "/mcp" : spec.path()},
                                   {"ready_timeout", absl::ToInt64Seconds(kStartTimeout)}});
}

const v1::McpServerSpec* SpecOf(const Attempt& a, const std::string& server) {
  for (const auto& m : a.task().mcp_servers()) {
    if (m.name() == server) return &m;
  }
  return nullptr;
}

// The answer to request `id`: its "result" or "error" object, nullopt when the server ended or `deadline`
// passed first. Notifications and the server's own requests are answered or skipped on the way.
struct RpcAnswer {
  std::optional<json::object> message;
  bool ended = false;
  std::string noise;  // what came that was not JSON-RPC (for the error message)
};

asio::awaitable<RpcAnswer> ReadAnswer(sandbox::InteractiveProcess& p, int64_t id, absl::Time deadline) {
  RpcAnswer out;
  while (true) {
    sandbox::InteractiveProcess::Output line = co_await p.ReadUntil("\n", deadline);
    if (!line.marked) {
      out.ended = line.ended;
      if (out.noise.empty()) out.noise = line.text.substr(0, 300);
      co_return out;
    }
    boost::system::error_code ec;
    json::value v = json::parse(line.text, ec);
    if (ec || !v.is_object()) {
      if (out.noise.size() < 300) absl::StrAppend(&out.noise, line.text.substr(0, 300), "\n");
      continue;
    }
    json::object& o = v.as_object();
    const json::value* msg_id = o.if_contains("id");
    if (o.contains("method")) {
      if (msg_id != nullptr) {  // a request of the server's (ping, roots/list, sampling): none is offered
        json::object reply;
        reply["jsonrpc"] = "2.0";
        reply["id"] = *msg_id;
        if (o.at("method") == "ping") {
          reply["result"] = json::object();
        } else {
          reply["error"] = json::object{{"code", -32601}, {"message", "not supported by this client"}};
        }
        p.Write(json::serialize(reply) + "\n");
      }
      continue;
    }
    if (msg_id != nullptr && msg_id->is_int64() && msg_id->as_int64() == id) {
      out.message = std::move(o);
      co_return out;
    }
  }
}

// Sends request `method` and waits for its answer.
asio::awaitable<RpcAnswer> Request(Attempt& a, sandbox::InteractiveProcess& p, const std::string& method,
                                   json::object params, absl::Time deadline) {
  const int64_t id = a.mcp.next_id++;
  json::object request;
  request["jsonrpc"] = "2.0";
  request["id"] = id;
  request["method"] = method;
  request["params"] = std::move(params);
  p.Write(json::serialize(request) + "\n");
  co_return co_await ReadAnswer(p, id, deadline);
}

std::string ErrorText(const json::object& answer) {
  const json::value* error = answer.if_contains("error");
  if (error == nullptr) return "";
  if (error->is_object()) {
    if (const json::value* m = error->as_object().if_contains("message"); m != nullptr && m->is_string()) {
      return std::string(m->as_string());
    }
  }
  return json::serialize(*error);
}

// Starts server `spec` and runs the initialize handshake: the process, or a failure naming what went wrong.
asio::awaitable<std::variant<std::shared_ptr<sandbox::InteractiveProcess>, Failure>> StartServer(
    Attempt& a, const v1::McpServerSpec& spec) {
  using Out = std::variant<std::shared_ptr<sandbox::InteractiveProcess>, Failure>;
  const std::string what = absl::StrCat("MCP server '", spec.name(), "'");
  const absl::Time deadline = std::min(a.clock->Now() + kStartTimeout, a.EpisodeDeadline());
  ResidentSpec start;
  start.key = Key(spec.name());
  start.command = OverHttp(spec) ? HttpRelay(spec, a.home) : spec.command();
  // newline-delimited JSON-RPC (not `= "\n"`: GCC 12 reports a false stringop-overflow for it in a coroutine)
  start.marker = std::string(1, '\n');
  // stdout is the protocol's alone: stderr goes to the log. A branching task's stdio server is carried into
  // every branch with its state instead, which a process writing into the sandbox's files cannot be: its stderr
  // goes nowhere.
  const bool carried_along = a.ticket.branch_plan.has_value() && !OverHttp(spec);
  if (carried_along) {
    start.command.clear_argv();
    for (const char* arg : {"sh", "-c", "exec \"$@\" 2>/dev/null", "sh"}) start.command.add_argv(arg);
    for (const std::string& arg : spec.command().argv()) start.command.add_argv(arg);
    start.command.set_fork_ready(true);
  } else {
    start.stderr_log = LogOf(spec);
  }
  start.phase = v1::EPISODE_PHASE_ENVIRONMENT;
  start.what = what;
  start.cannot_start = OverHttp(spec) ? absl::StrCat(what,
                                                     " is reached over HTTP by a relay that needs python3 in "
                                                     "the sandbox: ")
                                      : absl::StrCat(what, " could not start: ");
  const std::string log = carried_along ? "its stderr is not kept: the server is carried into the branches"
                                        : absl::StrCat("its stderr is in ", a.InSandbox(start.stderr_log));
  auto started = co_await StartResident(a, start);
  if (auto* f = std::get_if<Failure>(&started)) co_return Out(*f);
  std::shared_ptr<sandbox::InteractiveProcess> p = std::get<ResidentProcesses::Entry>(std::move(started)).process;
  async::ScopedInterrupt interrupt(a.control(), [p] { p->Stop(); });
  json::object params;
  params["protocolVersion"] = kProtocolVersion;
  params["capabilities"] = json::object();
  params["clientInfo"] = json::object{{"name", "corral"}, {"version", "1"}};
  RpcAnswer init = co_await Request(a, *p, "initialize", std::move(params), deadline);
  if (!init.message || init.message->contains("error")) {
    a.residents.Stop(Key(spec.name()));
    if (a.control()->stopped()) {
      co_return Out(StoppedFailure(a, v1::EPISODE_PHASE_ENVIRONMENT, what));
    }
    std::string why = init.message ? absl::StrCat("initialize failed: ", ErrorText(*init.message))
                      : init.ended
                          ? "it exited during initialize"
                          : absl::StrCat("no answer to initialize within ", absl::FormatDuration(kStartTimeout));
    co_return Out(EnvironmentFailure(
        v1::FAILURE_CLASS_ENVIRONMENT,
        absl::StrCat(what, ": ", why, init.noise.empty() ? "" : "; it wrote: ", init.noise, " (", log, ")")));
  }
  json::object initialized;
  initialized["jsonrpc"] = "2.0";
  initialized["method"] = "notifications/initialized";
  p->Write(json::serialize(initialized) + "\n");
  co_return Out(p);
}

}  // namespace

std::string McpToolName(const std::string& server, const std::string& tool) {
  std::string name = absl::StrCat(server, "__", tool);
  for (char& c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') c = '_';
  }
  return name.substr(0, 64);
}

asio::awaitable<std::optional<Failure>> StartMcpServers(Attempt& a, json::array& tools) {
  for (const v1::McpServerSpec& spec : a.task().mcp_servers()) {
    std::shared_ptr<sandbox::InteractiveProcess> p;
    if (const ResidentProcesses::Entry* carried = a.residents.Find(Key(spec.name())); carried != nullptr) {
      p = carried->process;  // a branch's: its parent's server, carried here, initialized and with its state
    } else {
      auto started = co_await StartServer(a, spec);
      if (auto* f = std::get_if<Failure>(&started)) co_return *f;
      p = std::get<0>(std::move(started));
    }
    const std::string what = absl::StrCat("MCP server '", spec.name(), "': tools/list");
    const absl::Time deadline = std::min(a.clock->Now() + kStartTimeout, a.EpisodeDeadline());
    std::string cursor;
    for (int page = 0; page < 100; ++page) {
      json::object params;
      if (!cursor.empty()) params["cursor"] = cursor;
      RpcAnswer listed = co_await Request(a, *p, "tools/list", std::move(params), deadline);
      if (!listed.message)
        co_return EnvironmentFailure(v1::FAILURE_CLASS_ENVIRONMENT,
                                     absl::StrCat(what, ": ", listed.ended ? "the server exited" : "no answer"));
      const json::value* result = listed.message->if_contains("result");
      const json::value* list = result && result->is_object() ? result->as_object().if_contains("tools") : nullptr;
      if (list == nullptr || !list->is_array()) {
        co_return EnvironmentFailure(
            v1::FAILURE_CLASS_ENVIRONMENT,
            absl::StrCat(what, ": the answer has no result.tools array: ", ErrorText(*listed.message)));
      }
      for (const json::value& t : list->as_array()) {
        const json::value* name = t.is_object() ? t.as_object().if_contains("name") : nullptr;
        if (name == nullptr || !name->is_string() || name->as_string().empty()) {
          co_return EnvironmentFailure(
              v1::FAILURE_CLASS_ENVIRONMENT,
              absl::StrCat(what, ": a tool without a name: ", json::serialize(t).substr(0, 200)));
        }
        const std::string tool(name->as_string());
        if (!spec.tools().empty() && std::find(spec.tools().begin(), spec.tools().end(), tool) == spec.tools().end()) {
          continue;
        }
        const std::string offered = McpToolName(spec.name(), tool);
        a.mcp.tools[offered] = McpState::Tool{spec.name(), tool};
        json::object function;
        function["name"] = offered;
        const json::value* description = t.as_object().if_contains("description");
        function["description"] = description != nullptr && description->is_string() ? *description : json::value("");
        const json::value* schema = t.as_object().if_contains("inputSchema");
        function["parameters"] = schema != nullptr && schema->is_object()
                                     ? *schema
                                     : json::value(json::object{{"type", "object"}, {"properties", json::object()}});
        tools.push_back(json::object{{"type", "function"}, {"function", std::move(function)}});
      }
      const json::value* next = result->as_object().if_contains("nextCursor");
      if (next == nullptr || !next->is_string() || next->as_string().empty()) break;
      cursor = std::string(next->as_string());
    }
  }
  co_return std::nullopt;
}

asio::awaitable<std::variant<std::string, Failure>> CallMcpTool(Attempt& a, const std::string& name,
                                                                const std::string& arguments) {
  using Out = std::variant<std::string, Failure>;
  const PhaseScope phase(a.control(), RunPhase::kTool);
  const McpState::Tool target = a.mcp.tools.at(name);
  auto args = ParseArguments(arguments);
  if (!args.ok()) co_return Out(absl::StrCat("error: ", args.status().message(), ": ", arguments.substr(0, 200)));
  const absl::Duration timeout = a.Timeout(a.task().timeouts().tool(), a.options->timeouts.tool);
  const size_t limit =
      a.task().tool_loop().max_tool_output_bytes() == 0 ? 16 * 1024 : a.task().tool_loop().max_tool_output_bytes();
  auto permit = co_await TakePermit(a, a.options->tool_limit, "mcp", timeout);
  if (!permit.ok()) {
    if (permit.status().code() == absl::StatusCode::kDeadlineExceeded) {
      co_return Out(absl::StrCat("error: no execution slot became free within ", absl::FormatDuration(timeout)));
    }
    co_return Out(a.FromStatus(permit.status(), v1::EPISODE_PHASE_TOOL, v1::FAILURE_CLASS_INFRA, "permit for mcp"));
  }
  const absl::Time started = a.clock->Now();
  std::shared_ptr<sandbox::InteractiveProcess> p;
  if (const ResidentProcesses::Entry* found = a.residents.Find(Key(target.server)); found != nullptr) {
    p = found->process;
  } else {  // it exited after an earlier call: a new one
    auto restarted = co_await StartServer(a, *SpecOf(a, target.server));
    if (auto* f = std::get_if<Failure>(&restarted)) {
      if (f->failure_class == v1::FAILURE_CLASS_INFRA) co_return Out(*f);
      co_return Out(absl::StrCat("error: ", f->message));
    }
    p = std::get<0>(std::move(restarted));
  }
  async::ScopedInterrupt interrupt(a.control(), [p] { p->Stop(); });
  const int64_t id = a.mcp.next_id;
  json::object params;
  params["name"] = target.tool;
  params["arguments"] = *std::move(args);
  RpcAnswer answer =
      co_await Request(a, *p, "tools/call", std::move(params), std::min(started + timeout, a.EpisodeDeadline()));
  permit->Release();
  a.ToolRan(name, a.clock->Now() - started);
  if (a.control()->stopped()) {
    co_return Out(StoppedFailure(a, v1::EPISODE_PHASE_TOOL, name));
  }
  if (!answer.message) {
    if (answer.ended) {
      a.residents.Forget(Key(target.server));
      co_return Out(absl::StrCat("error: the MCP server '", target.server, "' exited; the next call starts it again"));
    }
    json::object cancel;
    cancel["jsonrpc"] = "2.0";
    cancel["method"] = "notifications/cancelled";
    cancel["params"] = json::object{{"requestId", id}, {"reason", "timed out"}};
    p->Write(json::serialize(cancel) + "\n");
    co_return Out(
        absl::StrCat("error: the call timed out after ", absl::FormatDuration(timeout), " and was cancelled"));
  }
  if (answer.message->contains("error")) co_return Out(absl::StrCat("error: ", ErrorText(*answer.message)));
  const json::value* result = answer.message->if_contains("result");
  std::string text;
  bool is_error = false;
  if (result != nullptr && result->is_object()) {
    const json::object& r = result->as_object();
    if (const json::value* e = r.if_contains("isError"); e != nullptr && e->is_bool()) is_error = e->as_bool();
    if (const json::value* content = r.if_contains("content"); content != nullptr && content->is_array()) {
      for (const json::value& item : content->as_array()) {
        if (!item.is_object()) continue;
        const json::object& c = item.as_object();
        const json::value* type = c.if_contains("type");
        if (!text.empty()) text += "\n";
        if (type != nullptr && *type == "text" && c.contains("text") && c.at("text").is_string()) {
          text += std::string(c.at("text").as_string());
        } else if (type != nullptr && *type == "resource" && c.contains("resource") && c.at("resource").is_object() &&
                   c.at("resource").as_object().contains("text")) {
          const json::value& body = c.at("resource").as_object().at("text");
          text += body.is_string() ? std::string(body.as_string()) : json::serialize(body);
        } else {
          text += absl::StrCat("[", type != nullptr && type->is_string() ? std::string(type->as_string()) : "content",
                               " content]");
        }
      }
    }
  }
  sandbox::OutputTail tail(limit);
  tail.Append(text);
  a.output.Append(text.size() > 1024 ? text.substr(text.size() - 1024) : text);
  co_return Out(is_error ? absl::StrCat("error: ", tail.Text()) : tail.Text());
}

std::string McpConfigJson(const v1::Task& task, const std::string& home) {
  json::object servers;
  for (const auto& m : task.mcp_servers()) {
    // A server over HTTP is given as its relay, a stdio server: every agent speaks stdio, and the relay starts it.
    const v1::Command command = OverHttp(m) ? HttpRelay(m, home) : m.command();
    json::object s;
    s["command"] = command.argv(0);
    json::array args;
    for (int i = 1; i < command.argv_size(); ++i) args.emplace_back(command.argv(i));
    s["args"] = std::move(args);
    json::object env;
    for (const auto& [k, v] : command.env()) env[k] = v;
    s["env"] = std::move(env);
    if (!command.cwd().empty()) s["cwd"] = command.cwd();
    servers[m.name()] = std::move(s);
  }
  json::object config;
  config["mcpServers"] = std::move(servers);
  return json::serialize(config);
}

}  // namespace corral::scheduler
