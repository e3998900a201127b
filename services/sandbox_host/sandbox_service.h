// The sandbox host's gRPC adapter: proto ↔ core and Status mapping around SandboxManager and ExecManager.
// Management calls need the host (cluster) token; calls on one sandbox accept the host token or that
// sandbox's capability token. Streaming calls have their own reactors (exec_reactor.h, file_reactors.h).
#pragma once

#include "corral/v1/sandbox.grpc.pb.h"
#include "libs/core/clock.h"
#include "libs/rpc/auth.h"
#include "services/sandbox_host/exec/exec_manager.h"
#include "services/sandbox_host/images/image_pull.h"
#include "services/sandbox_host/images/image_store.h"
#include "services/sandbox_host/sandbox_manager.h"

namespace corral::sandbox {

// Thread-safe: state lives in the managers.
class SandboxService final : public v1::SandboxHost::CallbackService {
 public:
  // `workers` run what may take long (creating and deleting sandboxes, killing processes), so no gRPC thread
  // waits for it: those calls answer when the work is done.
  // `image_workers` import and pull images (minutes for a large one), apart from `workers`; `puller` may be
  // null (PullImage then answers FAILED_PRECONDITION).
  SandboxService(SandboxManager* sandboxes, ExecManager* execs, TemplateStore* templates, ImageStore* images,
                 ImagePuller* puller, const CallAuthenticator* auth, Clock* clock, WorkerPool* workers,
                 WorkerPool* image_workers, std::string host_id, std::string harness_root)
      : sandboxes_(sandboxes),
        execs_(execs),
        templates_(templates),
        images_(images),
        puller_(puller),
        auth_(auth),
        clock_(clock),
        workers_(workers),
        image_workers_(image_workers),
        host_id_(std::move(host_id)),
        harness_root_(std::move(harness_root)),
        start_time_(clock->Now()) {}

  grpc::ServerUnaryReactor* CreateSandboxes(grpc::CallbackServerContext* ctx, const v1::CreateSandboxesRequest* req,
                                            v1::CreateSandboxesResponse* resp) override;
  grpc::ServerUnaryReactor* ForkSandbox(grpc::CallbackServerContext* ctx, const v1::ForkSandboxRequest* req,
                                        v1::CreateSandboxesResponse* resp) override;
  grpc::ServerUnaryReactor* GetSandbox(grpc::CallbackServerContext* ctx, const v1::GetSandboxRequest* req,
                                       v1::Sandbox* resp) override;
  grpc::ServerUnaryReactor* PauseSandbox(grpc::CallbackServerContext* ctx, const v1::PauseSandboxRequest* req,
                                         v1::Sandbox* resp) override;
  grpc::ServerUnaryReactor* ResumeSandbox(grpc::CallbackServerContext* ctx, const v1::ResumeSandboxRequest* req,
                                          v1::Sandbox* resp) override;
  grpc::ServerUnaryReactor* ListSandboxes(grpc::CallbackServerContext* ctx, const v1::ListSandboxesRequest* req,
                                          v1::ListSandboxesResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteSandbox(grpc::CallbackServerContext* ctx, const v1::DeleteSandboxRequest* req,
                                          v1::DeleteSandboxResponse* resp) override;
  grpc::ServerWriteReactor<v1::ExecEvent>* Exec(grpc::CallbackServerContext* ctx, const v1::ExecRequest* req) override;
  grpc::ServerBidiReactor<v1::ExecInput, v1::ExecEvent>* ExecInteractive(grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* StartProcess(grpc::CallbackServerContext* ctx, const v1::StartProcessRequest* req,
                                         v1::Process* resp) override;
  grpc::ServerUnaryReactor* ListProcesses(grpc::CallbackServerContext* ctx, const v1::ListProcessesRequest* req,
                                          v1::ListProcessesResponse* resp) override;
  grpc::ServerUnaryReactor* KillAllProcesses(grpc::CallbackServerContext* ctx, const v1::KillAllProcessesRequest* req,
                                             v1::KillAllProcessesResponse* resp) override;
  grpc::ServerUnaryReactor* KillProcess(grpc::CallbackServerContext* ctx, const v1::KillProcessRequest* req,
                                        v1::Process* resp) override;
  grpc::ServerReadReactor<v1::WriteFileRequest>* WriteFile(grpc::CallbackServerContext* ctx,
                                                           v1::FileInfo* resp) override;
  grpc::ServerWriteReactor<v1::ReadFileResponse>* ReadFile(grpc::CallbackServerContext* ctx,
                                                           const v1::ReadFileRequest* req) override;
  grpc::ServerUnaryReactor* Stat(grpc::CallbackServerContext* ctx, const v1::StatRequest* req,
                                 v1::FileInfo* resp) override;
  grpc::ServerUnaryReactor* ListDir(grpc::CallbackServerContext* ctx, const v1::ListDirRequest* req,
                                    v1::ListDirResponse* resp) override;
  grpc::ServerUnaryReactor* Remove(grpc::CallbackServerContext* ctx, const v1::RemoveRequest* req,
                                   v1::RemoveResponse* resp) override;
  grpc::ServerUnaryReactor* MakeDir(grpc::CallbackServerContext* ctx, const v1::MakeDirRequest* req,
                                    v1::FileInfo* resp) override;
  grpc::ServerUnaryReactor* PrepareTemplate(grpc::CallbackServerContext* ctx, const v1::PrepareTemplateRequest* req,
                                            v1::Template* resp) override;
  grpc::ServerUnaryReactor* ListTemplates(grpc::CallbackServerContext* ctx, const v1::ListTemplatesRequest* req,
                                          v1::ListTemplatesResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteTemplate(grpc::CallbackServerContext* ctx, const v1::DeleteTemplateRequest* req,
                                           v1::DeleteTemplateResponse* resp) override;
  grpc::ServerReadReactor<v1::ImportImageRequest>* ImportImage(grpc::CallbackServerContext* ctx,
                                                               v1::Image* resp) override;
  grpc::ServerWriteReactor<v1::PullImageProgress>* PullImage(grpc::CallbackServerContext* ctx,
                                                             const v1::PullImageRequest* req) override;
  grpc::ServerUnaryReactor* ListImages(grpc::CallbackServerContext* ctx, const v1::ListImagesRequest* req,
                                       v1::ListImagesResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteImage(grpc::CallbackServerContext* ctx, const v1::DeleteImageRequest* req,
                                        v1::DeleteImageResponse* resp) override;
  grpc::ServerUnaryReactor* HostInfo(grpc::CallbackServerContext* ctx, const v1::HostInfoRequest* req,
                                     v1::HostInfoResponse* resp) override;

 private:
  // PauseSandbox and ResumeSandbox.
  grpc::ServerUnaryReactor* SetPaused(grpc::CallbackServerContext* ctx, const std::string& id, bool paused,
                                      v1::Sandbox* resp);
  absl::Status CreateInto(int64_t count, SandboxSpec spec, v1::CreateSandboxesResponse* resp);
  static void Fill(const SandboxManager::CreateResult& result, v1::CreateSandboxesResponse* resp);

  SandboxManager* const sandboxes_;
  ExecManager* const execs_;
  TemplateStore* const templates_;
  ImageStore* const images_;
  ImagePuller* const puller_;
  const CallAuthenticator* const auth_;
  Clock* const clock_;
  WorkerPool* const workers_;
  WorkerPool* const image_workers_;
  const std::string host_id_;
  const std::string harness_root_;  // where `corral harness install` puts harnesses (HostInfo.harnesses)
  const absl::Time start_time_;
};

}  // namespace corral::sandbox
