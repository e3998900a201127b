// The Scheduler gRPC service: a thin adapter. It authenticates, converts requests, and calls the Scheduler (the
// middle layer) or the EpisodeTable; streaming RPCs have named reactors (SubmitReactor here, ResultStreamReactor
// in result_stream.h). Nothing here blocks a gRPC thread.
#pragma once

#include "boost/asio/any_io_executor.hpp"
#include "corral/v1/scheduler.grpc.pb.h"
#include "libs/rpc/auth.h"
#include "services/scheduler/lease/sandbox_leases.h"
#include "services/scheduler/lease/sandbox_templates.h"
#include "services/scheduler/policy_control.h"
#include "services/scheduler/result_stream.h"
#include "services/scheduler/scheduler.h"

namespace corral::scheduler {

class SchedulerService final : public v1::Scheduler::CallbackService {
 public:
  // The lease calls run as coroutines on `executor`.
  SchedulerService(Scheduler* scheduler, EpisodeTable* table, HostRegistry* hosts, ResultHub* hub,
                   const CallAuthenticator* auth, PolicyControl* policy, EnvBoard* envs, SandboxLeases* leases,
                   SandboxTemplates* templates, boost::asio::any_io_executor executor);

  grpc::ServerReadReactor<v1::SubmitRequest>* Submit(grpc::CallbackServerContext* context,
                                                     v1::Batch* response) override;
  grpc::ServerUnaryReactor* GetBatch(grpc::CallbackServerContext* context, const v1::GetBatchRequest* request,
                                     v1::Batch* response) override;
  grpc::ServerUnaryReactor* AppendTasks(grpc::CallbackServerContext* context, const v1::AppendTasksRequest* request,
                                        v1::Batch* response) override;
  grpc::ServerUnaryReactor* ListBatches(grpc::CallbackServerContext* context, const v1::ListBatchesRequest* request,
                                        v1::ListBatchesResponse* response) override;
  grpc::ServerWriteReactor<v1::StreamResultsResponse>* StreamResults(grpc::CallbackServerContext* context,
                                                                     const v1::StreamResultsRequest* request) override;
  grpc::ServerUnaryReactor* Ack(grpc::CallbackServerContext* context, const v1::AckRequest* request,
                                v1::AckResponse* response) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* context, const v1::CancelRequest* request,
                                   v1::CancelResponse* response) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context, const v1::DrainRequest* request,
                                  v1::DrainResponse* response) override;
  grpc::ServerUnaryReactor* ListHosts(grpc::CallbackServerContext* context, const v1::ListHostsRequest* request,
                                      v1::ListHostsResponse* response) override;
  grpc::ServerUnaryReactor* UpdatePolicy(grpc::CallbackServerContext* context, const v1::UpdatePolicyRequest* request,
                                         v1::UpdatePolicyResponse* response) override;
  grpc::ServerUnaryReactor* PauseGeneration(grpc::CallbackServerContext* context,
                                            const v1::PauseGenerationRequest* request,
                                            v1::PauseGenerationResponse* response) override;
  grpc::ServerUnaryReactor* ResumeGeneration(grpc::CallbackServerContext* context,
                                             const v1::ResumeGenerationRequest* request,
                                             v1::ResumeGenerationResponse* response) override;
  grpc::ServerUnaryReactor* OpenEnvironment(grpc::CallbackServerContext* context,
                                            const v1::OpenEnvironmentRequest* request,
                                            v1::OpenEnvironmentResponse* response) override;
  grpc::ServerUnaryReactor* StepEnvironment(grpc::CallbackServerContext* context,
                                            const v1::StepEnvironmentRequest* request,
                                            v1::StepEnvironmentResponse* response) override;
  grpc::ServerUnaryReactor* CloseEnvironment(grpc::CallbackServerContext* context,
                                             const v1::CloseEnvironmentRequest* request,
                                             v1::EpisodeResult* response) override;

  // Leased sandboxes (scheduler_service_leases.cc).
  grpc::ServerUnaryReactor* LeaseSandbox(grpc::CallbackServerContext* context, const v1::LeaseSandboxRequest* request,
                                         v1::SandboxLease* response) override;
  grpc::ServerUnaryReactor* RenewLease(grpc::CallbackServerContext* context, const v1::RenewLeaseRequest* request,
                                       v1::SandboxLease* response) override;
  grpc::ServerUnaryReactor* GetLease(grpc::CallbackServerContext* context, const v1::GetLeaseRequest* request,
                                     v1::SandboxLease* response) override;
  grpc::ServerUnaryReactor* ListLeases(grpc::CallbackServerContext* context, const v1::ListLeasesRequest* request,
                                       v1::ListLeasesResponse* response) override;
  grpc::ServerUnaryReactor* ReleaseLease(grpc::CallbackServerContext* context, const v1::ReleaseLeaseRequest* request,
                                         v1::ReleaseLeaseResponse* response) override;
  grpc::ServerUnaryReactor* ForkLease(grpc::CallbackServerContext* context, const v1::ForkLeaseRequest* request,
                                      v1::ForkLeaseResponse* response) override;
  grpc::ServerUnaryReactor* SetLeasePaused(grpc::CallbackServerContext* context,
                                           const v1::SetLeasePausedRequest* request,
                                           v1::SandboxLease* response) override;
  // Sandbox templates (scheduler_service_leases.cc).
  grpc::ServerUnaryReactor* RequestTemplateBuild(grpc::CallbackServerContext* context,
                                                 const v1::RequestTemplateBuildRequest* request,
                                                 v1::SandboxTemplate* response) override;
  grpc::ServerUnaryReactor* StartTemplateBuild(grpc::CallbackServerContext* context,
                                               const v1::StartTemplateBuildRequest* request,
                                               v1::SandboxTemplate* response) override;
  grpc::ServerUnaryReactor* GetTemplate(grpc::CallbackServerContext* context, const v1::GetTemplateRequest* request,
                                        v1::SandboxTemplate* response) override;
  grpc::ServerUnaryReactor* DeleteTemplate(grpc::CallbackServerContext* context, const v1::GetTemplateRequest* request,
                                           v1::DeleteSandboxTemplateResponse* response) override;
  grpc::ServerUnaryReactor* PutTemplateFile(grpc::CallbackServerContext* context, const v1::TemplateFile* request,
                                            v1::TemplateFile* response) override;
  grpc::ServerUnaryReactor* GetTemplateFile(grpc::CallbackServerContext* context,
                                            const v1::GetTemplateFileRequest* request,
                                            v1::TemplateFile* response) override;

 private:
  Scheduler* const scheduler_;
  EpisodeTable* const table_;
  HostRegistry* const hosts_;
  ResultHub* const hub_;
  const CallAuthenticator* const auth_;
  PolicyControl* const policy_;
  EnvBoard* const envs_;
  SandboxLeases* const leases_;
  SandboxTemplates* const templates_;
  const boost::asio::any_io_executor executor_;
};

}  // namespace corral::scheduler
