// envd's filesystem (filesystem.Filesystem's calls and WatchDir) and /files, over the sandbox's host.
#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"
#include "services/sandbox_api/e2b/envd.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;

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

envd::FileType TypeOf(const v1::FileInfo& info) {
  switch (info.type()) {
    case v1::FILE_TYPE_REGULAR: return envd::FILE_TYPE_FILE;
    case v1::FILE_TYPE_DIRECTORY: return envd::FILE_TYPE_DIRECTORY;
    case v1::FILE_TYPE_SYMLINK: return envd::FILE_TYPE_SYMLINK;
    default: return envd::FILE_TYPE_UNSPECIFIED;
  }
}

// envd's EntryInfo for `info`, at E2B path `path`.
envd::EntryInfo Entry(const v1::FileInfo& info, const std::string& path) {
  envd::EntryInfo e;
  e.set_name(path.substr(path.find_last_of('/') + 1));
  e.set_type(TypeOf(info));
  e.set_path(path);
  e.set_size(static_cast<int64_t>(info.size()));
  e.set_mode(info.permissions());
  e.set_permissions(Permissions(info));
  e.set_owner("user");
  e.set_group("user");
  if (info.has_modify_time()) *e.mutable_modified_time() = info.modify_time();
  if (info.type() == v1::FILE_TYPE_SYMLINK) e.set_symlink_target(info.link_target());
  return e;
}

std::string Join(const std::string& dir, const std::string& name) {
  return dir == "/" ? absl::StrCat("/", name) : absl::StrCat(dir, "/", name);
}

}  // namespace

asio::awaitable<absl::StatusOr<envd::EntryInfo>> Envd::StatPath(const EnvdSandbox& s, std::string path) {
  auto p = HostPath(path);
  if (!p.ok()) co_return p.status();
  sandbox::CallOptions options{.deadline = clock_->Now() + absl::Seconds(30)};
  auto info = co_await s.host->Stat(s.lease.sandbox_id(), *p, options);
  if (!info.ok()) {
    ForgetIfGone(s, info.status());
    co_return info.status();
  }
  co_return Entry(*info, *p);
}

asio::awaitable<absl::StatusOr<envd::StatResponse>> Envd::Stat(const EnvdSandbox& s, envd::StatRequest request) {
  auto entry = co_await StatPath(s, request.path());
  if (!entry.ok()) co_return entry.status();
  envd::StatResponse out;
  *out.mutable_entry() = *std::move(entry);
  co_return out;
}

asio::awaitable<absl::StatusOr<envd::RemoveResponse>> Envd::Remove(const EnvdSandbox& s, envd::RemoveRequest request) {
  auto p = HostPath(request.path());
  if (!p.ok()) co_return p.status();
  sandbox::CallOptions options{.deadline = clock_->Now() + absl::Minutes(1)};
  absl::Status removed = co_await s.host->Remove(s.lease.sandbox_id(), *p, true, options);
  if (!removed.ok()) {
    ForgetIfGone(s, removed);
    co_return removed;
  }
  co_return envd::RemoveResponse();
}

