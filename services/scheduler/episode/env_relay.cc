#include "services/scheduler/episode/env_relay.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "services/scheduler/episode/episode_calls.h"
#include "services/scheduler/episode/resident_process.h"

namespace corral::scheduler {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

// The relay's key among the attempt's long-lived processes (tool names cannot hold ':').
constexpr char kRelayKey[] = "env:relay";

void StopRelay(Attempt& a) { a.residents.Stop(kRelayKey); }

// Writes `request` to the relay and reads its answer: the parsed JSON object, or an infra failure.
asio::awaitable<std::variant<json::object, Failure>> Exchange(Attempt& a, const json::object& request,
                                                              absl::Duration timeout, const std::string& what) {
  using Out = std::variant<json::object, Failure>;
  const ResidentProcesses::Entry* found = a.residents.Find(kRelayKey);
  if (found == nullptr) {
    co_return Out(
        EnvironmentFailure(v1::FAILURE_CLASS_INFRA, absl::StrCat(what, ": the environment server is not running")));
  }
  std::shared_ptr<sandbox::InteractiveProcess> relay = found->process;
  const std::string marker = found->marker;
  async::ScopedInterrupt interrupt(a.control(), [relay] { relay->Stop(); });
  relay->Write(json::serialize(request) + "\n");
  // The relay gives up at `timeout` itself; the slack lets it say so.
  const absl::Time deadline = std::min(a.clock->Now() + timeout + absl::Seconds(5), a.EpisodeDeadline());
  sandbox::InteractiveProcess::Output out = co_await relay->ReadUntil(marker, deadline);
  if (a.control()->stopped()) {
    co_return Out(StoppedFailure(a, v1::EPISODE_PHASE_ENVIRONMENT, what));
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

asio::awaitable<std::optional<Failure>> StartEnvServer(Attempt& a, const v1::EnvServerSpec& spec) {
  const absl::Time deadline = a.EpisodeDeadline();
  if (absl::Status s = co_await a.slot->client->MakeDir(a.sandbox_id, ".corral", a.Call(deadline)); !s.ok()) {
    co_return a.FromStatus(s, v1::EPISODE_PHASE_ENVIRONMENT, v1::FAILURE_CLASS_INFRA, "making .corral");
  }
  const std::string marker = RandomMarker("__CORRAL_ENV_");
  ResidentSpec start;
  start.key = kRelayKey;
  start.command = RelayCommand("env_relay.py", spec.command(), spec.port(), a.InSandbox(spec.unix_socket()),
                               a.InSandbox(".corral/env-server.log"), json::object{{"mark", marker}});
  start.marker = marker;
  start.phase = v1::EPISODE_PHASE_ENVIRONMENT;
  start.what = "the environment server";
  start.cannot_start = "the environment relay needs python3 in the sandbox: ";
  auto started = co_await StartResident(a, start);
  if (auto* f = std::get_if<Failure>(&started)) co_return *f;

  const absl::Duration ready = spec.has_ready_timeout() ? FromProto(spec.ready_timeout()) : absl::Seconds(60);
  const std::string health = spec.health_path().empty() ? "/health" : spec.health_path();
  json::object wait;
  wait["wait"] = true;
  wait["path"] = health;
  wait["timeout"] = absl::ToDoubleSeconds(ready);
  const std::string what = absl::StrCat("starting the environment server (GET ", health, ")");
  auto answer = co_await Exchange(a, wait, ready, what);
  if (auto* f = std::get_if<Failure>(&answer)) co_return *f;
  if (const json::object& o = std::get<json::object>(answer); o.contains("error")) {
    co_return RelayError(a, o, what, ready);
  }

  json::object open;
  open["open"] = spec.transport() == v1::ENV_TRANSPORT_HTTP        ? "http"
                 : spec.transport() == v1::ENV_TRANSPORT_WEBSOCKET ? "websocket"
                                                                   : "auto";
  open["ws_path"] = spec.ws_path().empty() ? "/ws" : spec.ws_path();
  open["timeout"] = absl::ToDoubleSeconds(ready);
  const std::string opening = absl::StrCat("opening the environment's session (GET ", Str(open, "ws_path"), ")");
  auto opened = co_await Exchange(a, open, ready, opening);
  if (auto* f = std::get_if<Failure>(&opened)) co_return *f;
  const json::object& o = std::get<json::object>(opened);
  if (o.contains("error")) co_return RelayError(a, o, opening, ready);
  if (o.contains("env_error")) {
    StopRelay(a);
    co_return EnvironmentFailure(v1::FAILURE_CLASS_ENVIRONMENT, Str(o, "env_error"));
  }
  a.output.Append(
      absl::StrCat("environment transport: ", Str(o, "transport"),
                   Str(o, "transport") == "websocket" ? absl::StrCat(" session on ", Str(o, "ws_path")) : "", "\n"));
  co_return std::nullopt;
}

asio::awaitable<std::variant<EnvHttpReply, Failure>> EnvCall(Attempt& a, const std::string& kind,
                                                             const std::string& body, absl::Duration timeout) {
  using Out = std::variant<EnvHttpReply, Failure>;
  json::object request;
  request["env"] = kind;
  request["body"] = body;
  request["timeout"] = absl::ToDoubleSeconds(timeout);
  auto answer = co_await Exchange(a, request, timeout, kind);
  if (auto* f = std::get_if<Failure>(&answer)) co_return Out(*f);
  const json::object& o = std::get<json::object>(answer);
  const std::string call = Str(o, "call").empty() ? absl::StrCat("POST /", kind) : Str(o, "call");
  if (o.contains("error")) co_return Out(RelayError(a, o, call, timeout));
  if (o.contains("env_error")) co_return Out(EnvironmentFailure(v1::FAILURE_CLASS_ENVIRONMENT, Str(o, "env_error")));
  EnvHttpReply reply;
  if (const json::value* status = o.if_contains("status"); status != nullptr && status->is_int64()) {
    reply.status = static_cast<int>(status->as_int64());
  }
  reply.body = Str(o, "body");
  reply.call = call;
  co_return Out(std::move(reply));
}

}  // namespace corral::scheduler
