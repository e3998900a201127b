#include "services/sandbox_api/e2b/envd.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"
#include "libs/http/url.h"
#include "services/sandbox_api/e2b/connect_codec.h"
#include "services/sandbox_api/e2b/multipart.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

constexpr char kStreamType[] = "application/connect+json";
constexpr char kJson[] = "application/json";
constexpr absl::Duration kResolveCache = absl::Seconds(10);
constexpr absl::Duration kKeepalive = absl::Seconds(30);
constexpr absl::Duration kWatchPoll = absl::Milliseconds(200);
constexpr size_t kMaxRead = 256 << 20;
constexpr size_t kMaxWatched = 20000;
constexpr int kMaxDepth = 32;

std::string Header(const http::Request& r, absl::string_view name) {
  auto it = r.find(boost::beast::string_view(name.data(), name.size()));
  return it == r.end() ? "" : std::string(it->value());
}

std::string StringField(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
}

const json::object* ObjectField(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_object() ? &v->as_object() : nullptr;
}

// The user a call names (Basic auth on RPCs, `username` on /files): every sandbox has one, "user".
absl::Status CheckUser(absl::string_view user) {
  if (user.empty() || user == "user") return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("user '", user,
                   "': a Corral sandbox has one user, 'user' (unprivileged); commands and files "
                   "cannot run as another"));
}

absl::Status CheckBasicUser(const http::Request& r) {
  std::string auth = Header(r, "authorization");
  if (auth.empty()) return absl::OkStatus();
  absl::string_view v = auth;
  std::string decoded;
  if (!absl::ConsumePrefix(&v, "Basic ") || !absl::Base64Unescape(v, &decoded)) {
    return absl::UnauthenticatedError("Authorization must be Basic base64(user:)");
  }
  return CheckUser(decoded.substr(0, decoded.find(':')));
}

std::string Permissions(const v1::FileInfo& info) {
  std::string s = info.type() == v1::FILE_TYPE_DIRECTORY ? "d" : info.type() == v1::FILE_TYPE_SYMLINK ? "l" : "-";
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) s.push_back((info.permissions() >> (8 - i)) & 1 ? rwx[i] : '-');
  return s;
}

// envd's EntryInfo for `info`, at E2B path `path`.
json::object Entry(const v1::FileInfo& info, const std::string& path) {
  json::object e;
  e["name"] = path.substr(path.find_last_of('/') + 1);
  switch (info.type()) {
    case v1::FILE_TYPE_REGULAR: e["type"] = "FILE_TYPE_FILE"; break;
    case v1::FILE_TYPE_DIRECTORY: e["type"] = "FILE_TYPE_DIRECTORY"; break;
    case v1::FILE_TYPE_SYMLINK: e["type"] = "FILE_TYPE_SYMLINK"; break;
    default: e["type"] = "FILE_TYPE_UNSPECIFIED"; break;
  }
  e["path"] = path;
  e["size"] = info.size();
  e["mode"] = info.permissions();
  e["permissions"] = Permissions(info);
  e["owner"] = "user";
  e["group"] = "user";
  if (info.has_modify_time()) {
    e["modifiedTime"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", FromProto(info.modify_time()), absl::UTCTimeZone());
  }
  if (info.type() == v1::FILE_TYPE_SYMLINK) e["symlinkTarget"] = info.link_target();
  return e;
}

std::string Join(const std::string& dir, const std::string& name) {
  return dir == "/" ? absl::StrCat("/", name) : absl::StrCat(dir, "/", name);
}

// /files errors: {"code": <status>, "message"}.
std::string FilesError(int status, absl::string_view message) {
  return json::serialize(
      json::object{{"code", status}, {"message", json::string_view(message.data(), message.size())}});
}

int FilesStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kResourceExhausted: return 507;
    default: return 500;
  }
}

// A stream's lifetime from Connect-Timeout-Ms; `fallback` without one.
absl::Duration StreamTimeout(const http::Request& r, absl::Duration fallback) {
  int64_t ms = 0;
  if (!absl::SimpleAtoi(Header(r, "connect-timeout-ms"), &ms) || ms <= 0) return fallback;
  return std::min(absl::Milliseconds(ms), fallback);
}

