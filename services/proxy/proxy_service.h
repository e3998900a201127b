// corral-proxy's gRPC adapter (proto/corral/v1/proxy.proto): session management over SessionStore, made
// durable in the journal before each answer. Cluster token on every call.
#pragma once

#include <string>

#include "corral/v1/proxy.grpc.pb.h"
#include "libs/rpc/auth.h"
#include "services/proxy/metrics.h"
#include "services/proxy/proxy_journal.h"
#include "services/proxy/sessions.h"

namespace corral::proxy {

class ProxyService final : public v1::Proxy::CallbackService {
 public:
  ProxyService(SessionStore* sessions, ProxyJournal* journal, const CallAuthenticator* auth, ProxyMetrics* metrics,
               std::string base_url)
      : sessions_(sessions), journal_(journal), auth_(auth), metrics_(metrics), base_url_(std::move(base_url)) {}

  grpc::ServerUnaryReactor* OpenSession(grpc::CallbackServerContext* ctx, const v1::OpenSessionRequest* req,
                                        v1::OpenSessionResponse* resp) override;
  grpc::ServerUnaryReactor* GetTrajectory(grpc::CallbackServerContext* ctx, const v1::GetTrajectoryRequest* req,
                                          v1::Trajectory* resp) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* ctx, const v1::CloseSessionRequest* req,
                                         v1::CloseSessionResponse* resp) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* ctx, const v1::ListSessionsRequest* req,
                                         v1::ListSessionsResponse* resp) override;
  grpc::ServerUnaryReactor* AckTrajectory(grpc::CallbackServerContext* ctx, const v1::AckTrajectoryRequest* req,
                                          v1::AckTrajectoryResponse* resp) override;

 private:
  SessionStore* const sessions_;
  ProxyJournal* const journal_;
  const CallAuthenticator* const auth_;
  ProxyMetrics* const metrics_;
  const std::string base_url_;
};

}  // namespace corral::proxy
