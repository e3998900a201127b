// envd's filesystem (filesystem.Filesystem's unary calls and WatchDir) and /files, over the lease's host.
#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"
#include "libs/http/connect_codec.h"
#include "services/sandbox_api/e2b/envd.h"
#include "services/sandbox_api/e2b/envd_wire.h"
#include "services/sandbox_api/e2b/multipart.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace envd_wire;  // NOLINT: this file is envd's

constexpr absl::Duration kWatchPoll = absl::Milliseconds(200);
constexpr size_t kMaxRead = 256 << 20;
constexpr size_t kMaxEntries = 20000;
constexpr int kMaxDepth = 32;

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

}  // namespace

asio::awaitable<absl::StatusOr<json::object>> Envd::Filesystem(const std::string& method, const Target& t,
                                                               const json::object& body) {
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
    sandbox::CallOptions options{.deadline = clock_->Now() + absl::Minutes(1)};
    absl::Status s = co_await t.host->Remove(t.lease.sandbox_id(), *p, true, options);
    if (!s.ok()) co_return s;
    co_return json::object();
  }
  co_return absl::UnimplementedError(absl::StrCat(method, " is not served (see docs/sandbox-apis.md)"));
}

asio::awaitable<absl::StatusOr<json::object>> Envd::Stat(const Target& t, std::string path) {
  auto p = HostPath(path);
  if (!p.ok()) co_return p.status();
  sandbox::CallOptions options{.deadline = clock_->Now() + absl::Seconds(30)};
  auto info = co_await t.host->Stat(t.lease.sandbox_id(), *p, options);
  if (!info.ok()) co_return info.status();
  co_return json::object{{"entry", Entry(*info, *p)}};
}

asio::awaitable<absl::StatusOr<Envd::Walked>> Envd::Walk(const Target& t, std::string root, int depth) {
  Walked found;
  std::vector<std::pair<std::string, int>> dirs = {{root, 1}};
  const absl::Time deadline = clock_->Now() + absl::Minutes(1);
  while (!dirs.empty()) {
    auto [dir, level] = dirs.back();
    dirs.pop_back();
    sandbox::CallOptions options{.deadline = deadline};
    auto listed = co_await t.host->ListDir(t.lease.sandbox_id(), dir, options);
    if (!listed.ok()) {
      if (level == 1) co_return listed.status();
      continue;  // a directory that went away under the walk
    }
    for (v1::FileInfo& info : *listed) {
      std::string at = Join(dir, info.name());
      if (info.type() == v1::FILE_TYPE_DIRECTORY && level < depth) dirs.emplace_back(at, level + 1);
      found.emplace_back(std::move(at), std::move(info));
    }
    if (found.size() > kMaxEntries) co_return absl::ResourceExhaustedError("over 20000 entries: go less deep");
  }
  co_return found;
}

asio::awaitable<absl::StatusOr<json::object>> Envd::ListDir(const Target& t, std::string path, int depth) {
  auto root = HostPath(path);
  if (!root.ok()) co_return root.status();
  auto walked = co_await Walk(t, *root, depth);
  if (!walked.ok()) co_return walked.status();
  json::array entries;
  for (const auto& [at, info] : *walked) entries.push_back(Entry(info, at));
  co_return json::object{{"entries", std::move(entries)}};
}

asio::awaitable<absl::StatusOr<json::object>> Envd::MakeDir(const Target& t, std::string path) {
  auto p = HostPath(path);
  if (!p.ok()) co_return p.status();
  sandbox::CallOptions options{.deadline = clock_->Now() + absl::Seconds(30)};
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
  sandbox::CallOptions options{.deadline = clock_->Now() + absl::Seconds(30)};
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

asio::awaitable<void> Envd::WatchDir(Target t, json::object body, absl::Duration timeout, http::Responder& responder) {
  auto root = HostPath(StringField(body, "path"));
  const bool include_entry = BoolField(body, "includeEntry");
  const int depth = BoolField(body, "recursive") ? kMaxDepth : 1;
  // What the directory holds: path -> (entry, a fingerprint of its type, size and time).
  using Snapshot = std::map<std::string, std::pair<v1::FileInfo, std::string>>;
  auto scan = [&](const std::string& dir) -> asio::awaitable<absl::StatusOr<Snapshot>> {
    auto walked = co_await Walk(t, dir, depth);
    if (!walked.ok()) co_return walked.status();
    Snapshot snapshot;
    for (auto& [path, info] : *walked) {
      std::string print = absl::StrCat(info.type(), ":", info.size(), ":", info.modify_time().seconds(), ".",
                                       info.modify_time().nanos());
      snapshot.emplace(std::move(path), std::make_pair(std::move(info), std::move(print)));
    }
    co_return snapshot;
  };
  absl::StatusOr<Snapshot> before = absl::InvalidArgumentError("path is required");
  if (root.ok()) before = co_await scan(*root);
  if (!before.ok()) {
    co_await EndStreamWith(responder, before.status());
    co_return;
  }
  const std::string started = http::connect::Envelope(R"({"start":{}})");
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
      out += http::connect::Envelope(json::serialize(json::object{{"filesystem", std::move(e)}}));
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
    if (out.empty() && clock_->Now() - quiet_since >= envd_wire::kKeepalive)
      out = http::connect::Envelope(R"({"keepalive":{}})");
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
  sandbox::CallOptions options{.deadline = clock_->Now() + absl::Minutes(5)};
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
  const std::string type(request[boost::beast::http::field::content_type]);
  const std::string encoding(request[boost::beast::http::field::content_encoding]);
  if (!encoding.empty() && !absl::EqualsIgnoreCase(encoding, "identity")) {
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
    sandbox::CallOptions options{.deadline = clock_->Now() + absl::Minutes(5)};
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