// Sends a whole answer. Callers pass named values only (GCC 12 mishandles temporaries in co_await arguments).
asio::awaitable<void> Reply(http::Responder& responder, int status, const char* type, std::string& body) {
  co_await responder.Send(status, type, std::move(body));
}

// A /files or /health error: {"code", "message"}.
asio::awaitable<void> ReplyError(http::Responder& responder, const absl::Status& s, int status) {
  std::string body = FilesError(status, s.message());
  co_await responder.Send(status, kJson, std::move(body));
}

// Ends a stream with `status`, starting it first when nothing was sent yet (a stream's errors travel in its end
// envelope: its status line is read before its body).
asio::awaitable<void> EndStreamWith(http::Responder& responder, const absl::Status& status) {
  const std::string eos = connect::EndOfStream(status);
  if (!responder.started() && !co_await responder.StartStream(200, kStreamType)) co_return;
  if (co_await responder.WriteChunk(eos)) co_await responder.EndStream();
}

// A Connect error: in the stream's end envelope, or as a unary call's JSON error with its HTTP status.
asio::awaitable<void> ReplyConnectError(http::Responder& responder, const absl::Status& s, bool stream) {
  if (stream) {
    co_await EndStreamWith(responder, s);
  } else {
    std::string body = connect::ErrorJson(s);
    co_await responder.Send(connect::HttpStatus(s.code()), kJson, std::move(body));
  }
}

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
  const std::string id = Header(request, "e2b-sandbox-id");
  auto owner = auth_->CheckAccess(id, Header(request, "x-access-token"));
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
  Target t{*std::move(lease), nullptr};
  t.host = leases_->Host(t.lease);
  absl::MutexLock lock(&mu_);
  if (resolved_.size() > 10000) resolved_.clear();
  resolved_[id] = {t, now};
  co_return t;
}

asio::awaitable<std::string> Envd::Handle(http::Request& request, http::Responder& responder) {
  auto parsed = http::ParseTarget(absl::string_view(request.target().data(), request.target().size()));
  const std::string path = parsed.ok() ? parsed->path : "";
  const bool rpc = absl::StartsWith(path, "/process.Process/") || absl::StartsWith(path, "/filesystem.Filesystem/");
  const bool stream = absl::StartsWithIgnoreCase(Header(request, "content-type"), kStreamType);
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
  absl::StatusOr<std::string> message = stream ? connect::OnlyMessage(request.body()) : request.body();
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

  std::string path = StringField(body, "path");
  if (method == "filesystem.Filesystem/Stat") co_return co_await Stat(t, std::move(path));
  if (method == "filesystem.Filesystem/ListDir") {
    int depth = 1;
    if (const json::value* d = body.if_contains("depth"); d != nullptr && d->is_number()) {
      depth = static_cast<int>(std::clamp<int64_t>(d->to_number<int64_t>(), 1, kMaxDepth));
    }
    co_return co_await ListDir(t, std::move(path), depth);
  }
  if (method == "filesystem.Filesystem/MakeDir") co_return co_await MakeDir(t, std::move(path));
  if (method == "filesystem.Filesystem/Move") {
    std::string from = StringField(body, "source"), to = StringField(body, "destination");
    co_return co_await Move(t, std::move(from), std::move(to));
  }
  if (method == "filesystem.Filesystem/Remove") {
    auto p = HostPath(path);
    if (!p.ok()) co_return p.status();
    scheduler::CallOptions options{.deadline = clock_->Now() + absl::Minutes(1)};
    absl::Status s = co_await t.host->Remove(t.lease.sandbox_id(), *p, true, options);
    if (!s.ok()) co_return s;
    co_return json::object();
  }
  co_return absl::UnimplementedError(absl::StrCat(method, " is not served (see docs/sandbox-apis.md)"));
}

