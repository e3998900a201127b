#include "services/sandbox_host/sandbox_service.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <optional>

#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "libs/rpc/ids.h"
#include "libs/rpc/pagination.h"
#include "libs/rpc/status_conversion.h"
#include "services/sandbox_host/containment.h"
#include "services/sandbox_host/convert.h"
#include "services/sandbox_host/exec_reactor.h"
#include "services/sandbox_host/file_reactors.h"
#include "services/sandbox_host/sandbox_path.h"
#include "services/sandbox_host/template_builder.h"

namespace corral::sandbox {
namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

std::string LinkTarget(int dir_fd, const std::string& name) {
  char buf[4096];
  ssize_t n = readlinkat(dir_fd, name.c_str(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

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

}  // namespace

absl::Status AuthorizeSandbox(const CallAuthenticator& auth, const SandboxManager& manager,
                              const grpc::ServerContextBase& ctx, const std::string& sandbox_id) {
  if (auth.insecure() || auth.CheckCluster(ctx).ok()) return absl::OkStatus();
  auto token = CallAuthenticator::BearerToken(ctx);
  if (!token.ok()) return token.status();
  return manager.CheckSandboxToken(sandbox_id, *token);
}

absl::Status SandboxService::CreateInto(int64_t count, SandboxSpec spec, v1::CreateSandboxesResponse* resp) {
  CORRAL_ASSIGN_OR_RETURN(SandboxManager::CreateResult result, sandboxes_->Create(count, std::move(spec)));
  for (const auto& created : result.created) {
    v1::CreatedSandbox* out = resp->add_sandboxes();
    ToProto(*created.sandbox, 0, out->mutable_sandbox());
    out->set_capability_token(created.token);
  }
  resp->set_rejected(static_cast<uint32_t>(result.rejected));
  resp->set_rejected_reason(result.rejected_reason);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* SandboxService::CreateSandboxes(grpc::CallbackServerContext* ctx,
                                                          const v1::CreateSandboxesRequest* req,
                                                          v1::CreateSandboxesResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return Done(ctx, s);
  auto spec = FromProto(req->spec());
  if (!spec.ok()) return Done(ctx, spec.status());
  const int64_t count = req->count() == 0 ? 1 : req->count();
  if (spec->template_key.empty() || templates_ == nullptr) return Done(ctx, CreateInto(count, *std::move(spec), resp));
  // A template still building is waited for; the create then runs on the thread that finished the build.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const std::string key = spec->template_key;
  templates_->WhenReady(key, [this, reactor, resp, count, spec = *std::move(spec)](auto image) mutable {
    reactor->Finish(ToGrpcStatus(image.ok() ? CreateInto(count, std::move(spec), resp) : image.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* SandboxService::GetSandbox(grpc::CallbackServerContext* ctx, const v1::GetSandboxRequest* req,
                                                     v1::Sandbox* resp) {
  if (auto s = AuthorizeSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()); !s.ok()) return Done(ctx, s);
  auto sb = sandboxes_->Find(req->sandbox_id());
  if (sb.ok()) ToProto(**sb, 0, resp);
  return Done(ctx, sb.status());
}

grpc::ServerUnaryReactor* SandboxService::ListSandboxes(grpc::CallbackServerContext* ctx,
                                                        const v1::ListSandboxesRequest* req,
                                                        v1::ListSandboxesResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return Done(ctx, s);
  auto page = PageSize(req->page_size());
  if (!page.ok()) return Done(ctx, page.status());
  using SandboxRef = std::shared_ptr<const Sandbox>;
  resp->set_next_page_token(FillPage(
      sandboxes_->List(), req->page_token(), *page, [](const SandboxRef& sb) { return sb->id; },
      [&](const SandboxRef& sb) { return MatchesLabels(req->label_selector(), sb->spec.labels); },
      [&](const SandboxRef& sb) { ToProto(*sb, 0, resp->add_sandboxes()); }));
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* SandboxService::DeleteSandbox(grpc::CallbackServerContext* ctx,
                                                        const v1::DeleteSandboxRequest* req,
                                                        v1::DeleteSandboxResponse* resp) {
  if (auto s = AuthorizeSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()); !s.ok()) return Done(ctx, s);
  resp->set_existed(sandboxes_->Delete(req->sandbox_id()));
  return Done(ctx, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::ExecEvent>* SandboxService::Exec(grpc::CallbackServerContext* ctx,
                                                              const v1::ExecRequest* req) {
  return new ExecReactor(sandboxes_, execs_, auth_, clock_, ctx, *req);
}

grpc::ServerBidiReactor<v1::ExecInput, v1::ExecEvent>* SandboxService::ExecInteractive(
    grpc::CallbackServerContext* ctx) {
  return new ExecInteractiveReactor(sandboxes_, execs_, auth_, clock_, ctx);
}

grpc::ServerUnaryReactor* SandboxService::StartProcess(grpc::CallbackServerContext* ctx,
                                                       const v1::StartProcessRequest* req, v1::Process* resp) {
  if (auto s = AuthorizeSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()); !s.ok()) return Done(ctx, s);
  auto sb = sandboxes_->Find(req->sandbox_id());
  if (!sb.ok()) return Done(ctx, sb.status());
  std::optional<FileWriter> file;
  if (!req->output_path().empty()) {
    auto path = ParseSandboxPath(req->output_path(), (*sb)->spec.task_paths);
    if (!path.ok()) return Done(ctx, path.status());
    auto writer = FileWriter::Open((*sb)->home_fd.get(), *path, WriteMode::kAppend, 0644,
                                   Owner{(*sb)->uid, (*sb)->uid}, /*make_parents=*/true);
    if (!writer.ok()) return Done(ctx, writer.status());
    file = *std::move(writer);
  }
  ExecOptions extra;
  extra.kind = ProcessKind::kBackground;
  extra.stdin_data = req->stdin();
  extra.output_path = req->output_path();
  auto execution = StartCommand(*sandboxes_, *execs_, *auth_, *ctx, req->sandbox_id(), req->command(), extra);
  if (!execution.ok()) return Done(ctx, execution.status());
  SinkOutput(*execution, std::move(file), (*sb)->spec.rlimits.file_size_bytes);
  ToProto((*execution)->Info(), resp);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* SandboxService::ListProcesses(grpc::CallbackServerContext* ctx,
                                                        const v1::ListProcessesRequest* req,
                                                        v1::ListProcessesResponse* resp) {
  if (auto s = AuthorizeSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()); !s.ok()) return Done(ctx, s);
  auto sb = sandboxes_->Find(req->sandbox_id());
  if (!sb.ok()) return Done(ctx, sb.status());
  for (const ProcessInfo& p : execs_->List(req->sandbox_id(), req->include_exited())) {
    ToProto(p, resp->add_processes());
  }
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* SandboxService::KillProcess(grpc::CallbackServerContext* ctx,
                                                      const v1::KillProcessRequest* req, v1::Process* resp) {
  if (auto s = AuthorizeSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()); !s.ok()) return Done(ctx, s);
  const int sig = req->signal() == 0 ? SIGKILL : req->signal();
  if (sig < 1 || sig > 64) return Done(ctx, absl::InvalidArgumentError(absl::StrCat("signal ", sig, " is not 1-64")));
  auto sb = sandboxes_->Find(req->sandbox_id());
  if (!sb.ok()) return Done(ctx, sb.status());
  auto process = execs_->Signal(req->sandbox_id(), req->process_id(), sig);
  if (process.ok()) ToProto(*process, resp);
  return Done(ctx, process.status());
}

grpc::ServerReadReactor<v1::WriteFileRequest>* SandboxService::WriteFile(grpc::CallbackServerContext* ctx,
                                                                         v1::FileInfo* resp) {
  return new WriteFileReactor(sandboxes_, auth_, ctx, resp);
}

grpc::ServerWriteReactor<v1::ReadFileResponse>* SandboxService::ReadFile(grpc::CallbackServerContext* ctx,
                                                                         const v1::ReadFileRequest* req) {
  return new ReadFileReactor(sandboxes_, auth_, ctx, *req);
}

grpc::ServerUnaryReactor* SandboxService::Stat(grpc::CallbackServerContext* ctx, const v1::StatRequest* req,
                                               v1::FileInfo* resp) {
  if (auto s = AuthorizeSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()); !s.ok()) return Done(ctx, s);
  auto sb = sandboxes_->Find(req->sandbox_id());
  if (!sb.ok()) return Done(ctx, sb.status());
  auto path = ParseSandboxPath(req->path(), (*sb)->spec.task_paths, /*allow_home=*/true);
  if (!path.ok()) return Done(ctx, path.status());
  auto st = StatPath((*sb)->home_fd.get(), *path);
  if (!st.ok()) return Done(ctx, st.status());
  std::string target;
  if (S_ISLNK(st->st_mode)) {
    auto dir = OpenParentDir((*sb)->home_fd.get(), *path);
    if (dir.ok()) target = LinkTarget(dir->get(), path->components.back());
  }
  ToProto(*st, path->normalized, path->components.empty() ? "" : path->components.back(), target, resp);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* SandboxService::ListDir(grpc::CallbackServerContext* ctx, const v1::ListDirRequest* req,
                                                  v1::ListDirResponse* resp) {
  if (auto s = AuthorizeSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()); !s.ok()) return Done(ctx, s);
  auto page_size = PageSize(req->page_size());
  if (!page_size.ok()) return Done(ctx, page_size.status());
  auto sb = sandboxes_->Find(req->sandbox_id());
  if (!sb.ok()) return Done(ctx, sb.status());
  auto path = ParseSandboxPath(req->path(), (*sb)->spec.task_paths, /*allow_home=*/true);
  if (!path.ok()) return Done(ctx, path.status());
  // Open the directory itself through the walker (a final symlink is refused, never followed).
  SandboxPath inside = *path;
  inside.components.push_back(".");
  auto dir = OpenParentDir((*sb)->home_fd.get(), inside);
  if (!dir.ok()) return Done(ctx, dir.status());
  // A CLOEXEC copy: a plain dup() could be inherited by a sandbox process spawned meanwhile.
  DIR* d = fdopendir(fcntl(dir->get(), F_DUPFD_CLOEXEC, 0));
  if (d == nullptr) return Done(ctx, absl::FailedPreconditionError("cannot list the directory"));
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != ".." && (req->page_token().empty() || name > req->page_token())) names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  const size_t page = static_cast<size_t>(*page_size);
  for (size_t i = 0; i < names.size() && i < page; ++i) {
    struct stat st {};
    if (fstatat(dir->get(), names[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    std::string child = path->normalized.empty() ? names[i] : absl::StrCat(path->normalized, "/", names[i]);
    ToProto(st, child, names[i], S_ISLNK(st.st_mode) ? LinkTarget(dir->get(), names[i]) : "", resp->add_entries());
  }
  if (names.size() > page) resp->set_next_page_token(names[page - 1]);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* SandboxService::Remove(grpc::CallbackServerContext* ctx, const v1::RemoveRequest* req,
                                                 v1::RemoveResponse*) {
  if (auto s = AuthorizeSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()); !s.ok()) return Done(ctx, s);
  auto sb = sandboxes_->Find(req->sandbox_id());
  if (!sb.ok()) return Done(ctx, sb.status());
  auto path = ParseSandboxPath(req->path(), (*sb)->spec.task_paths, /*allow_home=*/true);
  if (!path.ok()) return Done(ctx, path.status());
  // The home, /tmp and task path roots are the sandbox's structure, not its files.
  const auto& roots = (*sb)->spec.task_paths;
  const bool structural =
      path->components.empty() ||
      (path->components.size() == 1 &&
       (path->components[0] == ".tmp" ||
        std::find(roots.begin(), roots.end(), "/" + path->components[0]) != roots.end()));
  if (structural) return Done(ctx, absl::InvalidArgumentError("the home, /tmp and task path roots cannot be removed"));
  return Done(ctx, RemovePath((*sb)->home_fd.get(), *path, req->recursive()));
}

grpc::ServerUnaryReactor* SandboxService::MakeDir(grpc::CallbackServerContext* ctx, const v1::MakeDirRequest* req,
                                                  v1::FileInfo* resp) {
  if (auto s = AuthorizeSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()); !s.ok()) return Done(ctx, s);
  auto sb = sandboxes_->Find(req->sandbox_id());
  if (!sb.ok()) return Done(ctx, sb.status());
  auto path = ParseSandboxPath(req->path(), (*sb)->spec.task_paths);
  if (!path.ok()) return Done(ctx, path.status());
  const mode_t mode = req->permissions() == 0 ? 0755 : (req->permissions() & 0777);
  if (auto s = MakeDirectory((*sb)->home_fd.get(), *path, req->make_parents(), mode, Owner{(*sb)->uid, (*sb)->uid});
      !s.ok()) {
    return Done(ctx, s);
  }
  auto st = StatPath((*sb)->home_fd.get(), *path);
  if (st.ok()) ToProto(*st, path->normalized, path->components.back(), "", resp);
  return Done(ctx, st.status());
}

grpc::ServerUnaryReactor* SandboxService::PrepareTemplate(grpc::CallbackServerContext* ctx,
                                                          const v1::PrepareTemplateRequest* req, v1::Template* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return Done(ctx, s);
  if (auto s = ValidateTemplateRequest(*req, sandboxes_->options()); !s.ok()) return Done(ctx, s);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // The build outlives this call if the caller goes away: other prepares of the key may be waiting on it.
  auto build = [this, request = *req](const std::string& dir, const std::atomic<bool>& cancelled) {
    return BuildTemplate(*sandboxes_, *execs_, *clock_, request, dir, cancelled);
  };
  templates_->Prepare(req->key(), TemplateDigest(*req), std::move(build),
                      [reactor, resp](absl::StatusOr<TemplateInfo> info) {
                        if (info.ok()) ToProto(*info, resp);
                        reactor->Finish(ToGrpcStatus(info.status()));
                      });
  return reactor;
}

grpc::ServerUnaryReactor* SandboxService::ListTemplates(grpc::CallbackServerContext* ctx,
                                                        const v1::ListTemplatesRequest* req,
                                                        v1::ListTemplatesResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return Done(ctx, s);
  auto page = PageSize(req->page_size());
  if (!page.ok()) return Done(ctx, page.status());
  resp->set_next_page_token(FillPage(
      templates_->List(), req->page_token(), *page, [](const TemplateInfo& t) { return t.key; },
      [](const TemplateInfo&) { return true; }, [&](const TemplateInfo& t) { ToProto(t, resp->add_templates()); }));
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* SandboxService::DeleteTemplate(grpc::CallbackServerContext* ctx,
                                                         const v1::DeleteTemplateRequest* req,
                                                         v1::DeleteTemplateResponse*) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return Done(ctx, s);
  if (auto s = ValidateId("key", req->key()); !s.ok()) return Done(ctx, s);
  return Done(ctx, templates_->Delete(req->key()));
}

grpc::ServerUnaryReactor* SandboxService::HostInfo(grpc::CallbackServerContext* ctx, const v1::HostInfoRequest*,
                                                   v1::HostInfoResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return Done(ctx, s);
  resp->set_host_id(host_id_);
  resp->set_version(CORRAL_VERSION);
  const int64_t live = sandboxes_->live();
  resp->set_capacity(static_cast<uint32_t>(sandboxes_->capacity()));
  resp->set_live(static_cast<uint32_t>(live));
  resp->set_free(static_cast<uint32_t>(std::max<int64_t>(0, sandboxes_->capacity() - live)));
  const HostFeatures& f = sandboxes_->features();
  v1::HostFeatures* pf = resp->mutable_features();
  pf->set_landlock_abi(f.landlock_abi);
  if (f.cgroups != nullptr) {
    pf->set_cgroup_version(f.cgroups->mode() == CgroupMode::kV2   ? v1::CGROUP_VERSION_V2
                           : f.cgroups->mode() == CgroupMode::kV1 ? v1::CGROUP_VERSION_V1
                                                                  : v1::CGROUP_VERSION_UNSPECIFIED);
    for (const auto& c : f.cgroups->controllers()) pf->add_cgroup_controllers(c);
    pf->set_containment(DescribeHostContainment(*f.cgroups));
  }
  pf->set_mount_namespaces(f.mount_namespaces);
  pf->set_network_namespaces(f.mount_namespaces);
  pf->set_hidepid(f.mount_namespaces);
  utsname u{};
  uname(&u);
  pf->set_kernel_release(u.release);
  const UidPool& uids = sandboxes_->uids();
  resp->mutable_uid_pool()->set_first_uid(sandboxes_->options().uid_first);
  resp->mutable_uid_pool()->set_last_uid(sandboxes_->options().uid_last);
  resp->mutable_uid_pool()->set_free(static_cast<uint32_t>(uids.free_count()));
  resp->mutable_uid_pool()->set_quarantined(static_cast<uint32_t>(uids.quarantined()));
  ToProto(start_time_, resp->mutable_start_time());
  uint64_t template_bytes = 0;
  const std::vector<TemplateInfo> templates = templates_->List();
  for (const TemplateInfo& t : templates) template_bytes += t.size_bytes;
  resp->set_templates(static_cast<uint32_t>(templates.size()));
  resp->set_template_bytes(template_bytes);
  ToProto(sandboxes_->options().default_exec_timeout, resp->mutable_default_exec_timeout());
  ToProto(sandboxes_->options().max_exec_timeout, resp->mutable_max_exec_timeout());
  return Done(ctx, absl::OkStatus());
}

}  // namespace corral::sandbox
