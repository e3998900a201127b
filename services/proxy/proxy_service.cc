#include "services/proxy/proxy_service.h"

#include "absl/strings/str_cat.h"
#include "libs/core/logging.h"
#include "libs/rpc/pagination.h"
#include "libs/rpc/proto_time.h"
#include "libs/rpc/status_conversion.h"
#include "spdlog/spdlog.h"

namespace corral::proxy {
namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* ProxyService::OpenSession(grpc::CallbackServerContext* ctx, const v1::OpenSessionRequest* req,
                                                    v1::OpenSessionResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return Done(ctx, s);
  auto opened = sessions_->Open(*req);
  if (!opened.ok()) return Done(ctx, opened.status());
  if (opened->created) {
    // Durable before the token is handed out: a restarted proxy still knows the session.
    const v1::Session snapshot = opened->session->Snapshot();
    if (auto s = journal_->PutSession(opened->session->request(), corral::FromProto(snapshot.open_time())); !s.ok()) {
      spdlog::error("journaling session {}: {}", req->env_id(), s);
      (void)sessions_->Close(req->env_id(), v1::CLOSE_REASON_CLOSED);
      (void)sessions_->Ack({req->env_id()});
      return Done(ctx, absl::UnavailableError("the session could not be journaled"));
    }
    metrics_->open_sessions.Set(static_cast<double>(sessions_->open_sessions()));
  }
  resp->set_env_token(opened->token);
  resp->set_base_url(base_url_);
  *resp->mutable_session() = opened->session->Snapshot();
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ProxyService::GetTrajectory(grpc::CallbackServerContext* ctx,
                                                      const v1::GetTrajectoryRequest* req, v1::Trajectory* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return Done(ctx, s);
  auto session = sessions_->Find(req->env_id());
  if (!session.ok()) return Done(ctx, session.status());
  *resp = (*session)->Trajectory(req->format());
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ProxyService::CloseSession(grpc::CallbackServerContext* ctx,
                                                     const v1::CloseSessionRequest* req,
                                                     v1::CloseSessionResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return Done(ctx, s);
  auto session = sessions_->Close(req->env_id(), v1::CLOSE_REASON_CLOSED);
  if (!session.ok()) return Done(ctx, session.status());
  if (auto s = journal_->CloseSession(req->env_id(), (*session)->Snapshot().close_reason()); !s.ok()) {
    return Done(ctx, absl::UnavailableError(absl::StrCat("the close could not be journaled: ", s.message())));
  }
  metrics_->open_sessions.Set(static_cast<double>(sessions_->open_sessions()));
  *resp->mutable_session() = (*session)->Snapshot();
  *resp->mutable_trajectory() = (*session)->Trajectory(req->format());
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ProxyService::ListSessions(grpc::CallbackServerContext* ctx,
                                                     const v1::ListSessionsRequest* req,
                                                     v1::ListSessionsResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return Done(ctx, s);
  auto page = PageSize(req->page_size());
  if (!page.ok()) return Done(ctx, page.status());
  using SessionRef = std::shared_ptr<Session>;
  resp->set_next_page_token(FillPage(
      sessions_->List(), req->page_token(), *page, [](const SessionRef& s) { return s->env_id(); },
      [&](const SessionRef& s) {
        const bool state_ok = req->state() == v1::SESSION_STATE_UNSPECIFIED ||
                              (req->state() == v1::SESSION_STATE_OPEN) == s->open();
        return state_ok && MatchesLabels(req->label_selector(), s->request().labels());
      },
      [&](const SessionRef& s) { *resp->add_sessions() = s->Snapshot(); }));
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ProxyService::AckTrajectory(grpc::CallbackServerContext* ctx,
                                                      const v1::AckTrajectoryRequest* req,
                                                      v1::AckTrajectoryResponse* resp) {
  if (auto s = auth_->CheckCluster(*ctx); !s.ok()) return Done(ctx, s);
  std::vector<std::string> ids(req->env_ids().begin(), req->env_ids().end());
  auto acked = sessions_->Ack(ids);
  if (!acked.ok()) return Done(ctx, acked.status());
  if (auto s = journal_->DropSessions(ids); !s.ok()) spdlog::warn("dropping acknowledged sessions from the journal: {}", s);
  resp->set_acked(*acked);
  return Done(ctx, absl::OkStatus());
}

}  // namespace corral::proxy