asio::awaitable<absl::StatusOr<json::object>> Envd::Stat(const Target& t, std::string path) {
  auto p = HostPath(path);
  if (!p.ok()) co_return p.status();
  scheduler::CallOptions options{.deadline = clock_->Now() + absl::Seconds(30)};
  auto info = co_await t.host->Stat(t.lease.sandbox_id(), *p, options);
  if (!info.ok()) co_return info.status();
  co_return json::object{{"entry", Entry(*info, *p)}};
}

asio::awaitable<absl::StatusOr<json::object>> Envd::ListDir(const Target& t, std::string path, int depth) {
  auto root = HostPath(path);
  if (!root.ok()) co_return root.status();
  json::array entries;
  std::vector<std::pair<std::string, int>> dirs = {{*root, 1}};
  const absl::Time deadline = clock_->Now() + absl::Minutes(1);
  while (!dirs.empty()) {
    auto [dir, level] = dirs.back();
    dirs.pop_back();
    scheduler::CallOptions options{.deadline = deadline};
    auto listed = co_await t.host->ListDir(t.lease.sandbox_id(), dir, options);
    if (!listed.ok()) {
      if (level == 1) co_return listed.status();
      continue;  // a directory that went away under the walk
    }
    for (const v1::FileInfo& info : *listed) {
      const std::string at = Join(dir, info.name());
      entries.push_back(Entry(info, at));
      if (info.type() == v1::FILE_TYPE_DIRECTORY && level < depth) dirs.emplace_back(at, level + 1);
    }
    if (entries.size() > kMaxWatched) co_return absl::ResourceExhaustedError("over 20000 entries: list less deep");
  }
  co_return json::object{{"entries", std::move(entries)}};
}

asio::awaitable<absl::StatusOr<json::object>> Envd::MakeDir(const Target& t, std::string path) {
  auto p = HostPath(path);
  if (!p.ok()) co_return p.status();
  scheduler::CallOptions options{.deadline = clock_->Now() + absl::Seconds(30)};
  auto existing = co_await t.host->Stat(t.lease.sandbox_id(), *p, options);
  if (existing.ok()) co_return absl::AlreadyExistsError(absl::StrCat("path '", *p, "' already exists"));
  if (existing.status().code() != absl::StatusCode::kNotFound) co_return existing.status();
  if (absl::Status s = co_await t.host->MakeDir(t.lease.sandbox_id(), *p, options); !s.ok()) co_return s;
  co_return co_await Stat(t, *p);
}