asio::awaitable<absl::StatusOr<Envd::Walked>> Envd::Walk(const EnvdSandbox& s, std::string root, int depth) {
  Walked found;
  std::vector<std::pair<std::string, int>> dirs = {{root, 1}};
  const absl::Time deadline = clock_->Now() + absl::Minutes(1);
  while (!dirs.empty()) {
    auto [dir, level] = dirs.back();
    dirs.pop_back();
    sandbox::CallOptions options{.deadline = deadline};
    auto listed = co_await s.host->ListDir(s.lease.sandbox_id(), dir, options);
    if (!listed.ok()) {
      if (level == 1) {
        ForgetIfGone(s, listed.status());
        co_return listed.status();
      }
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

asio::awaitable<absl::StatusOr<envd::ListDirResponse>> Envd::ListDir(const EnvdSandbox& s,
                                                                     envd::ListDirRequest request) {
  auto root = HostPath(request.path());
  if (!root.ok()) co_return root.status();
  const int depth = static_cast<int>(std::clamp<uint32_t>(request.depth(), 1, kMaxDepth));
  auto walked = co_await Walk(s, *root, depth);
  if (!walked.ok()) co_return walked.status();
  envd::ListDirResponse out;
  for (const auto& [at, info] : *walked) *out.add_entries() = Entry(info, at);
  co_return out;
}

asio::awaitable<absl::StatusOr<envd::MakeDirResponse>> Envd::MakeDir(const EnvdSandbox& s,
                                                                     envd::MakeDirRequest request) {
  auto p = HostPath(request.path());
  if (!p.ok()) co_return p.status();
  sandbox::CallOptions options{.deadline = clock_->Now() + absl::Seconds(30)};
  auto existing = co_await s.host->Stat(s.lease.sandbox_id(), *p, options);
  if (existing.ok()) co_return absl::AlreadyExistsError(absl::StrCat("path '", *p, "' already exists"));
  if (existing.status().code() != absl::StatusCode::kNotFound) co_return existing.status();
  if (absl::Status made = co_await s.host->MakeDir(s.lease.sandbox_id(), *p, options); !made.ok()) {
    ForgetIfGone(s, made);
    co_return made;
  }
  auto entry = co_await StatPath(s, *p);
  if (!entry.ok()) co_return entry.status();
  envd::MakeDirResponse out;
  *out.mutable_entry() = *std::move(entry);
  co_return out;
}

asio::awaitable<absl::StatusOr<envd::MoveResponse>> Envd::Move(const EnvdSandbox& s, envd::MoveRequest request) {
  auto source = HostPath(request.source());
  auto destination = HostPath(request.destination());
  if (!source.ok() || !destination.ok()) co_return absl::InvalidArgumentError("source and destination are required");
  auto exists = co_await StatPath(s, *source);
  if (!exists.ok()) co_return exists.status();
  // A rename inside the sandbox, by the sandbox's own user: the host's path rules apply to the process.
  v1::ExecRequest exec;
  exec.set_sandbox_id(s.lease.sandbox_id());
  for (const std::string& arg : {std::string("mv"), std::string("-T"), std::string("--"), *source, *destination}) {
    exec.mutable_command()->add_argv(arg);
  }
  ToProto(absl::Seconds(30), exec.mutable_command()->mutable_timeout());
  sandbox::CallOptions options{.deadline = clock_->Now() + absl::Seconds(30)};
  auto moved = co_await s.host->Exec(std::move(exec), 4096, options);
  if (!moved.ok()) co_return moved.status();
  if (moved->exit.exit_code() != 0) {
    co_return absl::FailedPreconditionError(absl::StrCat(
        "cannot move '", *source, "' to '", *destination,
        "': ", absl::StripAsciiWhitespace(moved->stderr_head.empty() ? moved->output : moved->stderr_head)));
  }
  auto entry = co_await StatPath(s, *destination);
  if (!entry.ok()) co_return entry.status();
  envd::MoveResponse out;
  *out.mutable_entry() = *std::move(entry);
  co_return out;
}

asio::awaitable<absl::Status> Envd::WatchDir(const EnvdSandbox& s, envd::WatchDirRequest request,
                                             absl::Duration timeout, EnvdStream& out) {
  auto root = HostPath(request.path());
  if (!root.ok()) co_return root.status();
  const int depth = request.recursive() ? kMaxDepth : 1;
  // What the directory holds: path -> (entry, a fingerprint of its type, size and time).
  using Snapshot = std::map<std::string, std::pair<v1::FileInfo, std::string>>;
  auto scan = [&](const std::string& dir) -> asio::awaitable<absl::StatusOr<Snapshot>> {
    auto walked = co_await Walk(s, dir, depth);
    if (!walked.ok()) co_return walked.status();
    Snapshot snapshot;
    for (auto& [path, info] : *walked) {
      std::string print = absl::StrCat(info.type(), ":", info.size(), ":", info.modify_time().seconds(), ".",
                                       info.modify_time().nanos());
      snapshot.emplace(std::move(path), std::make_pair(std::move(info), std::move(print)));
    }
    co_return snapshot;
  };
  auto before = co_await scan(*root);
  if (!before.ok()) co_return before.status();
  envd::WatchDirResponse started;
  started.mutable_start();
  out.Send(started);
  if (!co_await out.Flush()) co_return absl::CancelledError("the reader is gone");
  const absl::Time end = clock_->Now() + timeout;
  absl::Time quiet_since = clock_->Now();
  while (clock_->Now() < end) {
    co_await async::SleepFor(*clock_, kWatchPoll);
    auto now = co_await scan(*root);
    if (!now.ok()) {
      if (now.status().code() != absl::StatusCode::kNotFound) co_return now.status();
      co_return absl::NotFoundError(absl::StrCat("the watched directory '", *root, "' is gone"));
    }
    bool sent = false;
    auto event = [&](const std::string& path, envd::EventType type, const v1::FileInfo* info) {
      envd::WatchDirResponse e;
      envd::FilesystemEvent* fs = e.mutable_filesystem();
      fs->set_name(path.substr(std::min(path.size(), root->size() + 1)));
      fs->set_type(type);
      if (request.include_entry() && info != nullptr) *fs->mutable_entry() = Entry(*info, path);
      out.Send(e);
      sent = true;
    };
    for (const auto& [path, entry] : *now) {
      auto old = before->find(path);
      if (old == before->end()) {
        event(path, envd::EVENT_TYPE_CREATE, &entry.first);
      } else if (old->second.second != entry.second && entry.first.type() != v1::FILE_TYPE_DIRECTORY) {
        event(path, envd::EVENT_TYPE_WRITE, &entry.first);
      }
    }
    for (const auto& [path, entry] : *before) {
      if (!now->contains(path)) event(path, envd::EVENT_TYPE_REMOVE, nullptr);
    }
    before = *std::move(now);
    if (!sent && clock_->Now() - quiet_since >= kKeepalive) {
      envd::WatchDirResponse keepalive;
      keepalive.mutable_keepalive();
      out.Send(keepalive);
      sent = true;
    }
    if (!sent) continue;
    quiet_since = clock_->Now();
    if (!co_await out.Flush()) co_return absl::CancelledError("the reader is gone");
  }
  co_return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<std::string>> Envd::Download(const EnvdSandbox& s, std::string path) {
  auto p = HostPath(path);
  if (!p.ok()) co_return p.status();
  sandbox::CallOptions options{.deadline = clock_->Now() + absl::Minutes(5)};
  auto data = co_await s.host->ReadFile(s.lease.sandbox_id(), *p, kMaxRead, options);
  if (!data.ok()) {
    ForgetIfGone(s, data.status());
    co_return data.status();
  }
  if (!data->has_value()) co_return absl::NotFoundError(absl::StrCat("path '", *p, "' does not exist"));
  co_return **std::move(data);
}

asio::awaitable<absl::StatusOr<std::vector<envd::EntryInfo>>> Envd::Upload(const EnvdSandbox& s,
                                                                           std::vector<EnvdFile> files) {
  if (files.empty()) co_return absl::InvalidArgumentError("no file in the upload (form field `file`)");
  // Every path is checked before anything is written.
  std::set<std::string> seen;
  std::vector<envd::EntryInfo> written;
  for (EnvdFile& file : files) {
    auto p = HostPath(file.path);
    if (!p.ok())
      co_return absl::InvalidArgumentError("every file needs a path (the `path` query or the part's filename)");
    if (!seen.insert(*p).second) co_return absl::InvalidArgumentError(absl::StrCat("path '", *p, "' given twice"));
    file.path = *p;
  }
  for (EnvdFile& file : files) {
    envd::EntryInfo entry;
    entry.set_name(file.path.substr(file.path.find_last_of('/') + 1));
    entry.set_type(envd::FILE_TYPE_FILE);
    entry.set_path(file.path);
    entry.set_size(static_cast<int64_t>(file.data.size()));
    v1::InlineFile inline_file;
    inline_file.set_path(std::move(file.path));
    inline_file.set_content(std::move(file.data));
    sandbox::CallOptions options{.deadline = clock_->Now() + absl::Minutes(5)};
    if (absl::Status wrote = co_await s.host->WriteFile(s.lease.sandbox_id(), inline_file, options); !wrote.ok()) {
      ForgetIfGone(s, wrote);
      co_return wrote;
    }
    written.push_back(std::move(entry));
  }
  co_return written;
}

}  // namespace corral::sandbox_api
