#include "services/proxy/proxy_service.h"

#include "absl/strings/str_cat.h"
#include "boost/asio/co_spawn.hpp"
#include "libs/api/pagination.h"
#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"
#include "libs/async/spawn.h"
#include "libs/http/server.h"
#include "libs/rpc/status_conversion.h"
#include "libs/rpc/unary.h"
#include "spdlog/spdlog.h"

namespace corral::proxy {
grpc::ServerUnaryReactor* ProxyService::OpenSession(grpc::CallbackServerContext* ctx, const v1::OpenSessionRequest* req,
                                                    v1::OpenSessionResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ledger_->Open(*req, [this, reactor, resp](absl::StatusOr<SessionLedger::Opened> opened) {
    if (opened.ok()) {
      resp->set_env_token(opened->token);
      resp->set_base_url(base_url_);
      resp->set_model(opened->session->request().model());
      *resp->mutable_session() = opened->session->Snapshot();
    }
    reactor->Finish(ToGrpcStatus(opened.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* ProxyService::GetTrajectory(grpc::CallbackServerContext* ctx,
                                                      const v1::GetTrajectoryRequest* req, v1::Trajectory* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  if (!ledger_->records()) {
    return FinishUnary(ctx, absl::FailedPreconditionError(
                                "this proxy records no calls (record: false): it keeps no trajectory to give"));
  }
  auto session = ledger_->store().Find(req->env_id());
  if (!session.ok()) return FinishUnary(ctx, session.status());
  *resp = (*session)->Trajectory(req->format());
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ProxyService::CloseSession(grpc::CallbackServerContext* ctx,
                                                     const v1::CloseSessionRequest* req,
                                                     v1::CloseSessionResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ledger_->Close(req->env_id(), v1::CLOSE_REASON_CLOSED,
                 [reactor, req, resp](absl::StatusOr<std::shared_ptr<Session>> session) {
                   if (session.ok()) {
                     *resp->mutable_session() = (*session)->Snapshot();
                     *resp->mutable_trajectory() = (*session)->Trajectory(req->format());
                   }
                   reactor->Finish(ToGrpcStatus(session.status()));
                 });
  return reactor;
}

grpc::ServerUnaryReactor* ProxyService::ListSessions(grpc::CallbackServerContext* ctx,
                                                     const v1::ListSessionsRequest* req,
                                                     v1::ListSessionsResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  auto page = PageSize(req->page_size());
  if (!page.ok()) return FinishUnary(ctx, page.status());
  using SessionRef = std::shared_ptr<Session>;
  resp->set_next_page_token(FillPage(
      ledger_->store().List(), req->page_token(), *page, [](const SessionRef& s) { return s->env_id(); },
      [&](const SessionRef& s) {
        const bool state_ok =
            req->state() == v1::SESSION_STATE_UNSPECIFIED || (req->state() == v1::SESSION_STATE_OPEN) == s->open();
        return state_ok && MatchesLabels(req->label_selector(), s->request().labels());
      },
      [&](const SessionRef& s) { *resp->add_sessions() = s->Snapshot(); }));
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ProxyService::AckTrajectory(grpc::CallbackServerContext* ctx,
                                                      const v1::AckTrajectoryRequest* req,
                                                      v1::AckTrajectoryResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  std::vector<std::string> ids(req->env_ids().begin(), req->env_ids().end());
  auto acked = ledger_->Ack(ids);
  if (!acked.ok()) return FinishUnary(ctx, acked.status());
  resp->set_acked(*acked);
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ProxyService::UpdatePolicy(grpc::CallbackServerContext* ctx,
                                                     const v1::UpdatePolicyRequest* req,
                                                     v1::UpdatePolicyResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  absl::StatusOr<v1::UpdatePolicyResponse> out = gate_->UpdatePolicy(*req);
  if (out.ok()) *resp = *std::move(out);
  return FinishUnary(ctx, out.status());
}

grpc::ServerUnaryReactor* ProxyService::PauseGeneration(grpc::CallbackServerContext* ctx,
                                                        const v1::PauseGenerationRequest* req,
                                                        v1::PauseGenerationResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  if (!v1::PauseMode_IsValid(req->mode())) {
    return FinishUnary(ctx, absl::InvalidArgumentError(absl::StrCat("mode ", req->mode(), " is not a PauseMode")));
  }
  const absl::Duration abort_after = FromProto(req->abort_after());
  if (abort_after < absl::ZeroDuration()) {
    return FinishUnary(ctx, absl::InvalidArgumentError("abort_after must not be negative"));
  }
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!gate_->Pause(*req)) {  // a late re-push: answers with the state as it is
    *resp = gate_->Counts();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  // Answers once nothing is upstream; a DRAIN past abort_after cuts what is left.
  const bool drain = req->mode() != v1::PAUSE_MODE_ABORT && req->has_abort_after();
  auto wait = [this, ctx, reactor, resp, start, drain, abort_after]() -> boost::asio::awaitable<void> {
    bool cut = false;
    while (true) {
      if (gate_->Quiet()) {
        *resp = gate_->Counts();
        ToProto(absl::Now() - start, resp->mutable_waited());
        reactor->Finish(grpc::Status::OK);
        co_return;
      }
      if (!gate_->paused()) {
        reactor->Finish(ToGrpcStatus(absl::AbortedError("generation was resumed before the calls in flight ended")));
        co_return;
      }
      if (ctx->IsCancelled()) {
        reactor->Finish(grpc::Status::CANCELLED);
        co_return;
      }
      if (drain && !cut && absl::Now() - start >= abort_after) {
        gate_->AbortUpstream();
        cut = true;
      }
      co_await async::SleepFor(absl::Milliseconds(5));
    }
  };
  async::Spawn(executor_, wait, "waiting for a pause to take effect");
  return reactor;
}

grpc::ServerUnaryReactor* ProxyService::ResumeGeneration(grpc::CallbackServerContext* ctx,
                                                         const v1::ResumeGenerationRequest* req,
                                                         v1::ResumeGenerationResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return FinishUnary(ctx, s);
  absl::StatusOr<v1::ResumeGenerationResponse> out = gate_->Resume(*req);
  // The sessions' TTLs did not run while their agents could not call (the TTL sweep skips a pause).
  if (out.ok()) ledger_->store().PostponeOpen(FromProto(out->paused_for()));
  if (out.ok()) *resp = *std::move(out);
  return FinishUnary(ctx, out.status());
}

}  // namespace corral::proxy
