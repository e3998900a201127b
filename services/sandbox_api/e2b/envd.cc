#include "services/sandbox_api/e2b/envd.h"

#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/http/connect_codec.h"
#include "libs/http/url.h"
#include "services/sandbox_api/e2b/envd_wire.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace envd_wire;  // NOLINT: this file is envd's

constexpr absl::Duration kResolveCache = absl::Seconds(10);

}  // namespace

Envd::~Envd() {
  // The host kills what these calls started when they end.
  for (const auto& p : processes_->All()) {
    if (p->call() != nullptr) p->call()->Stop();
  }
}

bool Envd::Serves(const http::Request& request) { return request.find("e2b-sandbox-id") != request.end(); }

absl::StatusOr<std::string> Envd::HostPath(absl::string_view path) const {
  if (path.empty()) return absl::InvalidArgumentError("path is required");
  if (path.front() == '/') return std::string(path);
  if (path == "~") return options_.home;
  absl::ConsumePrefix(&path, "~/");
  return absl::StrCat(options_.home, "/", path);
}

void Envd::Forget(const std::string& sandbox_id) {
  absl::MutexLock lock(&mu_);
  resolved_.erase(sandbox_id);
}

asio::awaitable<absl::StatusOr<Envd::Target>> Envd::Resolve(const http::Request& request, bool fresh) {
  const std::string id = std::string(request["e2b-sandbox-id"]);
  auto owner = auth_->CheckAccess(id, std::string(request["x-access-token"]));
  if (!owner.ok()) co_return owner.status();
  const absl::Time now = clock_->Now();
  {
    absl::MutexLock lock(&mu_);
    auto it = resolved_.find(id);
    if (!fresh && it != resolved_.end() && now - it->second.second < kResolveCache) co_return it->second.first;
  }
  auto lease = co_await leases_->Get(id, *owner);
  if (!lease.ok()) {
    if (lease.status().code() == absl::StatusCode::kNotFound) {
      co_return absl::UnavailableError(absl::StrCat("sandbox ", id, " is not running (killed or timed out)"));
    }
    co_return lease.status();
  }
  auto host = leases_->Host(*lease);
  if (!host.ok()) co_return host.status();
  Target t{*std::move(lease), *std::move(host)};
  absl::MutexLock lock(&mu_);
  if (resolved_.size() > 10000) resolved_.clear();
  resolved_[id] = {t, now};
  co_return t;
}

