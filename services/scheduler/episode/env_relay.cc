#include "services/scheduler/episode/env_relay.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "services/scheduler/episode/persistent_tools.h"

namespace corral::scheduler {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

// The relay's key among the attempt's long-lived processes (tool names cannot hold ':').
constexpr char kRelayKey[] = "env:relay";

// One JSON request per stdin line; one JSON answer per request, followed by the marker line. The server is the
// relay's child (in its process group), so ending the relay's call ends both.
constexpr char kRelay[] = R"py(
import http.client, json, os, socket, subprocess, sys, time
cfg = json.loads(os.environ.pop("__CORRAL_ENV"))
mark = cfg["mark"]
log = open(cfg["log"], "ab", buffering=0)
env = dict(os.environ)
env.update(cfg["env"])
try:
    server = subprocess.Popen(cfg["argv"], cwd=cfg["cwd"] or None, env=env, stdin=subprocess.DEVNULL,
                              stdout=log, stderr=log)
    start_error = None
except OSError as e:
    server, start_error = None, str(e)

class Unix(http.client.HTTPConnection):
    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(cfg["socket"])
        self.sock = s

def tail():
    try:
        with open(cfg["log"], "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 2048))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""

def gone():
    if server is None:
        return {"error": "the server could not be started: " + start_error, "exited": True}
    code = server.poll()
    if code is None:
        return None
    how = "signal %d" % -code if code < 0 else "code %d" % code
    return {"error": "the server exited with " + how, "exited": True, "log": tail()}

def call(req):
    dead = gone()
    if dead:
        return dead
    timeout = max(0.05, req.get("timeout", 30))
    c = Unix("localhost", timeout=timeout) if cfg["socket"] else \
        http.client.HTTPConnection("127.0.0.1", cfg["port"], timeout=timeout)
    try:
        body = req.get("body")
        headers = {"Content-Type": "application/json"} if body is not None else {}
        c.request(req["method"], req["path"], body=None if body is None else body.encode(), headers=headers)
        r = c.getresponse()
        return {"status": r.status, "body": r.read().decode("utf-8", "replace")}
    except socket.timeout:
        return {"error": "no answer in time", "timed_out": True}
    except (OSError, http.client.HTTPException) as e:
        time.sleep(0.05)  # a crashing server: let it be reaped, so the answer says it exited
        return gone() or {"error": "%s %s: %s" % (req["method"], req["path"], e), "unreachable": True}
    finally:
        c.close()

def wait(req):
    end = time.monotonic() + req["timeout"]
    last = None
    while time.monotonic() < end:
        r = call({"method": "GET", "path": req["path"], "timeout": min(5, max(0.1, end - time.monotonic()))})
        if r.get("status") == 200 or r.get("exited"):
            return r
        last = r
        time.sleep(0.05)
    return {"error": "not ready: the last try got %s" % json.dumps(last), "timed_out": True, "log": tail()}

for line in sys.stdin:
    try:
        req = json.loads(line)
        out = wait(req) if req.get("wait") else call(req)
    except Exception as e:
        out = {"error": "relay: %r" % e}
    sys.stdout.write(json.dumps(out) + "\n" + mark + "\n")
    sys.stdout.flush()
if server:
    server.kill()
)py";

void StopRelay(Attempt& a) {
  auto it = a.tool_processes.find(kRelayKey);
  if (it == a.tool_processes.end()) return;
  it->second.process->Stop();
  a.tool_processes.erase(it);
}

// Writes `request` to the relay and reads its answer: the parsed JSON object, or an infra failure.
asio::awaitable<std::variant<json::object, Failure>> Exchange(Attempt& a, const json::object& request,
                                                              absl::Duration timeout, const std::string& what) {
  using Out = std::variant<json::object, Failure>;
  auto it = a.tool_processes.find(kRelayKey);
  if (it == a.tool_processes.end()) {
    co_return Out(
        EnvironmentFailure(v1::FAILURE_CLASS_INFRA, absl::StrCat(what, ": the environment server is not running")));
  }
  std::shared_ptr<InteractiveProcess> relay = it->second.process;
  const std::string marker = it->second.marker;
  ScopedInterrupt interrupt(a.control(), [relay] { relay->Stop(); });
  relay->Write(json::serialize(request) + "\n");
  // The relay gives up at `timeout` itself; the slack lets it say so.
  const absl::Time deadline = std::min(a.clock->Now() + timeout + absl::Seconds(5), a.EpisodeDeadline());
  InteractiveProcess::Output out = co_await relay->ReadUntil(marker, deadline);
  if (a.control()->stopped()) {
    co_return Out(
        a.FromStatus(absl::CancelledError("stopped"), v1::EPISODE_PHASE_ENVIRONMENT, v1::FAILURE_CLASS_INFRA, what));
  }
  if (!out.marked) {
    StopRelay(a);
    if (out.ended) {
      co_return Out(EnvironmentFailure(v1::FAILURE_CLASS_INFRA,
                                       absl::StrCat(what, ": the environment relay ended: ", out.text.substr(0, 500))));
    }
    if (a.clock->Now() >= a.EpisodeDeadline()) {
      co_return Out(a.FromStatus(absl::DeadlineExceededError("the episode's time ran out"),
                                 v1::EPISODE_PHASE_ENVIRONMENT, v1::FAILURE_CLASS_INFRA, what));
    }
    co_return Out(EnvironmentFailure(v1::FAILURE_CLASS_INFRA,
                                     absl::StrCat(what, ": the environment server did not answer within ",
                                                  absl::FormatDuration(timeout), "; it was stopped")));
  }
  boost::system::error_code ec;
  json::value answer = json::parse(out.text, ec);
  if (ec || !answer.is_object()) {
    StopRelay(a);
    co_return Out(EnvironmentFailure(v1::FAILURE_CLASS_INFRA,
                                     absl::StrCat(what, ": the environment relay answered ", out.text.substr(0, 300))));
  }
  co_return Out(std::move(answer.as_object()));
}

std::string Str(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
}

// The failure an answer with an "error" reports (INFRA: the server crashed, hung or cannot be reached).
Failure RelayError(Attempt& a, const json::object& answer, const std::string& what, absl::Duration timeout) {
  StopRelay(a);
  std::string message = absl::StrCat(what, ": ", Str(answer, "error"));
  if (answer.contains("timed_out") && !absl::StrContains(message, "not ready")) {
    message = absl::StrCat(what, ": the environment server did not answer within ", absl::FormatDuration(timeout),
                           "; it was stopped");
  }
  if (const std::string log = Str(answer, "log"); !log.empty()) {
    absl::StrAppend(&message,
                    "; its log (.corral/env-server.log) ends: ", log.size() > 600 ? log.substr(log.size() - 600) : log);
  }
  return EnvironmentFailure(v1::FAILURE_CLASS_INFRA, message);
}

}  // namespace

