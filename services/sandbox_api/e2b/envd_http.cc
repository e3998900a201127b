#include "services/sandbox_api/e2b/envd_http.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "boost/json.hpp"
#include "libs/http/connect_codec.h"
#include "libs/http/url.h"
#include "services/sandbox_api/e2b/multipart.h"
#include "services/sandbox_api/routes.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

constexpr char kStreamType[] = "application/connect+json";
constexpr char kJson[] = "application/json";
// A stream without Connect-Timeout-Ms runs as long as its sandbox may (whose timeout can be extended later): the
// host's longest exec, cut short by the sandbox's deletion.
constexpr absl::Duration kLongestStream = absl::Hours(24);

// The user a call names in Basic auth ("" for none or the sandbox's own, "user"); UNAUTHENTICATED when the
// header is malformed.
absl::StatusOr<std::string> BasicUser(const http::Request& r) {
  const std::string auth(r[bhttp::field::authorization]);
  if (auth.empty()) return std::string();
  absl::string_view v = auth;
  std::string decoded;
  if (!absl::ConsumePrefix(&v, "Basic ") || !absl::Base64Unescape(v, &decoded)) {
    return absl::UnauthenticatedError("Authorization must be Basic base64(user:)");
  }
  return EnvdUser(decoded.substr(0, decoded.find(':')));
}

// /files' HTTP status for an error: Connect's, but 507 for RESOURCE_EXHAUSTED (a full disk: the SDK's
// NotEnoughSpaceError).
int FilesStatus(absl::StatusCode code) {
  return code == absl::StatusCode::kResourceExhausted ? 507 : http::connect::HttpStatus(code);
}

// A stream's lifetime from Connect-Timeout-Ms (at most the longest).
absl::Duration StreamTimeout(const http::Request& r) {
  int64_t ms = 0;
  if (!absl::SimpleAtoi(std::string(r["connect-timeout-ms"]), &ms) || ms <= 0) return kLongestStream;
  return std::min(absl::Milliseconds(ms), kLongestStream);
}

// A /files or /health error: {"code": status, "message"}.
asio::awaitable<void> RestError(http::Responder& responder, const absl::Status& s, int status) {
  boost::json::object error{{"code", status}, {"message", std::string(s.message())}};
  std::string body = boost::json::serialize(error);
  co_await responder.Send(status, kJson, std::move(body));
}

// A stream's events, enveloped, written when the core flushes; its end envelope carries how it ended (a
// stream's status line is read before its body, so its errors travel there).
class ConnectStream final : public EnvdStream {
 public:
  explicit ConnectStream(http::Responder& responder) : responder_(responder) {}

  void SendJson(std::string json) override { pending_ += http::connect::Envelope(json); }
  asio::awaitable<bool> Flush() override {
    if (!responder_.started()) {
      const bool started = co_await responder_.StartStream(200, kStreamType);
      if (!started) co_return false;
    }
    if (pending_.empty()) co_return true;
    const std::string out = std::exchange(pending_, "");
    const bool written = co_await responder_.WriteChunk(out);
    co_return written;
  }
  // Sends what is kept and the end envelope, and ends the stream.
  asio::awaitable<void> End(absl::Status status) {
    if (responder_.client_gone()) co_return;
    pending_ += http::connect::EndOfStream(status);
    const bool flushed = co_await Flush();
    if (flushed) co_await responder_.EndStream();
  }

 private:
  http::Responder& responder_;
  std::string pending_;
};

// A run's output lines (NDJSON), written when the core flushes.
class NdjsonStream final : public EnvdStream {
 public:
  explicit NdjsonStream(http::Responder& responder) : responder_(responder) {}

  void SendJson(std::string json) override { absl::StrAppend(&pending_, json, "\n"); }
  asio::awaitable<bool> Flush() override {
    if (!responder_.started()) {
      const bool started = co_await responder_.StartStream(200, "application/x-ndjson");
      if (!started) co_return false;
    }
    if (pending_.empty()) co_return true;
    const std::string out = std::exchange(pending_, "");
    const bool written = co_await responder_.WriteChunk(out);
    co_return written;
  }

