#include "services/scheduler/scheduler_service.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "libs/api/pagination.h"
#include "libs/core/clock.h"
#include "libs/rpc/status_conversion.h"
#include "libs/rpc/unary.h"
#include "services/scheduler/episode/trajectory_forms.h"

namespace corral::scheduler {
namespace {

// Submit's client stream: the spec, then task chunks; nothing is submitted unless the stream ends cleanly.
class SubmitReactor final : public grpc::ServerReadReactor<v1::SubmitRequest> {
 public:
  SubmitReactor(grpc::CallbackServerContext* context, Scheduler* scheduler, v1::Batch* response)
      : context_(context), scheduler_(scheduler), response_(response) {
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (context_->IsCancelled()) return;  // broken stream: OnCancel finishes
      if (!error_.ok()) return FinishOnce(error_);
      if (!has_spec_) return FinishOnce(absl::InvalidArgumentError("the first message must be `spec`"));
      {
        absl::MutexLock lock(&mu_);
        if (finished_) return;
        submitting_ = true;
      }
      scheduler_->Submit(std::move(spec_), std::move(tasks_), [this](absl::StatusOr<v1::Batch> batch) {
        if (batch.ok()) *response_ = *std::move(batch);
        {
          absl::MutexLock lock(&mu_);
          finished_ = true;
        }
        Finish(ToGrpcStatus(batch.status()));
      });
      return;
    }
    if (error_.ok()) {
      if (message_.has_spec()) {
        if (has_spec_) error_ = absl::InvalidArgumentError("`spec` must be sent exactly once, first");
        has_spec_ = true;
        spec_ = std::move(*message_.mutable_spec());
      } else if (message_.has_tasks()) {
        if (!has_spec_) error_ = absl::InvalidArgumentError("the first message must be `spec`");
        for (auto& t : *message_.mutable_tasks()->mutable_tasks()) tasks_.push_back(std::move(t));
      } else {
        error_ = absl::InvalidArgumentError("a SubmitRequest must hold `spec` or `tasks`");
      }
    }
    message_.Clear();
    StartRead(&message_);  // read to the end even after an error: the client expects to half-close
  }
  // A broken stream submits nothing; a Submit already under way finishes the call itself.
  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      if (submitting_ || finished_) return;
      finished_ = true;
    }
    Finish(grpc::Status::CANCELLED);
  }
  void OnDone() override {
    { absl::MutexLock lock(&mu_); }  // a reaction still inside the lock leaves it before the reactor is deleted
    delete this;
  }

 private:
  // Finish outside the lock, and nothing of the reactor after it: OnDone (which deletes it) may run on another
  // thread before Finish returns.
  void FinishOnce(const absl::Status& s) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(ToGrpcStatus(s));
  }

  absl::Mutex mu_;
  bool submitting_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::CallbackServerContext* const context_;
  Scheduler* const scheduler_;
  v1::Batch* const response_;
  v1::SubmitRequest message_;
  bool has_spec_ = false;
  v1::BatchSpec spec_;
  std::vector<v1::Task> tasks_;
  absl::Status error_;
};

// A reactor that finishes at once with an error (for streaming RPCs refused before they start).
template <class Base>
class Refused final : public Base {
 public:
  explicit Refused(const absl::Status& s) { this->Finish(ToGrpcStatus(s)); }
  void OnDone() override { delete this; }
};

// Drain replies when the drain completes (possibly after its grace period).
class DrainReactor final : public grpc::ServerUnaryReactor {
 public:
  DrainReactor(Scheduler* scheduler, const v1::DrainRequest& request, v1::DrainResponse* response) {
    scheduler->Drain(request, [this, response](absl::StatusOr<v1::DrainResponse> out) {
      if (out.ok()) *response = *std::move(out);
      Finish(ToGrpcStatus(out.status()));
    });
  }
  void OnDone() override { delete this; }
};