Failure EnvironmentFailure(v1::FailureClass failure_class, std::string message) {
  return Failure{v1::EPISODE_STATUS_FAILED, failure_class, v1::EPISODE_PHASE_ENVIRONMENT, std::move(message)};
}

asio::awaitable<std::optional<Failure>> StartEnvServer(Attempt& a, const v1::EnvServerSpec& spec) {
  const absl::Time deadline = a.EpisodeDeadline();
  if (absl::Status s = co_await a.slot->client->MakeDir(a.sandbox_id, ".corral", a.Call(deadline)); !s.ok()) {
    co_return a.FromStatus(s, v1::EPISODE_PHASE_ENVIRONMENT, v1::FAILURE_CLASS_INFRA, "making .corral");
  }
  json::object cfg;
  json::array argv;
  for (const auto& arg : spec.command().argv()) argv.emplace_back(arg);
  cfg["argv"] = std::move(argv);
  json::object env;
  for (const auto& [k, v] : spec.command().env()) env[k] = v;
  cfg["env"] = std::move(env);
  cfg["cwd"] = spec.command().cwd();
  cfg["port"] = spec.port();
  cfg["socket"] = spec.unix_socket().empty() ? "" : a.InSandbox(spec.unix_socket());
  cfg["log"] = a.InSandbox(".corral/env-server.log");
  const std::string marker = RandomMarker("__CORRAL_ENV_");
  cfg["mark"] = marker;

  v1::ExecRequest start;
  start.set_sandbox_id(a.sandbox_id);
  v1::Command& command = *start.mutable_command();
  for (const char* arg : {"python3", "-u", "-c", kRelay}) command.add_argv(arg);
  command.set_cwd(a.workdir);
  (*command.mutable_env())["__CORRAL_ENV"] = json::serialize(cfg);
  const absl::Duration life = std::min(deadline - a.clock->Now(), a.slot->max_exec_timeout);
  ToProto(std::max(life, absl::Seconds(1)), command.mutable_timeout());
  auto started = co_await a.slot->client->StartInteractive(std::move(start));
  if (!started.ok()) {
    const absl::StatusCode code = started.status().code();
    if (code == absl::StatusCode::kNotFound || code == absl::StatusCode::kInvalidArgument) {
      co_return EnvironmentFailure(
          v1::FAILURE_CLASS_ENVIRONMENT,
          absl::StrCat("the environment relay needs python3 in the sandbox: ", started.status().message()));
    }
    co_return a.FromStatus(started.status(), v1::EPISODE_PHASE_ENVIRONMENT, v1::FAILURE_CLASS_INFRA,
                           "starting the environment server");
  }
  a.tool_processes[kRelayKey] = Attempt::ToolProcess{*std::move(started), marker};

  const absl::Duration ready = spec.has_ready_timeout() ? FromProto(spec.ready_timeout()) : absl::Seconds(60);
  const std::string health = spec.health_path().empty() ? "/health" : spec.health_path();
  json::object wait;
  wait["wait"] = true;
  wait["path"] = health;
  wait["timeout"] = absl::ToDoubleSeconds(ready);
  const std::string what = absl::StrCat("starting the environment server (GET ", health, ")");
  auto answer = co_await Exchange(a, wait, ready, what);
  if (auto* f = std::get_if<Failure>(&answer)) co_return *f;
  const json::object& o = std::get<json::object>(answer);
  if (o.contains("error")) co_return RelayError(a, o, what, ready);
  co_return std::nullopt;
}

asio::awaitable<std::variant<EnvHttpReply, Failure>> EnvRequest(Attempt& a, const std::string& method,
                                                                const std::string& path, const std::string& body,
                                                                absl::Duration timeout) {
  using Out = std::variant<EnvHttpReply, Failure>;
  json::object request;
  request["method"] = method;
  request["path"] = path;
  request["body"] = body;
  request["timeout"] = absl::ToDoubleSeconds(timeout);
  const std::string what = absl::StrCat(method, " ", path);
  auto answer = co_await Exchange(a, request, timeout, what);
  if (auto* f = std::get_if<Failure>(&answer)) co_return Out(*f);
  const json::object& o = std::get<json::object>(answer);
  if (o.contains("error")) co_return Out(RelayError(a, o, what, timeout));
  EnvHttpReply reply;
  if (const json::value* status = o.if_contains("status"); status != nullptr && status->is_int64()) {
    reply.status = static_cast<int>(status->as_int64());
  }
  reply.body = Str(o, "body");
  co_return Out(std::move(reply));
}

}  // namespace corral::scheduler
