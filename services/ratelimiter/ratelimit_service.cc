#include "services/ratelimiter/ratelimit_service.h"

#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "libs/api/pagination.h"
#include "libs/core/status_macros.h"
#include "libs/rpc/status_conversion.h"
#include "libs/rpc/unary.h"
#include "services/ratelimiter/convert.h"
#include "services/ratelimiter/session_reactor.h"

namespace corral::ratelimiter {
namespace {

// A unary Acquire: waits in the limiter's queue without blocking a thread. If the caller cancels (or its
// deadline passes) the request leaves the queue at once; a grant that races with the cancellation is
// released immediately, so a vanished caller never holds a permit.
class AcquireReactor final : public grpc::ServerUnaryReactor {
 public:
  AcquireReactor(Limiter* limiter, grpc::CallbackServerContext* ctx, v1::AcquireResponse* response)
      : limiter_(limiter), ctx_(ctx), response_(response) {}

  // The limiter may run the callback inside Acquire; a result that arrives before Start has finished is
  // parked and delivered at its end, so `this` is never touched after Finish.
  void Start(AcquireParams params) {
    auto ticket =
        limiter_->Acquire(std::move(params), [this](absl::StatusOr<Grant> grant) { OnResult(std::move(grant)); });
    std::optional<absl::StatusOr<Grant>> early;
    uint64_t cancel_waiter = 0;
    {
      absl::MutexLock lock(&mu_);
      started_ = true;
      early = std::move(pending_);
      if (ticket.ok() && ticket->queued) waiter_id_ = ticket->waiter_id;
      if (cancelled_) cancel_waiter = waiter_id_;
    }
    if (!ticket.ok()) {
      Finish(ToGrpcStatus(ticket.status()));
    } else if (early.has_value()) {
      Deliver(*std::move(early));
    } else if (cancel_waiter != 0) {
      limiter_->CancelWaiter(cancel_waiter, absl::CancelledError("the caller cancelled the call"));
    }
  }

  void OnCancel() override {
    uint64_t waiter = 0;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      waiter = waiter_id_;
    }
    if (waiter != 0) limiter_->CancelWaiter(waiter, absl::CancelledError("the caller cancelled the call"));
  }

  void OnDone() override { delete this; }

 private:
  void OnResult(absl::StatusOr<Grant> grant) {
    {
      absl::MutexLock lock(&mu_);
      if (!started_) {
        pending_ = std::move(grant);
        return;
      }
    }
    Deliver(std::move(grant));
  }

  void Deliver(absl::StatusOr<Grant> grant) {
    if (!grant.ok()) {
      Finish(ToGrpcStatus(grant.status()));
      return;
    }
    if (ctx_->IsCancelled() && !grant->lease_id.empty()) {
      (void)limiter_->Release(grant->lease_id, grant->session_id);
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the caller cancelled the call; the grant was released"));
      return;
    }
    ToProto(*grant, response_);
    Finish(grpc::Status::OK);
  }

  Limiter* const limiter_;
  grpc::CallbackServerContext* const ctx_;
  v1::AcquireResponse* const response_;
  absl::Mutex mu_;
  uint64_t waiter_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::StatusOr<Grant>> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerUnaryReactor* RateLimitService::CreateLimit(grpc::CallbackServerContext* ctx,
                                                        const v1::CreateLimitRequest* request, v1::Limit* response) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  LimitSpec spec = FromProto(request->limit());
  absl::Status status = limiter_->CreateLimit(spec);
  if (status.ok()) {
    auto stored = limiter_->GetLimit(spec.name);
    if (stored.ok()) ToProto(*stored, response);
  }
  return FinishUnary(ctx, status);
}

grpc::ServerUnaryReactor* RateLimitService::GetLimit(grpc::CallbackServerContext* ctx,
                                                     const v1::GetLimitRequest* request, v1::Limit* response) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  auto spec = limiter_->GetLimit(request->name());
  if (spec.ok()) ToProto(*spec, response);
  return FinishUnary(ctx, spec.status());
}