// OpenEnvironment answers once the episode's environment is reset. A call that goes away before then (cancelled,
// past its deadline) cancels the episode: nobody would drive it.
class OpenEnvironmentReactor final : public grpc::ServerUnaryReactor {
 public:
  OpenEnvironmentReactor(Scheduler* scheduler, EpisodeTable* table, EnvBoard* envs,
                         const v1::OpenEnvironmentRequest& request, v1::OpenEnvironmentResponse* response)
      : table_(table), envs_(envs), reply_(std::make_shared<Reply>(this, response)) {
    episode_id_ = scheduler->OpenEnvironment(
        request, [reply = reply_](absl::StatusOr<v1::OpenEnvironmentResponse> out) { reply->Finish(std::move(out)); });
  }
  void OnCancel() override {
    if (!reply_->Finish(absl::CancelledError("the call was cancelled")) || episode_id_.empty()) return;
    envs_->Forget(episode_id_);
    v1::CancelRequest cancel;
    cancel.set_episode_id(episode_id_);
    cancel.set_reason("the trainer's OpenEnvironment call went away before the environment was reset");
    (void)table_->Cancel(cancel);
  }
  void OnDone() override { delete this; }

 private:
  // Finishes the call once; outlives the reactor in the board's callback (which may come after OnDone).
  class Reply {
   public:
    Reply(grpc::ServerUnaryReactor* reactor, v1::OpenEnvironmentResponse* response)
        : reactor_(reactor), response_(response) {}
    // False when the call was finished already.
    bool Finish(absl::StatusOr<v1::OpenEnvironmentResponse> out) {
      absl::MutexLock lock(&mu_);
      if (finished_) return false;
      finished_ = true;
      if (out.ok()) *response_ = *std::move(out);
      reactor_->Finish(ToGrpcStatus(out.status()));
      return true;
    }

   private:
    absl::Mutex mu_;
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
    grpc::ServerUnaryReactor* const reactor_;
    v1::OpenEnvironmentResponse* const response_;
  };

  EpisodeTable* const table_;
  EnvBoard* const envs_;
  const std::shared_ptr<Reply> reply_;
  std::string episode_id_;
};

// The trainer's deadline for a policy call, bounded (the replicas' calls carry it).
absl::Time PolicyDeadline(const grpc::CallbackServerContext& context) {
  const absl::Time bound = ProcessNow() + absl::Minutes(30);
  return std::min(bound, FromSystemDeadline(context.deadline()));
}

// A policy RPC: authenticated, then answered from PolicyControl's callback.
template <class Request, class Response>
grpc::ServerUnaryReactor* PolicyCall(grpc::CallbackServerContext* context, const CallAuthenticator& auth,
                                     PolicyControl* policy,
                                     void (PolicyControl::*method)(const Request&, absl::Time,
                                                                   PolicyControl::Done<Response>),
                                     const Request& request, Response* response) {
  if (absl::Status s = auth.CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  (policy->*method)(request, PolicyDeadline(*context), [reactor, response](absl::StatusOr<Response> out) {
    if (out.ok()) *response = *std::move(out);
    reactor->Finish(ToGrpcStatus(out.status()));
  });
  return reactor;
}

}  // namespace

SchedulerService::SchedulerService(Scheduler* scheduler, EpisodeTable* table, HostRegistry* hosts, ResultHub* hub,
                                   const CallAuthenticator* auth, PolicyControl* policy, EnvBoard* envs,
                                   SandboxLeases* leases, SandboxTemplates* templates,
                                   boost::asio::any_io_executor executor)
    : scheduler_(scheduler),
      table_(table),
      hosts_(hosts),
      hub_(hub),
      auth_(auth),
      policy_(policy),
      envs_(envs),
      leases_(leases),
      templates_(templates),
      executor_(std::move(executor)) {}

grpc::ServerUnaryReactor* SchedulerService::UpdatePolicy(grpc::CallbackServerContext* context,
                                                         const v1::UpdatePolicyRequest* request,
                                                         v1::UpdatePolicyResponse* response) {
  return PolicyCall(context, *auth_, policy_, &PolicyControl::UpdatePolicy, *request, response);
}