 private:
  http::Responder& responder_;
  std::string pending_;
};

// A Connect error: in the stream's end envelope, or as a unary call's JSON error with its HTTP status.
asio::awaitable<void> ConnectError(http::Responder& responder, const absl::Status& s, bool stream) {
  if (stream) {
    ConnectStream out(responder);
    co_await out.End(s);
  } else {
    std::string body = http::connect::ErrorJson(s);
    co_await responder.Send(http::connect::HttpStatus(s.code()), kJson, std::move(body));
  }
}

}  // namespace

bool EnvdHttp::Serves(const http::Request& request) { return request.find("e2b-sandbox-id") != request.end(); }

bool EnvdHttp::ForCodeInterpreter(const http::Request& request) {
  return Serves(request) && request["e2b-sandbox-port"] == "49999";
}

absl::StatusOr<std::string> EnvdCaller(const api::E2bAuth& auth, const http::Request& request) {
  std::string token(request["x-access-token"]);
  if (token.empty()) token = std::string(request["e2b-traffic-access-token"]);
  auto owner = auth.CheckAccess(std::string(request["e2b-sandbox-id"]), token);
  if (!owner.ok()) return owner.status();
  if (absl::StatusOr<std::string> user = BasicUser(request); !user.ok()) return user.status();
  return owner;
}

asio::awaitable<absl::StatusOr<EnvdSandbox>> EnvdHttp::Open(const http::Request& request, bool fresh) {
  auto owner = EnvdCaller(*auth_, request);
  if (!owner.ok()) co_return owner.status();
  std::string id(request["e2b-sandbox-id"]);
  absl::StatusOr<EnvdSandbox> s = co_await envd_->Open(std::move(id), *std::move(owner), fresh);
  if (s.ok()) s->user = *BasicUser(request);  // EnvdCaller checked the header
  co_return s;
}

asio::awaitable<void> EnvdHttp::Handle(const Route* route, http::Request& request, http::Responder& responder) {
  const std::string path = http::ParseTarget(absl::string_view(request.target().data(), request.target().size()))
                               .value_or(http::Target{})
                               .path;
  const bool rpc = absl::StartsWith(path, "/process.Process/") || absl::StartsWith(path, "/filesystem.Filesystem/");
  const bool stream = absl::StartsWithIgnoreCase(std::string(request[bhttp::field::content_type]), kStreamType);
  if (route == nullptr && rpc) {
    const absl::Status unknown = absl::UnimplementedError(absl::StrCat(path.substr(1), " is not served here"));
    co_await ConnectError(responder, unknown, stream);
  } else if (route == nullptr) {
    const absl::Status none = absl::NotFoundError("no such envd route");
    co_await RestError(responder, none, 404);
  } else if (!route->Takes(request.method())) {
    const absl::Status wrong = absl::InvalidArgumentError("method not allowed");
    co_await RestError(responder, wrong, 405);
  } else if (route->door == Door::kCodeInterpreter) {
    co_await Code(path, request, responder);
  } else if (route->unary != nullptr || route->stream != nullptr) {
    co_await Rpc(*route, request, responder);
  } else if (route->path == "/health") {
    co_await Health(request, responder);
  } else {
    co_await Files(request, responder);
  }
}

asio::awaitable<void> EnvdHttp::Health(const http::Request& request, http::Responder& responder) {
  auto s = co_await Open(request, /*fresh=*/true);  // isRunning() must see a kill or an expiry at once
  if (s.ok()) {
    std::string empty;
    co_await responder.Send(204, kJson, std::move(empty));
    co_return;
  }
  // 502: the sandbox is not running (what the SDK's isRunning() reads).
  const int status = s.status().code() == absl::StatusCode::kUnavailable ? 502 : FilesStatus(s.status().code());
  co_await RestError(responder, s.status(), status);
}