asio::awaitable<std::string> Envd::Handle(http::Request& request, http::Responder& responder) {
  auto parsed = http::ParseTarget(absl::string_view(request.target().data(), request.target().size()));
  const std::string path = parsed.ok() ? parsed->path : "";
  const bool rpc = absl::StartsWith(path, "/process.Process/") || absl::StartsWith(path, "/filesystem.Filesystem/");
  const bool stream =
      absl::StartsWithIgnoreCase(std::string(request[boost::beast::http::field::content_type]), kStreamType);
  // Errors in the shape the caller's decoder reads: Connect's for RPCs, {"code", "message"} for REST.
  auto fail = [&](const absl::Status& s) -> asio::awaitable<void> {
    if (rpc) {
      co_await ReplyConnectError(responder, s, stream);
    } else {
      co_await ReplyError(responder, s, FilesStatus(s.code()));
    }
  };

  if (path == "/health") {
    auto t = co_await Resolve(request, /*fresh=*/true);  // isRunning() must see a kill or an expiry at once
    if (t.ok()) {
      std::string empty;
      co_await Reply(responder, 204, kJson, empty);
    } else {
      // 502: the sandbox is not running (what the SDK's isRunning() reads).
      const int status = t.status().code() == absl::StatusCode::kUnavailable ? 502 : FilesStatus(t.status().code());
      co_await ReplyError(responder, t.status(), status);
    }
    co_return "envd_health";
  }
  if (!rpc && path != "/files") {
    const absl::Status none = absl::NotFoundError("no such envd route");
    co_await ReplyError(responder, none, 404);
    co_return "envd_other";
  }
  const bool post = request.method() == boost::beast::http::verb::post;
  const bool get = request.method() == boost::beast::http::verb::get;
  if ((rpc && !post) || (!rpc && !post && !get)) {
    const absl::Status wrong = absl::InvalidArgumentError("method not allowed");
    co_await ReplyError(responder, wrong, 405);
    co_return rpc ? "envd_rpc" : "envd_files";
  }
  auto t = co_await Resolve(request);
  if (!t.ok()) {
    co_await fail(t.status());
    co_return rpc ? "envd_rpc" : "envd_files";
  }

  if (!rpc) {
    std::string user = parsed->query.count("username") ? parsed->query.at("username") : "";
    if (absl::Status s = CheckUser(user); !s.ok()) {
      co_await fail(s);
      co_return "envd_files";
    }
    std::string file = parsed->query.count("path") ? parsed->query.at("path") : "";
    if (get) {
      co_await Download(*std::move(t), std::move(file), responder);
    } else {
      co_await Upload(*std::move(t), std::move(file), request, responder);
    }
    co_return "envd_files";
  }

  // A Connect call: one JSON message, enveloped for a stream.
  absl::StatusOr<std::string> message = stream ? http::connect::OnlyMessage(request.body()) : request.body();
  absl::StatusOr<json::object> body = absl::InvalidArgumentError("the message must be a JSON object");
  if (message.ok()) {
    boost::system::error_code ec;
    json::value v = json::parse(message->empty() ? "{}" : *message, ec);
    if (!ec && v.is_object()) body = std::move(v.as_object());
  } else {
    body = message.status();
  }
  if (absl::Status s = body.ok() ? CheckBasicUser(request) : body.status(); !s.ok()) {
    co_await fail(s);
    co_return "envd_rpc";
  }
  const std::string method = path.substr(1);
  // Without Connect-Timeout-Ms a process runs as long as its sandbox (whose timeout may be extended later): the
  // host's longest exec, cut short by the sandbox's deletion.
  const absl::Duration left = absl::Hours(24);
  if (stream) {
    if (method == "process.Process/Start") {
      co_await Start(*std::move(t), *std::move(body), StreamTimeout(request, left), responder);
    } else if (method == "process.Process/Connect") {
      co_await Connect(*std::move(t), *std::move(body), responder);
    } else if (method == "filesystem.Filesystem/WatchDir") {
      co_await WatchDir(*std::move(t), *std::move(body), StreamTimeout(request, left), responder);
    } else {
      const absl::Status unknown = absl::UnimplementedError(absl::StrCat(method, " is not a server stream here"));
      co_await fail(unknown);
    }
    co_return "envd_stream";
  }
  auto answer = co_await Unary(method, *t, *body);
  if (!answer.ok()) {
    if (answer.status().code() == absl::StatusCode::kNotFound &&
        absl::StartsWith(answer.status().message(), "sandbox '")) {
      Forget(t->lease.lease_id());
    }
    co_await fail(answer.status());
  } else {
    std::string out = json::serialize(*answer);
    co_await Reply(responder, 200, kJson, out);
  }
  co_return "envd_rpc";
}

absl::StatusOr<std::shared_ptr<EnvdProcess>> Envd::Selected(const Target& t, const json::object& body) const {
  const json::object* selector = ObjectField(body, "process");
  if (selector == nullptr) return absl::InvalidArgumentError("process (a pid or a tag) is required");
  std::shared_ptr<EnvdProcess> p;
  if (const json::value* pid = selector->if_contains("pid"); pid != nullptr && pid->is_number()) {
    p = processes_->Find(t.lease.lease_id(), static_cast<uint32_t>(pid->to_number<int64_t>()));
    if (p == nullptr) {
      return absl::NotFoundError(absl::StrCat("process with pid ", pid->to_number<int64_t>(),
                                              " not found (or started through another replica)"));
    }
    return p;
  }
  const std::string tag = StringField(*selector, "tag");
  p = processes_->FindTag(t.lease.lease_id(), tag);
  if (p == nullptr) return absl::NotFoundError(absl::StrCat("process with tag '", tag, "' not found"));
  return p;
}