grpc::ServerUnaryReactor* RateLimitService::ListLimits(grpc::CallbackServerContext* ctx,
                                                       const v1::ListLimitsRequest* request,
                                                       v1::ListLimitsResponse* response) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  auto page_size = PageSize(request->page_size());
  if (!page_size.ok()) return FinishUnary(ctx, page_size.status());
  // Limits are listed by name; the page token is the last name returned.
  response->set_next_page_token(FillPage(
      limiter_->ListLimits(), request->page_token(), *page_size, [](const LimitSpec& l) { return l.name; },
      [](const LimitSpec&) { return true; }, [&](const LimitSpec& l) { ToProto(l, response->add_limits()); }));
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* RateLimitService::UpdateLimit(grpc::CallbackServerContext* ctx,
                                                        const v1::UpdateLimitRequest* request, v1::Limit* response) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  auto spec = limiter_->UpdateLimit(FromProto(request->limit()));
  if (spec.ok()) ToProto(*spec, response);
  return FinishUnary(ctx, spec.status());
}

grpc::ServerUnaryReactor* RateLimitService::DeleteLimit(grpc::CallbackServerContext* ctx,
                                                        const v1::DeleteLimitRequest* request,
                                                        v1::DeleteLimitResponse*) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  return FinishUnary(ctx, limiter_->DeleteLimit(request->name(), request->force()));
}

grpc::ServerUnaryReactor* RateLimitService::StartAcquire(grpc::CallbackServerContext* ctx,
                                                         const v1::AcquireRequest* request,
                                                         v1::AcquireResponse* response, bool try_only) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  auto params = FromProto(*request);
  if (!params.ok()) return FinishUnary(ctx, params.status());
  params->try_only = try_only;
  auto* reactor = new AcquireReactor(limiter_, ctx, response);
  reactor->Start(*std::move(params));
  return reactor;
}

grpc::ServerUnaryReactor* RateLimitService::Acquire(grpc::CallbackServerContext* ctx, const v1::AcquireRequest* request,
                                                    v1::AcquireResponse* response) {
  return StartAcquire(ctx, request, response, /*try_only=*/false);
}

grpc::ServerUnaryReactor* RateLimitService::TryAcquire(grpc::CallbackServerContext* ctx,
                                                       const v1::AcquireRequest* request,
                                                       v1::AcquireResponse* response) {
  return StartAcquire(ctx, request, response, /*try_only=*/true);
}

grpc::ServerUnaryReactor* RateLimitService::Release(grpc::CallbackServerContext* ctx, const v1::ReleaseRequest* request,
                                                    v1::ReleaseResponse*) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  if (request->lease_id().empty()) return FinishUnary(ctx, absl::InvalidArgumentError("lease_id is required"));
  return FinishUnary(ctx, limiter_->Release(request->lease_id(), request->session_id()));
}

grpc::ServerUnaryReactor* RateLimitService::KeepAlive(grpc::CallbackServerContext* ctx,
                                                      const v1::KeepAliveRequest* request,
                                                      v1::KeepAliveResponse* response) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  if (request->lease_ids().empty()) return FinishUnary(ctx, absl::InvalidArgumentError("lease_ids is required"));
  auto grants = limiter_->KeepAlive({request->lease_ids().begin(), request->lease_ids().end()}, request->session_id());
  if (grants.ok()) {
    for (const Grant& g : *grants) ToProto(g, response->add_leases());
  }
  return FinishUnary(ctx, grants.status());
}

grpc::ServerUnaryReactor* RateLimitService::Adjust(grpc::CallbackServerContext* ctx, const v1::AdjustRequest* request,
                                                   v1::AdjustResponse* response) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  absl::StatusOr<double> tokens = limiter_->Adjust(FromProto(*request));
  if (tokens.ok()) response->set_tokens(*tokens);
  return FinishUnary(ctx, tokens.status());
}

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>* RateLimitService::Session(
    grpc::CallbackServerContext* ctx) {
  return new SessionReactor(limiter_, auth_->CheckCluster(*ctx));
}

grpc::ServerUnaryReactor* RateLimitService::GetStatus(grpc::CallbackServerContext* ctx,
                                                      const v1::GetStatusRequest* request,
                                                      v1::GetStatusResponse* response) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  if (!request->limit().empty()) {
    if (auto spec = limiter_->GetLimit(request->limit()); !spec.ok()) return FinishUnary(ctx, spec.status());
  }
  ToProto(limiter_->Status(request->limit()), response);
  return FinishUnary(ctx, absl::OkStatus());
}

}  // namespace corral::ratelimiter
