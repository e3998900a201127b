#include "services/sandbox_host/sandbox_service.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "libs/rpc/pagination.h"
#include "libs/rpc/status_conversion.h"
#include "services/sandbox_host/convert.h"
#include "services/sandbox_host/exec_reactor.h"
#include "services/sandbox_host/file_reactors.h"
#include "services/sandbox_host/sandbox_path.h"

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

}  // namespace

absl::Status AuthorizeSandbox(const CallAuthenticator& auth, const SandboxManager& manager,
                              const grpc::ServerContextBase& ctx, const std::string& sandbox_id) {
  if (auth.insecure() || auth.CheckCluster(ctx).ok()) return absl::OkStatus();
  auto token = CallAuthenticator::BearerToken(ctx);
  if (!token.ok()) return token.status();
  return manager.CheckSandboxToken(sandbox_id, *token);
}

grpc::ServerUnaryReactor* SandboxService::CreateSandboxes(grpc::CallbackServerContext* ctx,
                                                          const v1::CreateSandboxesRequest* req,
                                                          v1::CreateSandboxesResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return Done(ctx, s);
  auto spec = FromProto(req->spec());
  if (!spec.ok()) return Done(ctx, spec.status());
  auto result = sandboxes_->Create(req->count() == 0 ? 1 : req->count(), *std::move(spec));
  if (!result.ok()) return Done(ctx, result.status());
  for (const auto& created : result->created) {
    v1::CreatedSandbox* out = resp->add_sandboxes();
    ToProto(*created.sandbox, 0, out->mutable_sandbox());
    out->set_capability_token(created.token);
  }
  resp->set_rejected(static_cast<uint32_t>(result->rejected));
  resp->set_rejected_reason(result->rejected_reason);
  return Done(ctx, absl::OkStatus());
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
  int n = 0;
  for (const auto& sb : sandboxes_->List()) {  // ordered by id
    if (!req->page_token().empty() && sb->id <= req->page_token()) continue;
    bool match = true;
    for (const auto& [k, v] : req->label_selector()) {
      auto it = sb->spec.labels.find(k);
      match &= it != sb->spec.labels.end() && it->second == v;
    }
    if (!match) continue;
    if (n == *page) {
      resp->set_next_page_token(resp->sandboxes(n - 1).sandbox_id());
      break;
    }
    ToProto(*sb, 0, resp->add_sandboxes());
    ++n;
  }
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
  return Done(ctx, absl::OkStatus());
}

}  // namespace corral::sandbox
