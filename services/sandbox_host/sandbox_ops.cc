#include "services/sandbox_host/sandbox_ops.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libs/api/proto_time.h"
#include "libs/core/status_macros.h"

namespace corral::sandbox {
namespace {

std::string LinkTarget(int dir_fd, const std::string& name) {
  char buf[4096];
  ssize_t n = readlinkat(dir_fd, name.c_str(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

}  // namespace

// Appends a background process's output to its output file (or drops it), on the exec manager's threads. The
// file stops growing at the sandbox's file size limit, as the process's own writes would.
void SinkOutput(const std::shared_ptr<Execution>& execution, std::optional<FileWriter> file, int64_t max_bytes) {
  struct Sink {
    absl::Mutex mu;
    std::optional<FileWriter> file ABSL_GUARDED_BY(mu);
  };
  auto sink = std::make_shared<Sink>();
  {
    absl::MutexLock lock(&sink->mu);
    sink->file = std::move(file);
  }
  std::weak_ptr<Execution> weak = execution;
  execution->SetListener([weak, sink, max_bytes] {
    auto e = weak.lock();
    if (e == nullptr) return;
    absl::MutexLock lock(&sink->mu);
    while (std::optional<OutputEvent> ev = e->Next()) {
      if (ev->kind == OutputEvent::kExit || !sink->file) continue;
      if (sink->file->written() + static_cast<int64_t>(ev->data.size()) > max_bytes ||
          !sink->file->Write(ev->data).ok()) {
        sink->file.reset();  // full (or failing): the rest is dropped
      }
    }
  });
}

absl::Status AuthorizeSandbox(const CallAuthenticator& auth, const SandboxManager& manager,
                              const grpc::ServerContextBase& ctx, const std::string& sandbox_id) {
  if (auth.insecure() || auth.CheckCluster(ctx).ok()) return absl::OkStatus();
  auto token = CallAuthenticator::BearerToken(ctx);
  if (!token.ok()) return token.status();
  return manager.CheckSandboxToken(sandbox_id, *token);
}

absl::StatusOr<std::shared_ptr<const Sandbox>> OpenSandbox(const CallAuthenticator& auth, SandboxManager& manager,
                                                           const grpc::ServerContextBase& ctx,
                                                           const std::string& sandbox_id) {
  CORRAL_RETURN_IF_ERROR(AuthorizeSandbox(auth, manager, ctx, sandbox_id));
  return manager.Find(sandbox_id);
}

absl::StatusOr<SandboxFile> OpenSandboxPath(const CallAuthenticator& auth, SandboxManager& manager,
                                            const grpc::ServerContextBase& ctx, const std::string& sandbox_id,
                                            const std::string& path, bool allow_home) {
  CORRAL_ASSIGN_OR_RETURN(std::shared_ptr<const Sandbox> sb, OpenSandbox(auth, manager, ctx, sandbox_id));
  CORRAL_ASSIGN_OR_RETURN(SandboxPath parsed, sb->ParsePath(path, allow_home));
  return SandboxFile{std::move(sb), std::move(parsed)};
}

absl::StatusOr<FileStat> StatFile(const SandboxFile& file) {
  FileStat out;
  CORRAL_ASSIGN_OR_RETURN(out.st, StatPath(file.sandbox->home_fd.get(), file.path));
  if (S_ISLNK(out.st.st_mode)) {
    auto dir = OpenParentDir(file.sandbox->home_fd.get(), file.path);
    if (dir.ok()) out.link_target = LinkTarget(dir->get(), file.path.components.back());
  }
  return out;
}

absl::StatusOr<DirPage> ListDirectory(const SandboxFile& file, const std::string& page_token, size_t page_size) {
  SandboxPath inside = file.path;
  inside.components.push_back(".");
  CORRAL_ASSIGN_OR_RETURN(UniqueFd dir, OpenParentDir(file.sandbox->home_fd.get(), inside));
  // A CLOEXEC copy: a plain dup() could be inherited by a sandbox process spawned meanwhile.
  DIR* d = fdopendir(fcntl(dir.get(), F_DUPFD_CLOEXEC, 0));
  if (d == nullptr) return absl::FailedPreconditionError("cannot list the directory");
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != ".." && (page_token.empty() || name > page_token)) names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  DirPage page;
  for (size_t i = 0; i < names.size() && i < page_size; ++i) {
    DirPage::Entry entry;
    if (fstatat(dir.get(), names[i].c_str(), &entry.stat.st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISLNK(entry.stat.st.st_mode)) entry.stat.link_target = LinkTarget(dir.get(), names[i]);
    entry.path = file.path.normalized.empty()  ? names[i]
                 : file.path.normalized == "/" ? "/" + names[i]
                                               : absl::StrCat(file.path.normalized, "/", names[i]);
    entry.name = names[i];
    page.entries.push_back(std::move(entry));
  }
  if (names.size() > page_size) page.next_page_token = names[page_size - 1];
  return page;
}

absl::Status RemoveFile(const SandboxFile& file, bool recursive) {
  const auto& components = file.path.components;
  if (components.empty()) return absl::InvalidArgumentError("the sandbox's home (or image root) cannot be removed");
  // Where the sandbox's view has a mount (image: /tmp, /proc, /dev) or a bind (a task path, /tmp).
  std::vector<std::string> roots = {"/tmp", "/proc", "/dev"};
  if (!file.sandbox->in_image()) roots = file.sandbox->spec.task_paths;
  const std::string top = components.size() == 1 ? "/" + components[0] : "";
  if (top == "/.tmp" && !file.sandbox->in_image()) return absl::InvalidArgumentError("/tmp cannot be removed");
  if (std::find(roots.begin(), roots.end(), top) != roots.end()) {
    return absl::InvalidArgumentError(absl::StrCat(top, " cannot be removed"));
  }
  return RemovePath(file.sandbox->home_fd.get(), file.path, recursive);
}

std::vector<std::vector<ProcessInfo>> AdoptCarried(ExecManager& execs, SandboxManager::CreateResult& result) {
  std::vector<std::vector<ProcessInfo>> out;
  for (SandboxManager::Created& child : result.created) {
    std::vector<ProcessInfo>& infos = out.emplace_back();
    for (CarriedProcess& carried : child.carried) {
      ExecOptions o;
      o.kind = static_cast<ProcessKind>(carried.kind);
      o.argv = carried.argv;
      o.output_path = carried.output_path;
      o.copy_of = carried.copy_of;
      std::optional<FileWriter> file;
      if (o.kind == ProcessKind::kBackground && !o.output_path.empty()) {
        auto path = child.sandbox->ParsePath(o.output_path);
        if (path.ok()) {
          auto opened = FileWriter::Open(child.sandbox->home_fd.get(), *path, WriteMode::kAppend, 0644,
                                         child.sandbox->FileOwner(), /*make_parents=*/true);
          if (opened.ok()) file = *std::move(opened);
        }
      }
      const ProcessKind kind = o.kind;
      auto adopted = execs.Adopt(child.sandbox, std::move(carried.process), std::move(o));
      if (!adopted.ok()) {
        result.not_carried.push_back(
            absl::StrCat(carried.copy_of, " into ", child.sandbox->id, ": ", adopted.status().message()));
        continue;
      }
      if (kind == ProcessKind::kBackground) {
        (*adopted)->unread = false;  // its output goes to its file, or nowhere
        SinkOutput(*adopted, std::move(file), child.sandbox->spec.rlimits.file_size_bytes);
      }
      infos.push_back((*adopted)->Info());
    }
  }
  return out;
}

absl::StatusOr<ExecOptions> ExecOptionsFrom(const Sandbox& sb, const v1::Command& command, const HostOptions& host) {
  ExecOptions o;
  o.argv = {command.argv().begin(), command.argv().end()};
  if (o.argv.empty()) return absl::InvalidArgumentError("command.argv must not be empty");
  o.env = {command.env().begin(), command.env().end()};
  o.fork_ready = command.fork_ready();
  CORRAL_ASSIGN_OR_RETURN(o.user, sb.ResolveUser(command.user()));
  if (command.has_timeout()) {
    o.timeout = FromProto(command.timeout());
    if (o.timeout <= absl::ZeroDuration() || o.timeout > host.max_exec_timeout) {
      return absl::InvalidArgumentError(
          absl::StrCat("command.timeout must be above 0 and at most ", absl::FormatDuration(host.max_exec_timeout)));
    }
  } else {
    o.timeout = host.default_exec_timeout;
  }
  if (!command.cwd().empty()) {
    auto cwd = sb.ParsePath(command.cwd(), /*allow_home=*/true);
    if (!cwd.ok()) return cwd.status();
    auto st = StatPath(sb.home_fd.get(), *cwd);
    if (!st.ok()) return st.status();
    if (!S_ISDIR(st->st_mode)) return absl::FailedPreconditionError("command.cwd is not a directory");
    // Inside the sandbox's view a task path is bound at its absolute path; elsewhere it lives in the home. An
    // image sandbox's paths are already absolute in its root.
    o.cwd = sb.in_image() ? cwd->normalized
            : command.cwd()[0] == '/' && sb.protections.mount_namespace
                ? command.cwd()
                : absl::StrCat(sb.home, "/", absl::StrJoin(cwd->components, "/"));
  }
  return o;
}

absl::StatusOr<std::shared_ptr<Execution>> StartCommand(SandboxManager& sandboxes, ExecManager& execs,
                                                        const CallAuthenticator& auth,
                                                        const grpc::ServerContextBase& ctx,
                                                        const std::string& sandbox_id, const v1::Command& command,
                                                        ExecOptions extra) {
  CORRAL_RETURN_IF_ERROR(AuthorizeSandbox(auth, sandboxes, ctx, sandbox_id));
  CORRAL_ASSIGN_OR_RETURN(std::shared_ptr<const Sandbox> sb, sandboxes.Find(sandbox_id));
  CORRAL_ASSIGN_OR_RETURN(ExecOptions options, ExecOptionsFrom(*sb, command, sandboxes.options()));
  options.kind = extra.kind;
  options.stdin_data = std::move(extra.stdin_data);
  options.max_output_bytes = extra.max_output_bytes;
  options.output_path = std::move(extra.output_path);
  if (options.kind == ProcessKind::kBackground && !command.has_timeout()) options.timeout = absl::ZeroDuration();
  return execs.Start(std::move(sb), std::move(options));
}

}  // namespace corral::sandbox
