// corral-proxy's gRPC adapter (proto/corral/v1/proxy.proto): session management through the SessionLedger,
// answering once a change is durable — from the journal's thread, never blocking a gRPC thread on a commit.
// Cluster token on every call.
#pragma once

#include <string>

#include "corral/v1/proxy.grpc.pb.h"
#include "libs/rpc/auth.h"
#include "services/proxy/policy_version.h"
#include "services/proxy/session_ledger.h"

namespace corral::proxy {

class ProxyService final : public v1::Proxy::CallbackService {
 public:
  ProxyService(SessionLedger* ledger, const CallAuthenticator* auth, std::string base_url,
               PolicyVersion* policy_version)
      : ledger_(ledger), auth_(auth), base_url_(std::move(base_url)), policy_version_(policy_version) {}

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
  grpc::ServerUnaryReactor* UpdatePolicy(grpc::CallbackServerContext* ctx, const v1::UpdatePolicyRequest* req,
                                         v1::UpdatePolicyResponse* resp) override;

 private:
  SessionLedger* const ledger_;
  const CallAuthenticator* const auth_;
  const std::string base_url_;
  PolicyVersion* const policy_version_;
};

}  // namespace corral::proxy
