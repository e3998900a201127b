// The Scheduler service's lease calls: authenticated, then answered from SandboxLeases, whose placing, forking
// and deleting run as coroutines on the event loop (a gRPC thread never waits on a host).
#include <utility>

#include "libs/api/pagination.h"
#include "libs/async/spawn.h"
#include "libs/rpc/status_conversion.h"
#include "libs/rpc/unary.h"
#include "services/scheduler/scheduler_service.h"

namespace corral::scheduler {
namespace {

namespace asio = boost::asio;

template <class Response>
asio::awaitable<void> Answer(grpc::ServerUnaryReactor* reactor, Response* response,
                             asio::awaitable<absl::StatusOr<Response>> work) {
  absl::StatusOr<Response> out = co_await std::move(work);
  if (out.ok()) *response = *std::move(out);
  reactor->Finish(ToGrpcStatus(out.status()));
}

// Starts `work` on `executor`; the call finishes with what it returns.
template <class Response>
grpc::ServerUnaryReactor* Spawned(grpc::CallbackServerContext* context, const asio::any_io_executor& executor,
                                  Response* response, asio::awaitable<absl::StatusOr<Response>> work,
                                  const char* what) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  async::Spawn(executor, Answer(reactor, response, std::move(work)), what);
  return reactor;
}

asio::awaitable<absl::StatusOr<v1::ReleaseLeaseResponse>> Released(SandboxLeases* leases, std::string lease_id,
                                                                   std::string owner) {
  absl::Status s = co_await leases->Release(std::move(lease_id), std::move(owner));
  if (!s.ok()) co_return s;
  co_return v1::ReleaseLeaseResponse();
}

}  // namespace

grpc::ServerUnaryReactor* SchedulerService::LeaseSandbox(grpc::CallbackServerContext* context,
                                                         const v1::LeaseSandboxRequest* request,
                                                         v1::SandboxLease* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  if (scheduler_->draining()) {
    return FinishUnary(context, absl::FailedPreconditionError("the scheduler is draining: no new leases"));
  }
  return Spawned(context, executor_, response, leases_->Lease(*request), "a LeaseSandbox call");
}

grpc::ServerUnaryReactor* SchedulerService::RenewLease(grpc::CallbackServerContext* context,
                                                       const v1::RenewLeaseRequest* request,
                                                       v1::SandboxLease* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  return Spawned(context, executor_, response, leases_->Renew(*request), "a RenewLease call");
}

grpc::ServerUnaryReactor* SchedulerService::SetLeasePaused(grpc::CallbackServerContext* context,
                                                           const v1::SetLeasePausedRequest* request,
                                                           v1::SandboxLease* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  return Spawned(context, executor_, response, leases_->SetPaused(*request), "a SetLeasePaused call");
}

grpc::ServerUnaryReactor* SchedulerService::GetLease(grpc::CallbackServerContext* context,
                                                     const v1::GetLeaseRequest* request, v1::SandboxLease* response) {
  return FinishUnary(context, [&]() -> absl::Status {
    if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return s;
    auto lease = leases_->Get(request->lease_id(), request->owner());
    if (!lease.ok()) return lease.status();
    *response = *std::move(lease);
    return absl::OkStatus();
  }());
}

grpc::ServerUnaryReactor* SchedulerService::ListLeases(grpc::CallbackServerContext* context,
                                                       const v1::ListLeasesRequest* request,
                                                       v1::ListLeasesResponse* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  auto page_size = PageSize(request->page_size());
  if (!page_size.ok()) return FinishUnary(context, page_size.status());
  const std::vector<v1::SandboxLease> leases = leases_->List(request->owner());
  response->set_next_page_token(FillPage(
      leases, request->page_token(), *page_size, [](const v1::SandboxLease& l) { return l.lease_id(); },
      [](const v1::SandboxLease&) { return true; }, [&](const v1::SandboxLease& l) { *response->add_leases() = l; }));
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* SchedulerService::ReleaseLease(grpc::CallbackServerContext* context,
                                                         const v1::ReleaseLeaseRequest* request,
                                                         v1::ReleaseLeaseResponse* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  return Spawned(context, executor_, response, Released(leases_, request->lease_id(), request->owner()),
                 "a ReleaseLease call");
}

grpc::ServerUnaryReactor* SchedulerService::ForkLease(grpc::CallbackServerContext* context,
                                                      const v1::ForkLeaseRequest* request,
                                                      v1::ForkLeaseResponse* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  return Spawned(context, executor_, response, leases_->Fork(*request), "a ForkLease call");
}

grpc::ServerUnaryReactor* SchedulerService::RequestTemplateBuild(grpc::CallbackServerContext* context,
                                                                 const v1::RequestTemplateBuildRequest* request,
                                                                 v1::SandboxTemplate* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  return Spawned(context, executor_, response, templates_->Request(*request), "a RequestTemplateBuild call");
}

grpc::ServerUnaryReactor* SchedulerService::StartTemplateBuild(grpc::CallbackServerContext* context,
                                                               const v1::StartTemplateBuildRequest* request,
                                                               v1::SandboxTemplate* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  if (scheduler_->draining()) {
    return FinishUnary(context, absl::FailedPreconditionError("the scheduler is draining: no new builds"));
  }
  return Spawned(context, executor_, response, templates_->Start(*request), "a StartTemplateBuild call");
}

grpc::ServerUnaryReactor* SchedulerService::GetTemplate(grpc::CallbackServerContext* context,
                                                        const v1::GetTemplateRequest* request,
                                                        v1::SandboxTemplate* response) {
  return FinishUnary(context, [&]() -> absl::Status {
    if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return s;
    auto t = templates_->Get(*request);
    if (!t.ok()) return t.status();
    *response = *std::move(t);
    return absl::OkStatus();
  }());
}

grpc::ServerUnaryReactor* SchedulerService::DeleteTemplate(grpc::CallbackServerContext* context,
                                                           const v1::GetTemplateRequest* request,
                                                           v1::DeleteSandboxTemplateResponse*) {
  return FinishUnary(context, [&]() -> absl::Status {
    if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return s;
    return templates_->Delete(*request);
  }());
}

grpc::ServerUnaryReactor* SchedulerService::PutTemplateFile(grpc::CallbackServerContext* context,
                                                            const v1::TemplateFile* request,
                                                            v1::TemplateFile* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  return Spawned(context, executor_, response, templates_->PutFile(*request), "a PutTemplateFile call");
}

grpc::ServerUnaryReactor* SchedulerService::GetTemplateFile(grpc::CallbackServerContext* context,
                                                            const v1::GetTemplateFileRequest* request,
                                                            v1::TemplateFile* response) {
  return FinishUnary(context, [&]() -> absl::Status {
    if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return s;
    auto file = templates_->GetFile(*request);
    if (!file.ok()) return file.status();
    *response = *std::move(file);
    return absl::OkStatus();
  }());
}

}  // namespace corral::scheduler