grpc::ServerUnaryReactor* SchedulerService::PauseGeneration(grpc::CallbackServerContext* context,
                                                            const v1::PauseGenerationRequest* request,
                                                            v1::PauseGenerationResponse* response) {
  return PolicyCall(context, *auth_, policy_, &PolicyControl::Pause, *request, response);
}

grpc::ServerUnaryReactor* SchedulerService::ResumeGeneration(grpc::CallbackServerContext* context,
                                                             const v1::ResumeGenerationRequest* request,
                                                             v1::ResumeGenerationResponse* response) {
  return PolicyCall(context, *auth_, policy_, &PolicyControl::Resume, *request, response);
}

grpc::ServerReadReactor<v1::SubmitRequest>* SchedulerService::Submit(grpc::CallbackServerContext* context,
                                                                     v1::Batch* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) {
    return new Refused<grpc::ServerReadReactor<v1::SubmitRequest>>(s);
  }
  return new SubmitReactor(context, scheduler_, response);
}

grpc::ServerUnaryReactor* SchedulerService::GetBatch(grpc::CallbackServerContext* context,
                                                     const v1::GetBatchRequest* request, v1::Batch* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  if (request->batch_id().empty()) return FinishUnary(context, absl::InvalidArgumentError("batch_id is required"));
  auto batch = table_->GetBatch(request->batch_id(), request->task_stats());
  if (batch.ok()) *response = *std::move(batch);
  return FinishUnary(context, batch.status());
}