asio::awaitable<absl::StatusOr<json::object>> Envd::Unary(const std::string& method, const Target& t,
                                                          const json::object& body) {
  if (method == "process.Process/List") {
    json::array list;
    for (const auto& p : processes_->List(t.lease.lease_id())) {
      json::object item{{"config", p->config()}, {"pid", p->pid()}};
      if (!p->tag().empty()) item["tag"] = p->tag();
      list.push_back(std::move(item));
    }
    co_return json::object{{"processes", std::move(list)}};
  }
  if (method == "process.Process/SendInput" || method == "process.Process/CloseStdin" ||
      method == "process.Process/SendSignal") {
    auto p = Selected(t, body);
    if (!p.ok()) co_return p.status();
    if (method == "process.Process/CloseStdin") {
      (*p)->call()->CloseStdin();
    } else if (method == "process.Process/SendSignal") {
      const std::string signal = StringField(body, "signal");
      if (signal != "SIGNAL_SIGKILL" && signal != "SIGNAL_SIGTERM" && signal != "9" && signal != "15") {
        co_return absl::InvalidArgumentError("signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
      }
      (*p)->call()->Signal(signal == "SIGNAL_SIGTERM" || signal == "15" ? 15 : 9);
    } else {
      const json::object* input = ObjectField(body, "input");
      if (input != nullptr && input->contains("pty")) co_return absl::UnimplementedError("PTYs are not supported");
      std::string data;
      if (input == nullptr || !absl::Base64Unescape(StringField(*input, "stdin"), &data)) {
        co_return absl::InvalidArgumentError("input.stdin must be base64 bytes");
      }
      (*p)->call()->Write(std::move(data));
    }
    co_return json::object();
  }
  if (method == "process.Process/Update") co_return absl::UnimplementedError("PTYs are not supported");

  if (absl::StartsWith(method, "filesystem.Filesystem/")) co_return co_await Filesystem(method, t, body);
  co_return absl::UnimplementedError(absl::StrCat(method, " is not served (see docs/sandbox-apis.md)"));
}

asio::awaitable<void> Envd::Start(Target t, json::object body, absl::Duration timeout, http::Responder& responder) {
  const json::object* process = ObjectField(body, "process");
  absl::Status bad;
  if (body.contains("pty")) bad = absl::UnimplementedError("PTYs are not supported: run commands without one");
  if (process == nullptr || StringField(*process, "cmd").empty())
    bad = absl::InvalidArgumentError("process.cmd is required");
  v1::ExecRequest start;
  json::object config;
  if (bad.ok()) {
    start.set_sandbox_id(t.lease.sandbox_id());
    v1::Command* command = start.mutable_command();
    command->add_argv(StringField(*process, "cmd"));
    json::array args;
    if (const json::value* a = process->if_contains("args"); a != nullptr && a->is_array()) {
      for (const json::value& arg : a->as_array()) {
        if (!arg.is_string()) bad = absl::InvalidArgumentError("process.args must be strings");
        if (arg.is_string()) command->add_argv(std::string(arg.as_string()));
        args.push_back(arg);
      }
    }
    json::object envs;
    if (const json::object* e = ObjectField(*process, "envs"); e != nullptr) {
      for (const auto& [k, v] : *e) {
        if (!v.is_string()) bad = absl::InvalidArgumentError("process.envs must be strings");
        if (v.is_string()) (*command->mutable_env())[std::string(k)] = std::string(v.as_string());
        envs[k] = v;
      }
    }
    std::string cwd = StringField(*process, "cwd");
    auto dir = HostPath(cwd.empty() ? options_.home : cwd);
    if (dir.ok()) command->set_cwd(*dir);
    ToProto(timeout, command->mutable_timeout());
    config = json::object{{"cmd", StringField(*process, "cmd")}, {"args", std::move(args)}, {"envs", std::move(envs)}};
    if (!cwd.empty()) config["cwd"] = cwd;
  }
  if (!bad.ok()) {
    co_await EndStreamWith(responder, bad);
    co_return;
  }
  const json::value* stdin_open = body.if_contains("stdin");
  const bool keep_stdin = stdin_open != nullptr && stdin_open->is_bool() && stdin_open->as_bool();

  auto process_state = std::make_shared<EnvdProcess>(std::move(config), StringField(body, "tag"));
  // The observers run on gRPC threads, possibly after this Envd is gone (at shutdown): they hold the table weakly.
  std::weak_ptr<EnvdProcesses> table = processes_;
  const std::string sandbox = t.lease.lease_id();
  std::weak_ptr<EnvdProcess> weak = process_state;
  sandbox::ExecObserver observer{
      .on_event =
          [weak, table, sandbox](const v1::ExecEvent& event) {
            auto p = weak.lock();
            if (p == nullptr) return;
            p->OnEvent(event);
            auto processes = table.lock();
            if (event.has_exited() && processes != nullptr) processes->Remove(sandbox, p->pid());
          },
      .on_done =
          [weak, table, sandbox](const absl::Status& status) {
            auto p = weak.lock();
            if (p == nullptr) return;
            p->OnDone(status);
            if (auto processes = table.lock()) processes->Remove(sandbox, p->pid());
          },
  };
  auto call = co_await t.host->StartInteractive(std::move(start), std::move(observer));
  if (!call.ok()) {
    if (call.status().code() == absl::StatusCode::kNotFound) Forget(sandbox);
    const absl::Status failed = call.status();
    co_await EndStreamWith(responder, failed);
    co_return;
  }
  process_state->set_call(*call);
  if (!keep_stdin) (*call)->CloseStdin();
  if (!process_state->ended()) processes_->Add(sandbox, process_state);
  if (process_state->ended()) processes_->Remove(sandbox, process_state->pid());
  co_await Follow(process_state, 0, responder);
  // The process outlives this stream (as envd's): its call ends with it, and the table forgets it then.
}

asio::awaitable<void> Envd::Connect(Target t, json::object body, http::Responder& responder) {
  auto p = Selected(t, body);
  if (!p.ok()) {
    const absl::Status failed = p.status();
    co_await EndStreamWith(responder, failed);
    co_return;
  }
  const size_t next = (*p)->end_index();  // what comes from now on, as envd's Connect
  co_await Follow(*p, next, responder);
}

asio::awaitable<void> Envd::Follow(std::shared_ptr<EnvdProcess> process, size_t next, http::Responder& responder) {
  if (!co_await responder.StartStream(200, kStreamType)) co_return;
  const std::string started =
      http::connect::Envelope(absl::StrCat(R"({"event":{"start":{"pid":)", process->pid(), "}}}"));
  if (!co_await responder.WriteChunk(started)) co_return;
  while (true) {
    EnvdProcess::Batch batch = co_await process->Read(&next, envd_wire::kKeepalive);
    std::string out;
    for (const std::string& event : batch.events)
      out += http::connect::Envelope(absl::StrCat(R"({"event":)", event, "}"));
    if (batch.events.empty() && !batch.ended) out = http::connect::Envelope(R"({"event":{"keepalive":{}}})");
    if (batch.ended) out += http::connect::EndOfStream(absl::OkStatus());
    if (!out.empty() && !co_await responder.WriteChunk(out)) co_return;
    if (batch.ended) break;
  }
  co_await responder.EndStream();
}

}  // namespace corral::sandbox_api
