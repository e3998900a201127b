#include "services/proxy/session_ledger.h"

#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "libs/core/logging.h"
#include "services/proxy/policy.h"
#include "spdlog/spdlog.h"

namespace corral::proxy {

void SessionLedger::UpdateGauge() { metrics_->open_sessions.Set(static_cast<double>(store_->open_sessions())); }

void SessionLedger::Open(v1::OpenSessionRequest request, absl::AnyInvocable<void(absl::StatusOr<Opened>)> done) {
  if (!store_->Find(request.env_id()).ok()) {  // a retried open keeps the model it was given
    auto model = ResolveSessionModel(request.policy(), request.model(), default_model_,
                                     upstreams_ != nullptr ? upstreams_->known_models() : std::nullopt);
    if (!model.ok()) {
      done(model.status());
      return;
    }
    request.set_model(*std::move(model));
  }
  auto opened = store_->Open(std::move(request));
  if (!opened.ok() || !opened->created) {
    done(std::move(opened));
    return;
  }
  // Durable before the token is handed out: a restarted proxy still knows the session.
  auto shared = std::make_shared<decltype(done)>(std::move(done));
  const absl::Time open_time = FromProto(opened->session->Snapshot().open_time());
  journal_->PutSession(opened->session->request(), open_time, [this, shared, opened = *opened](absl::Status s) mutable {
    if (!s.ok()) {
      spdlog::error("journaling session {}: {}", opened.session->env_id(), s);
      (void)store_->Close(opened.session->env_id(), v1::CLOSE_REASON_CLOSED);
      (void)store_->Ack({opened.session->env_id()});
      (*shared)(absl::UnavailableError("the session could not be journaled"));
      return;
    }
    UpdateGauge();
    (*shared)(std::move(opened));
  });
}

void SessionLedger::Close(const std::string& env_id, v1::CloseReason reason,
                          absl::AnyInvocable<void(absl::StatusOr<std::shared_ptr<Session>>)> done) {
  auto session = store_->Close(env_id, reason);
  if (!session.ok()) {
    done(session.status());
    return;
  }
  UpdateGauge();
  auto shared = std::make_shared<decltype(done)>(std::move(done));
  journal_->CloseSession(
      env_id, (*session)->Snapshot().close_reason(), [shared, session = *session](absl::Status s) mutable {
        if (!s.ok()) {
          (*shared)(absl::UnavailableError(absl::StrCat("the close could not be journaled: ", s.message())));
          return;
        }
        (*shared)(std::move(session));
      });
}

absl::StatusOr<uint32_t> SessionLedger::Ack(const std::vector<std::string>& env_ids) {
  auto acked = store_->Ack(env_ids);
  if (!acked.ok()) return acked;
  // Forgotten in memory already; a drop the journal misses only brings the trajectory back after a restart.
  journal_->DropSessions(env_ids, [](absl::Status s) {
    if (!s.ok()) spdlog::warn("dropping acknowledged sessions from the journal: {}", s);
  });
  return acked;
}

void SessionLedger::Expire() {
  auto expired = store_->Expire();
  for (const auto& s : expired.closed) {
    spdlog::info("session {}: TTL passed; closed", s->env_id());
    journal_->CloseSession(s->env_id(), v1::CLOSE_REASON_TTL_EXPIRED, [env_id = s->env_id()](absl::Status st) {
      if (!st.ok()) spdlog::warn("journaling the expiry of session {}: {}", env_id, st);
    });
  }
  if (!expired.dropped.empty()) {
    journal_->DropSessions(std::move(expired.dropped), [](absl::Status st) {
      if (!st.ok()) spdlog::warn("dropping expired sessions from the journal: {}", st);
    });
  }
  UpdateGauge();
}

boost::asio::awaitable<absl::Status> SessionLedger::RecordCall(Session& session, RecordedCall& call,
                                                               std::vector<uint32_t> matched) {
  if (!record_) {
    session.EndUnrecordedCall(call.call().usage());
    co_return absl::OkStatus();
  }
  session.EndCall(call, matched);  // journaled as stored: ids and node indices included
  const uint32_t seq = call.call().seq();
  const absl::Time commit_start = clock_->Now();
  absl::Status journaled = co_await journal_->AppendCall(session.env_id(), call);
  metrics_->journal_commit.Observe(absl::ToDoubleSeconds(clock_->Now() - commit_start));
  if (!journaled.ok()) {
    spdlog::error("session {}: journaling call {} failed: {}", session.env_id(), seq, journaled);
    session.FailCall(seq, absl::StrCat("the call could not be journaled: ", journaled.message()), 500);
    co_return absl::InternalError(absl::StrCat("the call could not be journaled: ", journaled.message()));
  }
  co_return absl::OkStatus();
}

}  // namespace corral::proxy
