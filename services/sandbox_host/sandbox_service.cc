#include "services/sandbox_host/sandbox_service.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <optional>

#include "absl/strings/str_cat.h"
#include "libs/api/ids.h"
#include "libs/api/pagination.h"
#include "libs/core/status_macros.h"
#include "libs/core/version.h"
#include "libs/harness/harnesses.h"
#include "libs/rpc/status_conversion.h"
#include "libs/rpc/unary.h"
#include "services/sandbox_host/convert.h"
#include "services/sandbox_host/exec_reactor.h"
#include "services/sandbox_host/file_reactors.h"
#include "services/sandbox_host/image_reactor.h"
#include "services/sandbox_host/linux/containment.h"
#include "services/sandbox_host/linux/sandbox_path.h"
#include "services/sandbox_host/sandbox_ops.h"
#include "services/sandbox_host/template_builder.h"

namespace corral::sandbox {
void SandboxService::Fill(const SandboxManager::CreateResult& result, v1::CreateSandboxesResponse* resp) {
  for (const auto& created : result.created) {
    v1::CreatedSandbox* out = resp->add_sandboxes();
    ToProto(*created.sandbox, 0, out->mutable_sandbox());
    out->set_capability_token(created.token);
  }
  resp->set_rejected(static_cast<uint32_t>(result.rejected));
  resp->set_rejected_reason(result.rejected_reason);
}

absl::Status SandboxService::CreateInto(int64_t count, SandboxSpec spec, v1::CreateSandboxesResponse* resp) {
  CORRAL_ASSIGN_OR_RETURN(SandboxManager::CreateResult result, sandboxes_->Create(count, std::move(spec)));
  Fill(result, resp);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* SandboxService::CreateSandboxes(grpc::CallbackServerContext* ctx,
                                                          const v1::CreateSandboxesRequest* req,
                                                          v1::CreateSandboxesResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  auto spec = FromProto(req->spec());
  if (!spec.ok()) return FinishUnary(ctx, spec.status());
  const int64_t count = req->count() == 0 ? 1 : req->count();
  if (spec->template_key.empty() || templates_ == nullptr) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    RunOn(workers_, [this, reactor, resp, count, spec = *std::move(spec)]() mutable {
      reactor->Finish(ToGrpcStatus(CreateInto(count, std::move(spec), resp)));
    });
    return reactor;
  }
  // A template still building is waited for; the create then runs on the thread that finished the build.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const std::string key = spec->template_key;
  templates_->WhenReady(key, [this, reactor, resp, count, spec = *std::move(spec)](auto image) mutable {
    reactor->Finish(ToGrpcStatus(image.ok() ? CreateInto(count, std::move(spec), resp) : image.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* SandboxService::ForkSandbox(grpc::CallbackServerContext* ctx,
                                                      const v1::ForkSandboxRequest* req,
                                                      v1::CreateSandboxesResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  if (req->sandbox_id().empty()) return FinishUnary(ctx, absl::InvalidArgumentError("sandbox_id is required"));
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const int64_t count = req->count() == 0 ? 1 : req->count();
  std::map<std::string, std::string> labels(req->labels().begin(), req->labels().end());
  const absl::Duration wait = FromProto(req->wait_timeout());
  if (wait < absl::ZeroDuration() || wait > absl::Hours(1)) {
    return FinishUnary(ctx, absl::InvalidArgumentError("wait_timeout must be between 0 and 1h"));
  }
  // A fork waits on the kernel (renames, mounts, namespaces) and maybe for processes: a worker's job.
  RunOn(workers_, [this, reactor, resp, count, wait, empty_tmp = req->empty_tmp(), id = req->sandbox_id(),
                   labels = std::move(labels)] {
    auto forked = sandboxes_->Fork(id, count, labels, wait, empty_tmp);
    if (forked.ok()) {
      std::vector<std::vector<ProcessInfo>> carried = AdoptCarried(*execs_, *forked);
      Fill(*forked, resp);
      for (size_t i = 0; i < carried.size() && i < static_cast<size_t>(resp->sandboxes_size()); ++i) {
        for (const ProcessInfo& p : carried[i])
          ToProto(p, resp->mutable_sandboxes(static_cast<int>(i))->add_carried_processes());
      }
      for (const std::string& why : forked->not_carried) resp->add_not_carried(why);
    }
    reactor->Finish(ToGrpcStatus(forked.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* SandboxService::GetSandbox(grpc::CallbackServerContext* ctx, const v1::GetSandboxRequest* req,
                                                     v1::Sandbox* resp) {
  auto sb = OpenSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id());
  if (!sb.ok()) return FinishUnary(ctx, sb.status());
  UsageQuery query{.disk = req->disk_usage(), .samples = req->samples()};
  if (req->has_samples_from()) query.from = FromProto(req->samples_from());
  if (req->has_samples_to()) query.to = FromProto(req->samples_to());
  // A few reads of its cgroup answer at once; a walk of its files, or a wait for a kill sweep of the sandbox, goes
  // to a worker.
  if (auto now = sandboxes_->UsageNow(**sb, query)) {
    if (now->ok()) {
      ToProto(**sb, 0, resp);
      ToProto(**now, resp->mutable_usage());
    }
    return FinishUnary(ctx, now->status());
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  RunOn(workers_, [this, reactor, resp, query, sb = *std::move(sb)] {
    absl::StatusOr<SandboxUsage> usage = sandboxes_->Usage(*sb, query);
    if (usage.ok()) {
      ToProto(*sb, 0, resp);
      ToProto(*usage, resp->mutable_usage());
    }
    reactor->Finish(ToGrpcStatus(usage.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* SandboxService::SetPaused(grpc::CallbackServerContext* ctx, const std::string& id,
                                                    bool paused, v1::Sandbox* resp) {
  if (absl::Status s = AuthorizeSandbox(*auth_, *sandboxes_, *ctx, id); !s.ok()) return FinishUnary(ctx, s);
  // The freezer waits on the kernel: on a worker, answering when done.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  RunOn(workers_, [this, reactor, resp, id, paused] {
    auto sb = sandboxes_->SetPaused(id, paused);
    if (sb.ok()) ToProto(**sb, 0, resp);
    reactor->Finish(ToGrpcStatus(sb.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* SandboxService::PauseSandbox(grpc::CallbackServerContext* ctx,
                                                       const v1::PauseSandboxRequest* req, v1::Sandbox* resp) {
  return SetPaused(ctx, req->sandbox_id(), true, resp);
}

grpc::ServerUnaryReactor* SandboxService::ResumeSandbox(grpc::CallbackServerContext* ctx,
                                                        const v1::ResumeSandboxRequest* req, v1::Sandbox* resp) {
  return SetPaused(ctx, req->sandbox_id(), false, resp);
}

grpc::ServerUnaryReactor* SandboxService::ListSandboxes(grpc::CallbackServerContext* ctx,
                                                        const v1::ListSandboxesRequest* req,
                                                        v1::ListSandboxesResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  auto page = PageSize(req->page_size());
  if (!page.ok()) return FinishUnary(ctx, page.status());
  using SandboxRef = std::shared_ptr<const Sandbox>;
  resp->set_next_page_token(FillPage(
      sandboxes_->List(), req->page_token(), *page, [](const SandboxRef& sb) { return sb->id; },
      [&](const SandboxRef& sb) { return MatchesLabels(req->label_selector(), sb->spec.labels); },
      [&](const SandboxRef& sb) { ToProto(*sb, 0, resp->add_sandboxes()); }));
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* SandboxService::DeleteSandbox(grpc::CallbackServerContext* ctx,
                                                        const v1::DeleteSandboxRequest* req,
                                                        v1::DeleteSandboxResponse* resp) {
  if (auto s = AuthorizeSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()); !s.ok()) return FinishUnary(ctx, s);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  RunOn(workers_, [this, reactor, resp, id = req->sandbox_id(), disk = req->disk_usage()] {
    FinalUsage final_usage{.query = {.disk = disk}};
    resp->set_existed(sandboxes_->Delete(id, &final_usage));  // every process swept, the home wiped: may take a while
    if (resp->existed()) ToProto(final_usage.usage, resp->mutable_usage());
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
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
  return FinishUnary(ctx, [&]() -> absl::Status {
    CORRAL_ASSIGN_OR_RETURN(auto sb, OpenSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()));
    std::optional<FileWriter> file;
    if (!req->output_path().empty()) {
      CORRAL_ASSIGN_OR_RETURN(SandboxPath path, sb->ParsePath(req->output_path()));
      CORRAL_ASSIGN_OR_RETURN(file, FileWriter::Open(sb->home_fd.get(), path, WriteMode::kAppend, 0644, sb->FileOwner(),
                                                     /*make_parents=*/true));
    }
    ExecOptions extra;
    extra.kind = ProcessKind::kBackground;
    extra.stdin_data = req->stdin();
    extra.output_path = req->output_path();
    CORRAL_ASSIGN_OR_RETURN(auto execution,
                            StartCommand(*sandboxes_, *execs_, *auth_, *ctx, req->sandbox_id(), req->command(), extra));
    SinkOutput(execution, std::move(file), sb->spec.rlimits.file_size_bytes);
    ToProto(execution->Info(), resp);
    return absl::OkStatus();
  }());
}

grpc::ServerUnaryReactor* SandboxService::ListProcesses(grpc::CallbackServerContext* ctx,
                                                        const v1::ListProcessesRequest* req,
                                                        v1::ListProcessesResponse* resp) {
  return FinishUnary(ctx, [&]() -> absl::Status {
    CORRAL_RETURN_IF_ERROR(OpenSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()).status());
    for (const ProcessInfo& p : execs_->List(req->sandbox_id(), req->include_exited())) {
      ToProto(p, resp->add_processes());
    }
    return absl::OkStatus();
  }());
}

grpc::ServerUnaryReactor* SandboxService::KillProcess(grpc::CallbackServerContext* ctx,
                                                      const v1::KillProcessRequest* req, v1::Process* resp) {
  const int sig = req->signal() == 0 ? SIGKILL : req->signal();
  absl::Status checked = [&]() -> absl::Status {
    CORRAL_RETURN_IF_ERROR(AuthorizeSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()));
    if (sig < 1 || sig > 64) return absl::InvalidArgumentError(absl::StrCat("signal ", sig, " is not 1-64"));
    return sandboxes_->Find(req->sandbox_id()).status();
  }();
  if (!checked.ok()) return FinishUnary(ctx, checked);
  // SIGKILL sweeps the uid and waits for the process (up to seconds): on a worker, answering when done.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  RunOn(workers_, [this, reactor, resp, sig, id = req->sandbox_id(), process_id = req->process_id()] {
    auto process = execs_->Signal(id, process_id, sig);
    if (process.ok()) ToProto(*process, resp);
    reactor->Finish(ToGrpcStatus(process.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* SandboxService::KillAllProcesses(grpc::CallbackServerContext* ctx,
                                                           const v1::KillAllProcessesRequest* req,
                                                           v1::KillAllProcessesResponse* resp) {
  if (absl::Status s = AuthorizeSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()); !s.ok()) {
    return FinishUnary(ctx, s);
  }
  // The sweep waits on the kernel (rounds of kill(-1) as the uid): on a worker, answering when done.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  RunOn(workers_, [this, reactor, resp, id = req->sandbox_id()] {
    auto killed = sandboxes_->KillAllProcesses(id);
    if (killed.ok()) resp->set_killed(*killed);
    reactor->Finish(ToGrpcStatus(killed.status()));
  });
  return reactor;
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
  return FinishUnary(ctx, [&]() -> absl::Status {
    CORRAL_ASSIGN_OR_RETURN(SandboxFile file, OpenSandboxPath(*auth_, *sandboxes_, *ctx, req->sandbox_id(), req->path(),
                                                              /*allow_home=*/true));
    CORRAL_ASSIGN_OR_RETURN(FileStat st, StatFile(file));
    ToProto(st.st, file.path.normalized, file.path.components.empty() ? "" : file.path.components.back(),
            st.link_target, resp);
    return absl::OkStatus();
  }());
}

grpc::ServerUnaryReactor* SandboxService::ListDir(grpc::CallbackServerContext* ctx, const v1::ListDirRequest* req,
                                                  v1::ListDirResponse* resp) {
  return FinishUnary(ctx, [&]() -> absl::Status {
    CORRAL_RETURN_IF_ERROR(AuthorizeSandbox(*auth_, *sandboxes_, *ctx, req->sandbox_id()));
    CORRAL_ASSIGN_OR_RETURN(int page_size, PageSize(req->page_size()));
    CORRAL_ASSIGN_OR_RETURN(SandboxFile dir, OpenSandboxPath(*auth_, *sandboxes_, *ctx, req->sandbox_id(), req->path(),
                                                             /*allow_home=*/true));
    CORRAL_ASSIGN_OR_RETURN(DirPage page, ListDirectory(dir, req->page_token(), static_cast<size_t>(page_size)));
    for (const DirPage::Entry& e : page.entries) {
      ToProto(e.stat.st, e.path, e.name, e.stat.link_target, resp->add_entries());
    }
    resp->set_next_page_token(page.next_page_token);
    return absl::OkStatus();
  }());
}

grpc::ServerUnaryReactor* SandboxService::Remove(grpc::CallbackServerContext* ctx, const v1::RemoveRequest* req,
                                                 v1::RemoveResponse*) {
  return FinishUnary(ctx, [&]() -> absl::Status {
    CORRAL_ASSIGN_OR_RETURN(SandboxFile file, OpenSandboxPath(*auth_, *sandboxes_, *ctx, req->sandbox_id(), req->path(),
                                                              /*allow_home=*/true));
    return RemoveFile(file, req->recursive());
  }());
}

grpc::ServerUnaryReactor* SandboxService::MakeDir(grpc::CallbackServerContext* ctx, const v1::MakeDirRequest* req,
                                                  v1::FileInfo* resp) {
  return FinishUnary(ctx, [&]() -> absl::Status {
    CORRAL_ASSIGN_OR_RETURN(SandboxFile file,
                            OpenSandboxPath(*auth_, *sandboxes_, *ctx, req->sandbox_id(), req->path()));
    const Sandbox& sb = *file.sandbox;
    const mode_t mode = req->permissions() == 0 ? 0755 : (req->permissions() & 0777);
    CORRAL_RETURN_IF_ERROR(MakeDirectory(sb.home_fd.get(), file.path, req->make_parents(), mode, sb.FileOwner()));
    CORRAL_ASSIGN_OR_RETURN(struct stat st, StatPath(sb.home_fd.get(), file.path));
    ToProto(st, file.path.normalized, file.path.components.back(), "", resp);
    return absl::OkStatus();
  }());
}

grpc::ServerUnaryReactor* SandboxService::PrepareTemplate(grpc::CallbackServerContext* ctx,
                                                          const v1::PrepareTemplateRequest* req, v1::Template* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  if (auto s = ValidateTemplateRequest(*req, sandboxes_->options()); !s.ok()) return FinishUnary(ctx, s);
  v1::PrepareTemplateRequest request = *req;
  if (!request.image().empty()) {  // built on the image's exact digest, which the template then names
    if (!sandboxes_->features().images) {
      return FinishUnary(ctx, absl::FailedPreconditionError("this host cannot run sandboxes in images"));
    }
    auto image = images_->Find(request.image());
    if (!image.ok()) return FinishUnary(ctx, image.status());
    request.set_image(image->digest);
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // The build outlives this call if the caller goes away: other prepares of the key may be waiting on it.
  auto build = [this, request](const std::string& dir, const std::atomic<bool>& cancelled) {
    return BuildTemplate(*sandboxes_, *execs_, *clock_, request, dir, cancelled);
  };
  templates_->Prepare(
      request.key(), TemplateDigest(request), std::move(build),
      [reactor, resp](absl::StatusOr<TemplateInfo> info) {
        if (info.ok()) ToProto(*info, resp);
        reactor->Finish(ToGrpcStatus(info.status()));
      },
      request.image());
  return reactor;
}

grpc::ServerUnaryReactor* SandboxService::ListTemplates(grpc::CallbackServerContext* ctx,
                                                        const v1::ListTemplatesRequest* req,
                                                        v1::ListTemplatesResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  auto page = PageSize(req->page_size());
  if (!page.ok()) return FinishUnary(ctx, page.status());
  resp->set_next_page_token(FillPage(
      templates_->List(), req->page_token(), *page, [](const TemplateInfo& t) { return t.key; },
      [](const TemplateInfo&) { return true; }, [&](const TemplateInfo& t) { ToProto(t, resp->add_templates()); }));
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* SandboxService::DeleteTemplate(grpc::CallbackServerContext* ctx,
                                                         const v1::DeleteTemplateRequest* req,
                                                         v1::DeleteTemplateResponse*) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  if (auto s = ValidateId("key", req->key()); !s.ok()) return FinishUnary(ctx, s);
  return FinishUnary(ctx, templates_->Delete(req->key()));
}

grpc::ServerReadReactor<v1::ImportImageRequest>* SandboxService::ImportImage(grpc::CallbackServerContext* ctx,
                                                                             v1::Image* resp) {
  return new ImportImageReactor(images_, auth_, image_workers_, ctx, resp);
}

grpc::ServerWriteReactor<v1::PullImageProgress>* SandboxService::PullImage(grpc::CallbackServerContext* ctx,
                                                                           const v1::PullImageRequest* req) {
  return new PullImageReactor(puller_, auth_, image_workers_, ctx, req);
}

grpc::ServerUnaryReactor* SandboxService::ListImages(grpc::CallbackServerContext* ctx, const v1::ListImagesRequest*,
                                                     v1::ListImagesResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  for (const Image& image : images_->List()) ToProto(image, resp->add_images());
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* SandboxService::DeleteImage(grpc::CallbackServerContext* ctx,
                                                      const v1::DeleteImageRequest* req, v1::DeleteImageResponse*) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  if (req->image().empty()) return FinishUnary(ctx, absl::InvalidArgumentError("image is required (a name or digest)"));
  return FinishUnary(ctx, images_->Remove(req->image()));
}

grpc::ServerUnaryReactor* SandboxService::HostInfo(grpc::CallbackServerContext* ctx, const v1::HostInfoRequest*,
                                                   v1::HostInfoResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  resp->set_host_id(host_id_);
  resp->set_version(kVersion);
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
  pf->set_images(f.images);
  pf->set_forks(f.forks);
  for (const Image& image : images_->List()) {
    resp->add_images(image.digest);
    (*resp->mutable_image_digests())[image.digest] = image.digest;
    for (const std::string& ref : image.refs) {
      resp->add_images(ref);
      (*resp->mutable_image_digests())[ref] = image.digest;
    }
  }
  for (const HarnessChoice& harness : InstalledHarnesses(harness_root_)) resp->add_harnesses(harness.id());
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
  const HostOptions& o = sandboxes_->options();
  ToProto(o.default_cgroup, o.default_rlimits, o.default_disk_bytes, resp->mutable_default_limits());
  ToProto(o.cgroup_ceiling, o.rlimit_ceiling, o.max_disk_bytes, resp->mutable_max_limits());
  ToProto(sandboxes_->options().default_exec_timeout, resp->mutable_default_exec_timeout());
  ToProto(sandboxes_->options().max_exec_timeout, resp->mutable_max_exec_timeout());
  return FinishUnary(ctx, absl::OkStatus());
}

}  // namespace corral::sandbox