grpc::ServerUnaryReactor* SchedulerService::AppendTasks(grpc::CallbackServerContext* context,
                                                        const v1::AppendTasksRequest* request, v1::Batch* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  scheduler_->AppendTasks(*request, [reactor, response](absl::StatusOr<v1::Batch> out) {
    if (out.ok()) *response = *std::move(out);
    reactor->Finish(ToGrpcStatus(out.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::ListBatches(grpc::CallbackServerContext* context,
                                                        const v1::ListBatchesRequest* request,
                                                        v1::ListBatchesResponse* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  auto page = table_->ListBatches(*request);
  if (page.ok()) *response = *std::move(page);
  return FinishUnary(context, page.status());
}

grpc::ServerWriteReactor<v1::StreamResultsResponse>* SchedulerService::StreamResults(
    grpc::CallbackServerContext* context, const v1::StreamResultsRequest* request) {
  using Base = grpc::ServerWriteReactor<v1::StreamResultsResponse>;
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return new Refused<Base>(s);
  if (!request->batch_id().empty() && !table_->BatchExists(request->batch_id())) {
    return new Refused<Base>(absl::NotFoundError(absl::StrCat("no batch '", request->batch_id(), "'")));
  }
  uint64_t after = 0;
  if (!request->cursor().empty() && (!absl::SimpleAtoi(request->cursor(), &after) || after > table_->LastPosition())) {
    return new Refused<Base>(absl::InvalidArgumentError(absl::StrCat(
        "cursor '", request->cursor(), "' was not issued by this scheduler (use an EpisodeResult.cursor)")));
  }
  if (!v1::TrajectoryFormat_IsValid(request->trajectory_format())) {
    return new Refused<Base>(absl::InvalidArgumentError("trajectory_format is not a known format"));
  }
  return new ResultStreamReactor(table_, hub_, *request, after);
}

grpc::ServerUnaryReactor* SchedulerService::Ack(grpc::CallbackServerContext* context, const v1::AckRequest* request,
                                                v1::AckResponse* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // The reply waits for the journal: an acknowledged result must not come back after a crash.
  auto acked = table_->Ack(
      {request->episode_ids().begin(), request->episode_ids().end()},
      [reactor, response](absl::Status durable, uint32_t count) {
        response->set_acked(count);
        reactor->Finish(durable.ok() ? grpc::Status::OK
                                     : ToGrpcStatus(absl::UnavailableError(absl::StrCat(
                                           "the acknowledgement could not be journaled: ", durable.message()))));
      });
  if (!acked.ok()) reactor->Finish(ToGrpcStatus(acked.status()));
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::Cancel(grpc::CallbackServerContext* context,
                                                   const v1::CancelRequest* request, v1::CancelResponse* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  auto cancelled = table_->Cancel(*request);
  if (cancelled.ok()) response->set_cancelled(*cancelled);
  return FinishUnary(context, cancelled.status());
}

grpc::ServerUnaryReactor* SchedulerService::Drain(grpc::CallbackServerContext* context, const v1::DrainRequest* request,
                                                  v1::DrainResponse* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  return new DrainReactor(scheduler_, *request, response);
}

grpc::ServerUnaryReactor* SchedulerService::ListHosts(grpc::CallbackServerContext* context,
                                                      const v1::ListHostsRequest* request,
                                                      v1::ListHostsResponse* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  auto page_size = PageSize(request->page_size());
  if (!page_size.ok()) return FinishUnary(context, page_size.status());
  std::vector<v1::Host> hosts =
      hosts_->List([this](const std::string& address) { return static_cast<uint32_t>(table_->RunningCount(address)); });
  for (v1::Host& host : hosts) host.set_leased_sandboxes(leases_->OnHost(host.address()));
  response->set_next_page_token(FillPage(
      hosts, request->page_token(), *page_size, [](const v1::Host& h) { return h.address(); },
      [](const v1::Host&) { return true; }, [&](const v1::Host& h) { *response->add_hosts() = h; }));
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* SchedulerService::OpenEnvironment(grpc::CallbackServerContext* context,
                                                            const v1::OpenEnvironmentRequest* request,
                                                            v1::OpenEnvironmentResponse* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  return new OpenEnvironmentReactor(scheduler_, table_, envs_, *request, response);
}

grpc::ServerUnaryReactor* SchedulerService::StepEnvironment(grpc::CallbackServerContext* context,
                                                            const v1::StepEnvironmentRequest* request,
                                                            v1::StepEnvironmentResponse* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  if (request->episode_id().empty()) return FinishUnary(context, absl::InvalidArgumentError("episode_id is required"));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // The step happens even if the call goes away meanwhile; the board answers it exactly once either way.
  absl::Status accepted = envs_->Step(request->episode_id(), request->action_json(),
                                      [reactor, response](absl::StatusOr<v1::EnvironmentStep> out) {
                                        if (out.ok()) *response->mutable_step() = *std::move(out);
                                        reactor->Finish(ToGrpcStatus(out.status()));
                                      });
  if (!accepted.ok()) reactor->Finish(ToGrpcStatus(accepted));
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::CloseEnvironment(grpc::CallbackServerContext* context,
                                                             const v1::CloseEnvironmentRequest* request,
                                                             v1::EpisodeResult* response) {
  if (absl::Status s = auth_->CheckCluster(*context); !s.ok()) return FinishUnary(context, s);
  if (request->episode_id().empty()) return FinishUnary(context, absl::InvalidArgumentError("episode_id is required"));
  if (!v1::TrajectoryFormat_IsValid(request->trajectory_format())) {
    return FinishUnary(context, absl::InvalidArgumentError("trajectory_format is not a known format"));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const v1::TrajectoryFormat format = request->trajectory_format();
  absl::Status accepted = envs_->Close(request->episode_id(), request->final_message(),
                                       [reactor, response, format](absl::StatusOr<v1::EpisodeResult> out) {
                                         if (out.ok()) {
                                           *response = *std::move(out);
                                           *response->mutable_trajectory() =
                                               ConvertTrajectory(response->trajectory(), format);
                                         }
                                         reactor->Finish(ToGrpcStatus(out.status()));
                                       });
  if (!accepted.ok()) reactor->Finish(ToGrpcStatus(accepted));
  return reactor;
}

}  // namespace corral::scheduler
