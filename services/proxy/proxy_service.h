// corral-proxy's gRPC adapter (proto/corral/v1/proxy.proto): session management through the SessionLedger,
// answering once a change is durable — from the journal's thread, never blocking a gRPC thread on a commit.
// Cluster token on every call.
#pragma once

#include <string>

#include "boost/asio/any_io_executor.hpp"
#include "corral/v1/proxy.grpc.pb.h"
#include "libs/rpc/auth.h"
#include "services/proxy/generation_gate.h"
#include "services/proxy/session_ledger.h"

namespace corral::proxy {

class ProxyService final : public v1::Proxy::CallbackService {
 public:
  // `executor` runs the waits of PauseGeneration (it answers once nothing is upstream).
  ProxyService(SessionLedger* ledger, const CallAuthenticator* auth, std::string base_url, GenerationGate* gate,
               boost::asio::any_io_executor executor)
      : ledger_(ledger), auth_(auth), base_url_(std::move(base_url)), gate_(gate), executor_(std::move(executor)) {}

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
  grpc::ServerUnaryReactor* PauseGeneration(grpc::CallbackServerContext* ctx, const v1::PauseGenerationRequest* req,
                                            v1::PauseGenerationResponse* resp) override;
  grpc::ServerUnaryReactor* ResumeGeneration(grpc::CallbackServerContext* ctx, const v1::ResumeGenerationRequest* req,
                                             v1::ResumeGenerationResponse* resp) override;

 private:
  SessionLedger* const ledger_;
  const CallAuthenticator* const auth_;
  const std::string base_url_;
  GenerationGate* const gate_;
  const boost::asio::any_io_executor executor_;
};

}  // namespace corral::proxy