asio::awaitable<void> EnvdHttp::Rpc(const Route& route, http::Request& request, http::Responder& responder) {
  const bool stream = absl::StartsWithIgnoreCase(std::string(request[bhttp::field::content_type]), kStreamType);
  absl::StatusOr<std::string> message = stream ? http::connect::OnlyMessage(request.body()) : request.body();
  absl::Status refused = message.status();
  if (refused.ok() && stream != (route.stream != nullptr)) {
    refused = absl::InvalidArgumentError(absl::StrCat(route.path.substr(1),
                                                      stream ? " is a unary call: send " : " is a server stream: send ",
                                                      stream ? kJson : kStreamType));
  }
  absl::StatusOr<EnvdSandbox> s = absl::UnknownError("not opened");
  if (refused.ok()) {
    s = co_await Open(request, /*fresh=*/false);
  } else {
    s = refused;
  }
  if (s.ok()) {
    const bool files = absl::StartsWith(route.path, "/filesystem.");
    if (absl::Status admitted = CheckEnvdUser(*s, files); !admitted.ok()) s = admitted;
  }
  if (!s.ok()) {
    co_await ConnectError(responder, s.status(), stream);
    co_return;
  }
  if (stream) {
    ConnectStream out(responder);
    const absl::Status ended = co_await route.stream(*envd_, *s, *message, StreamTimeout(request), out);
    co_await out.End(ended);
    co_return;
  }
  absl::StatusOr<std::string> answer = co_await route.unary(*envd_, *s, *message);
  if (!answer.ok()) {
    co_await ConnectError(responder, answer.status(), false);
  } else {
    std::string body = *std::move(answer);
    co_await responder.Send(200, kJson, std::move(body));
  }
}

asio::awaitable<void> EnvdHttp::Files(http::Request& request, http::Responder& responder) {
  auto target = http::ParseTarget(absl::string_view(request.target().data(), request.target().size()));
  auto query = [&](const char* key) {
    return target.ok() && target->query.contains(key) ? target->query.at(key) : std::string();
  };
  absl::StatusOr<EnvdSandbox> s = co_await Open(request, /*fresh=*/false);
  if (s.ok()) {
    s->user = EnvdUser(query("username"));
    if (absl::Status admitted = CheckEnvdUser(*s, /*files=*/true); !admitted.ok()) s = admitted;
  }
  if (!s.ok()) {
    co_await RestError(responder, s.status(), FilesStatus(s.status().code()));
    co_return;
  }
  if (request.method() == bhttp::verb::get) {
    std::string path = query("path");
    auto data = co_await envd_->Download(*s, std::move(path));
    if (!data.ok()) {
      co_await RestError(responder, data.status(), FilesStatus(data.status().code()));
    } else {
      std::string body = *std::move(data);
      co_await responder.Send(200, "application/octet-stream", std::move(body));
    }
    co_return;
  }
  // What to write: the parts named `file` of a form (each at the query's path, else its filename), or the body.
  absl::StatusOr<std::vector<EnvdFile>> files = std::vector<EnvdFile>();
  const std::string type(request[bhttp::field::content_type]);
  const std::string encoding(request[bhttp::field::content_encoding]);
  if (!encoding.empty() && !absl::EqualsIgnoreCase(encoding, "identity")) {
    files = absl::InvalidArgumentError("compressed uploads (gzip) are not supported: write without gzip");
  } else if (absl::StartsWithIgnoreCase(type, "multipart/")) {
    auto boundary = MultipartBoundary(type);
    auto parts = boundary.ok() ? ParseMultipart(request.body(), *boundary)
                               : absl::StatusOr<std::vector<FormPart>>(boundary.status());
    if (!parts.ok()) files = parts.status();
    for (FormPart& part : parts.ok() ? *parts : std::vector<FormPart>()) {
      if (part.name != "file") continue;
      files->push_back({query("path").empty() ? part.filename : query("path"), std::move(part.data)});
    }
  } else {
    files->push_back({query("path"), std::move(request.body())});
  }
  absl::StatusOr<std::vector<envd::EntryInfo>> written = absl::UnknownError("not written");
  if (files.ok()) {
    written = co_await envd_->Upload(*s, *std::move(files));
  } else {
    written = files.status();
  }
  if (!written.ok()) {
    co_await RestError(responder, written.status(), FilesStatus(written.status().code()));
    co_return;
  }
  // envd's answer: [{"name", "type": "file", "path"}] (the REST API's EntryInfo, not the RPCs').
  boost::json::array out;
  for (const envd::EntryInfo& e : *written) out.push_back({{"name", e.name()}, {"type", "file"}, {"path", e.path()}});
  std::string body = boost::json::serialize(out);
  co_await responder.Send(200, kJson, std::move(body));
}

