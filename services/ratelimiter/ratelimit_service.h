// The ratelimiter's gRPC adapter: proto ↔ core types and Status mapping around Limiter, nothing else.
// Unary RPCs are handled inline (Acquire with a small reactor, so a cancelled call leaves the queue);
// the Session stream has its own reactor (session_reactor.h).
#pragma once

#include "corral/v1/ratelimit.grpc.pb.h"
#include "libs/rpc/auth.h"
#include "services/ratelimiter/limiter.h"

namespace corral::ratelimiter {

// Thread-safe; holds no state of its own beyond pointers to the limiter and authenticator.
class RateLimitService final : public v1::RateLimiter::CallbackService {
 public:
  RateLimitService(Limiter* limiter, const CallAuthenticator* auth) : limiter_(limiter), auth_(auth) {}

  grpc::ServerUnaryReactor* CreateLimit(grpc::CallbackServerContext* ctx, const v1::CreateLimitRequest* request,
                                        v1::Limit* response) override;
  grpc::ServerUnaryReactor* GetLimit(grpc::CallbackServerContext* ctx, const v1::GetLimitRequest* request,
                                     v1::Limit* response) override;
  grpc::ServerUnaryReactor* ListLimits(grpc::CallbackServerContext* ctx, const v1::ListLimitsRequest* request,
                                       v1::ListLimitsResponse* response) override;
  grpc::ServerUnaryReactor* UpdateLimit(grpc::CallbackServerContext* ctx, const v1::UpdateLimitRequest* request,
                                        v1::Limit* response) override;
  grpc::ServerUnaryReactor* DeleteLimit(grpc::CallbackServerContext* ctx, const v1::DeleteLimitRequest* request,
                                        v1::DeleteLimitResponse* response) override;
  grpc::ServerUnaryReactor* Acquire(grpc::CallbackServerContext* ctx, const v1::AcquireRequest* request,
                                    v1::AcquireResponse* response) override;
  grpc::ServerUnaryReactor* TryAcquire(grpc::CallbackServerContext* ctx, const v1::AcquireRequest* request,
                                       v1::AcquireResponse* response) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* ctx, const v1::ReleaseRequest* request,
                                    v1::ReleaseResponse* response) override;
  grpc::ServerUnaryReactor* KeepAlive(grpc::CallbackServerContext* ctx, const v1::KeepAliveRequest* request,
                                      v1::KeepAliveResponse* response) override;
  grpc::ServerUnaryReactor* Adjust(grpc::CallbackServerContext* ctx, const v1::AdjustRequest* request,
                                   v1::AdjustResponse* response) override;
  grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>* Session(grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx, const v1::GetStatusRequest* request,
                                      v1::GetStatusResponse* response) override;

 private:
  grpc::ServerUnaryReactor* StartAcquire(grpc::CallbackServerContext* ctx, const v1::AcquireRequest* request,
                                         v1::AcquireResponse* response, bool try_only);

  Limiter* const limiter_;
  const CallAuthenticator* const auth_;
};

}  // namespace corral::ratelimiter