asio::awaitable<absl::StatusOr<json::object>> Envd::Move(const Target& t, std::string from, std::string to) {
  auto source = HostPath(from);
  auto destination = HostPath(to);
  if (!source.ok() || !destination.ok()) co_return absl::InvalidArgumentError("source and destination are required");
  scheduler::CallOptions options{.deadline = clock_->Now() + absl::Seconds(30)};
  auto exists = co_await t.host->Stat(t.lease.sandbox_id(), *source, options);
  if (!exists.ok()) co_return exists.status();
  // A rename inside the sandbox, by the sandbox's own user: the host's path rules apply to the process.
  v1::ExecRequest exec;
  exec.set_sandbox_id(t.lease.sandbox_id());
  for (const std::string& arg : {std::string("mv"), std::string("-T"), std::string("--"), *source, *destination}) {
    exec.mutable_command()->add_argv(arg);
  }
  ToProto(absl::Seconds(30), exec.mutable_command()->mutable_timeout());
  auto moved = co_await t.host->Exec(std::move(exec), 4096, options);
  if (!moved.ok()) co_return moved.status();
  if (moved->exit.exit_code() != 0) {
    co_return absl::FailedPreconditionError(absl::StrCat(
        "cannot move '", *source, "' to '", *destination,
        "': ", absl::StripAsciiWhitespace(moved->stderr_head.empty() ? moved->output : moved->stderr_head)));
  }
  co_return co_await Stat(t, *destination);
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
  scheduler::ExecObserver observer{
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
  const std::string started = connect::Envelope(absl::StrCat(R"({"event":{"start":{"pid":)", process->pid(), "}}}"));
  if (!co_await responder.WriteChunk(started)) co_return;
  while (true) {
    EnvdProcess::Batch batch = co_await process->Read(&next, kKeepalive);
    std::string out;
    for (const std::string& event : batch.events) out += connect::Envelope(absl::StrCat(R"({"event":)", event, "}"));
    if (batch.events.empty() && !batch.ended) out = connect::Envelope(R"({"event":{"keepalive":{}}})");
    if (batch.ended) out += connect::EndOfStream(absl::OkStatus());
    if (!out.empty() && !co_await responder.WriteChunk(out)) co_return;
    if (batch.ended) break;
  }
  co_await responder.EndStream();
}

asio::awaitable<void> Envd::WatchDir(Target t, json::object body, absl::Duration timeout, http::Responder& responder) {
  auto root = HostPath(StringField(body, "path"));
  const json::value* r = body.if_contains("recursive");
  const bool recursive = r != nullptr && r->is_bool() && r->as_bool();
  const json::value* ie = body.if_contains("includeEntry");
  const bool include_entry = ie != nullptr && ie->is_bool() && ie->as_bool();
  // What the directory holds: path -> (entry, a fingerprint of size and time).
  using Snapshot = std::map<std::string, std::pair<v1::FileInfo, std::string>>;
  auto scan = [&](const std::string& dir) -> asio::awaitable<absl::StatusOr<Snapshot>> {
    Snapshot snapshot;
    std::vector<std::string> dirs = {dir};
    while (!dirs.empty()) {
      const std::string at = dirs.back();
      dirs.pop_back();
      scheduler::CallOptions options{.deadline = clock_->Now() + absl::Seconds(30)};
      auto listed = co_await t.host->ListDir(t.lease.sandbox_id(), at, options);
      if (!listed.ok()) {
        if (at == dir) co_return listed.status();
        continue;
      }
      for (const v1::FileInfo& info : *listed) {
        const std::string path = Join(at, info.name());
        const std::string print = absl::StrCat(info.type(), ":", info.size(), ":", info.modify_time().seconds(), ".",
                                               info.modify_time().nanos());
        snapshot[path] = {info, print};
        if (recursive && info.type() == v1::FILE_TYPE_DIRECTORY) dirs.push_back(path);
      }
      if (snapshot.size() > kMaxWatched) co_return absl::ResourceExhaustedError("over 20000 entries to watch");
    }
    co_return snapshot;
  };
  absl::StatusOr<Snapshot> before = absl::InvalidArgumentError("path is required");
  if (root.ok()) before = co_await scan(*root);
  if (!before.ok()) {
    co_await EndStreamWith(responder, before.status());
    co_return;
  }
  const std::string started = connect::Envelope(R"({"start":{}})");
  if (!co_await responder.StartStream(200, kStreamType) || !co_await responder.WriteChunk(started)) co_return;
  const absl::Time end = clock_->Now() + timeout;
  absl::Time quiet_since = clock_->Now();
  absl::Status ended = absl::OkStatus();
  while (clock_->Now() < end) {
    co_await async::SleepFor(*clock_, kWatchPoll);
    auto now = co_await scan(*root);
    if (!now.ok()) {
      ended = now.status().code() == absl::StatusCode::kNotFound
                  ? absl::NotFoundError(absl::StrCat("the watched directory '", *root, "' is gone"))
                  : now.status();
      break;
    }
    std::string out;
    auto event = [&](const std::string& path, const char* type, const v1::FileInfo* info) {
      json::object e{{"name", path.substr(std::min(path.size(), root->size() + 1))}, {"type", type}};
      if (include_entry && info != nullptr) e["entry"] = Entry(*info, path);
      out += connect::Envelope(json::serialize(json::object{{"filesystem", std::move(e)}}));
    };
    for (const auto& [path, entry] : *now) {
      auto old = before->find(path);
      if (old == before->end()) {
        event(path, "EVENT_TYPE_CREATE", &entry.first);
      } else if (old->second.second != entry.second && entry.first.type() != v1::FILE_TYPE_DIRECTORY) {
        event(path, "EVENT_TYPE_WRITE", &entry.first);
      }
    }
    for (const auto& [path, entry] : *before) {
      if (!now->contains(path)) event(path, "EVENT_TYPE_REMOVE", nullptr);
    }
    before = *std::move(now);
    if (out.empty() && clock_->Now() - quiet_since >= kKeepalive) out = connect::Envelope(R"({"keepalive":{}})");
    if (out.empty()) continue;
    quiet_since = clock_->Now();
    if (!co_await responder.WriteChunk(out)) co_return;
  }
  co_await EndStreamWith(responder, ended);
}

asio::awaitable<void> Envd::Download(Target t, std::string path, http::Responder& responder) {
  auto p = HostPath(path);
  if (!p.ok()) {
    co_await ReplyError(responder, p.status(), 400);
    co_return;
  }
  scheduler::CallOptions options{.deadline = clock_->Now() + absl::Minutes(5)};
  auto data = co_await t.host->ReadFile(t.lease.sandbox_id(), *p, kMaxRead, options);
  if (!data.ok()) {
    co_await ReplyError(responder, data.status(), FilesStatus(data.status().code()));
  } else if (!data->has_value()) {
    const absl::Status missing = absl::NotFoundError(absl::StrCat("path '", *p, "' does not exist"));
    co_await ReplyError(responder, missing, 404);
  } else {
    co_await Reply(responder, 200, "application/octet-stream", **data);
  }
}

asio::awaitable<void> Envd::Upload(Target t, std::string path, const http::Request& request,
                                   http::Responder& responder) {
  // What to write: the parts named `file` of a form (each at the query's path, else its filename), or the body.
  std::vector<std::pair<std::string, std::string>> files;
  absl::Status bad;
  const std::string type = Header(request, "content-type");
  if (!Header(request, "content-encoding").empty() &&
      !absl::EqualsIgnoreCase(Header(request, "content-encoding"), "identity")) {
    bad = absl::InvalidArgumentError("compressed uploads (gzip) are not supported: write without gzip");
  } else if (absl::StartsWithIgnoreCase(type, "multipart/")) {
    auto boundary = MultipartBoundary(type);
    auto parts = boundary.ok() ? ParseMultipart(request.body(), *boundary)
                               : absl::StatusOr<std::vector<FormPart>>(boundary.status());
    if (!parts.ok()) bad = parts.status();
    for (FormPart& part : parts.ok() ? *parts : std::vector<FormPart>()) {
      if (part.name != "file") continue;
      files.emplace_back(path.empty() ? part.filename : path, std::move(part.data));
    }
  } else {
    files.emplace_back(path, request.body());
  }
  std::set<std::string> seen;
  json::array written;
  for (auto& [name, data] : files) {
    auto p = HostPath(name);
    if (!p.ok()) bad = absl::InvalidArgumentError("every file needs a path (the `path` query or the part's filename)");
    if (p.ok() && !seen.insert(*p).second)
      bad = absl::InvalidArgumentError(absl::StrCat("path '", *p, "' given twice"));
    if (!bad.ok()) break;
    written.push_back(json::object{{"name", p->substr(p->find_last_of('/') + 1)}, {"type", "file"}, {"path", *p}});
    name = *p;
  }
  if (bad.ok() && files.empty()) bad = absl::InvalidArgumentError("no file in the upload (form field `file`)");
  for (auto& [name, data] : files) {
    if (!bad.ok()) break;
    v1::InlineFile file;
    file.set_path(name);
    file.set_content(std::move(data));
    scheduler::CallOptions options{.deadline = clock_->Now() + absl::Minutes(5)};
    bad = co_await t.host->WriteFile(t.lease.sandbox_id(), file, options);
  }
  if (!bad.ok()) {
    co_await ReplyError(responder, bad, FilesStatus(bad.code()));
    co_return;
  }
  std::string out = json::serialize(written);
  co_await Reply(responder, 200, kJson, out);
}

}  // namespace corral::sandbox_api