asio::awaitable<void> EnvdHttp::Code(const std::string& path, http::Request& request, http::Responder& responder) {
  absl::StatusOr<EnvdSandbox> s = absl::UnimplementedError("the code interpreter is not served here");
  if (code_ != nullptr) s = co_await Open(request, /*fresh=*/false);
  if (s.ok()) co_await code_->TakeUpCarried(*s);
  if (s.ok() && path == "/execute") {
    co_await Execute(*s, request, responder);
    co_return;
  }
  absl::Status failed = s.status();
  std::string answer;
  int status = 200;
  absl::string_view rest = path;  // under /contexts/: the context's id (and /restart)
  const bool under = absl::ConsumePrefix(&rest, "/contexts/");
  const bool restart = under && absl::ConsumeSuffix(&rest, "/restart");
  if (!failed.ok()) {
    answer.clear();  // refused before any route: the sandbox or its key
  } else if (path == "/contexts" && request.method() == bhttp::verb::get) {
    boost::json::array list;
    for (const envd::CodeContext& c : code_->ListContexts(*s)) list.push_back(boost::json::parse(ToEnvdJson(c)));
    answer = boost::json::serialize(list);
  } else if (path == "/contexts") {
    envd::CreateContextRequest create;
    failed = FromEnvdJson(request.body(), &create);
    if (failed.ok()) {
      absl::StatusOr<envd::CodeContext> made = co_await code_->CreateContext(*s, std::move(create));
      failed = made.status();
      if (made.ok()) answer = ToEnvdJson(*made);
    }
  } else if (restart && request.method() == bhttp::verb::post) {
    std::string id(rest);
    failed = co_await code_->RestartContext(*s, std::move(id));
    status = 204;
  } else if (under && !restart && request.method() == bhttp::verb::delete_ && !rest.empty() &&
             rest.find('/') == absl::string_view::npos) {
    failed = code_->RemoveContext(*s, std::string(rest));
    status = 204;
  } else {
    failed = absl::NotFoundError("no such code interpreter route");
  }
  if (!failed.ok()) {
    // 502: the sandbox is not running (the SDK's TimeoutError).
    const int code = failed.code() == absl::StatusCode::kUnavailable ? 502 : FilesStatus(failed.code());
    co_await RestError(responder, failed, code);
  } else {
    co_await responder.Send(status, kJson, std::move(answer));
  }
}

asio::awaitable<void> EnvdHttp::Execute(const EnvdSandbox& s, http::Request& request, http::Responder& responder) {
  envd::ExecuteRequest run;
  absl::Status failed = FromEnvdJson(request.body(), &run);
  NdjsonStream out(responder);
  if (failed.ok()) failed = co_await code_->Execute(s, std::move(run), out);
  if (responder.started()) {  // a run's own errors are lines of its output; the rest ends the stream
    if (!responder.client_gone()) co_await responder.EndStream();
  } else if (!failed.ok()) {
    const int code = failed.code() == absl::StatusCode::kUnavailable ? 502 : FilesStatus(failed.code());
    co_await RestError(responder, failed, code);
  } else {
    const bool flushed = co_await out.Flush();
    if (flushed) co_await responder.EndStream();
  }
}

}  // namespace corral::sandbox_api
