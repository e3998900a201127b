#include "services/proxy/sessions.h"

#include <openssl/crypto.h>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "libs/api/ids.h"
#include "libs/api/proto_time.h"
#include "libs/core/status_macros.h"

namespace corral::proxy {

v1::SessionPolicy WithDefaults(const v1::SessionPolicy& defaults, const v1::SessionPolicy& requested) {
  v1::SessionPolicy p = defaults;
  // Repeated and map fields of a request replace the defaults' rather than appending to them.
  if (!requested.allowed_models().empty()) p.clear_allowed_models();
  if (!requested.model_aliases().empty()) p.clear_model_aliases();
  p.MergeFrom(requested);
  return p;
}

// -------------------------------------------------------------------------------------------------- Session

Session::Session(v1::OpenSessionRequest request, absl::Time now, absl::Duration ttl, absl::Duration retention,
                 std::string env_token)
    : request_(std::move(request)),
      env_token_(std::move(env_token)),
      retention_(retention),
      open_time_(now),
      expire_time_(now + ttl),
      trajectory_(request_.env_id(), request_.policy().role_rules()) {}

bool Session::open() const {
  absl::MutexLock lock(&mu_);
  return state_ == v1::SESSION_STATE_OPEN;
}

BudgetUse Session::used() const {
  absl::MutexLock lock(&mu_);
  // Calls in flight count against max_calls, so concurrent calls cannot overrun it.
  return BudgetUse{trajectory_.calls() + unrecorded_ + inflight_, usage_.prompt_tokens(), usage_.completion_tokens()};
}

bool Session::TryBeginCall() {
  absl::MutexLock lock(&mu_);
  const uint32_t max_calls = request_.policy().budget().max_calls();
  if (max_calls > 0 && trajectory_.calls() + unrecorded_ + inflight_ >= max_calls) return false;
  ++inflight_;
  return true;
}

void Session::AbandonCall() {
  absl::MutexLock lock(&mu_);
  if (inflight_ > 0) --inflight_;
}

void Session::FailCall(uint32_t seq, const std::string& error, int http_status) {
  absl::MutexLock lock(&mu_);
  trajectory_.MarkFailed(seq, error, http_status);
}

void Session::AddUsage(const v1::Usage& u) {
  usage_.set_prompt_tokens(usage_.prompt_tokens() + u.prompt_tokens());
  usage_.set_completion_tokens(usage_.completion_tokens() + u.completion_tokens());
  usage_.set_total_tokens(usage_.total_tokens() + u.total_tokens());
}

void Session::EndCall(RecordedCall& call, std::span<const uint32_t> matched) {
  absl::MutexLock lock(&mu_);
  if (inflight_ > 0) --inflight_;
  AddUsage(call.call().usage());
  trajectory_.RecordKeeping(call, matched);
}

void Session::EndUnrecordedCall(const v1::Usage& usage) {
  absl::MutexLock lock(&mu_);
  if (inflight_ > 0) --inflight_;
  AddUsage(usage);
  ++unrecorded_;
}

void Session::Replay(RecordedCall call) {
  absl::MutexLock lock(&mu_);
  AddUsage(call.call().usage());
  trajectory_.Record(std::move(call));
}

std::vector<v1::RestoredMessage> Session::Restore(std::vector<v1::ChatMessage>& prompt,
                                                  std::vector<uint32_t>* matched) const {
  absl::MutexLock lock(&mu_);
  return trajectory_.Restore(prompt, matched);
}

void Session::SetUpstream(const std::string& name) {
  absl::MutexLock lock(&mu_);
  upstream_ = name;
}

std::string Session::upstream() const {
  absl::MutexLock lock(&mu_);
  return upstream_;
}

void Session::Close(v1::CloseReason reason, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (state_ == v1::SESSION_STATE_CLOSED) return;
  state_ = v1::SESSION_STATE_CLOSED;
  close_reason_ = reason;
  close_time_ = now;
  expire_time_ = now + retention_;
}

absl::Time Session::expire_time() const {
  absl::MutexLock lock(&mu_);
  return expire_time_;
}

void Session::Postpone(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  if (state_ == v1::SESSION_STATE_OPEN) expire_time_ += d;
}

v1::Session Session::Snapshot() const {
  v1::Session s;
  s.set_env_id(request_.env_id());
  *s.mutable_episode() = request_.episode();
  *s.mutable_labels() = request_.labels();
  *s.mutable_policy() = request_.policy();
  ToProto(open_time_, s.mutable_open_time());
  absl::MutexLock lock(&mu_);
  s.set_state(state_);
  s.set_close_reason(close_reason_);
  s.set_calls(static_cast<uint32_t>(trajectory_.calls()) + unrecorded_);
  s.set_inflight_calls(inflight_);
  *s.mutable_usage() = usage_;
  s.set_upstream(upstream_);
  if (state_ == v1::SESSION_STATE_CLOSED) ToProto(close_time_, s.mutable_close_time());
  ToProto(expire_time_, s.mutable_expire_time());
  return s;
}

v1::Trajectory Session::Trajectory(v1::TrajectoryFormat format) const {
  v1::Trajectory t;
  if (request_.has_episode()) *t.mutable_episode() = request_.episode();
  ToProto(open_time_, t.mutable_opened_at());
  absl::MutexLock lock(&mu_);
  trajectory_.Export(format, &t);
  t.set_complete(state_ == v1::SESSION_STATE_CLOSED);
  if (state_ == v1::SESSION_STATE_CLOSED) ToProto(close_time_, t.mutable_closed_at());
  return t;
}

// --------------------------------------------------------------------------------------------- SessionStore

SessionStore::SessionStore(SessionLimits limits, const TokenSigner* signer, Clock* clock)
    : limits_(std::move(limits)), signer_(signer), clock_(clock) {}

absl::StatusOr<SessionStore::Opened> SessionStore::Open(v1::OpenSessionRequest request) {
  CORRAL_RETURN_IF_ERROR(ValidateId("env_id", request.env_id()));
  *request.mutable_policy() = WithDefaults(limits_.default_policy, request.policy());
  CORRAL_RETURN_IF_ERROR(ValidatePolicy(request.policy()));
  const v1::SessionPolicy& p = request.policy();
  const absl::Duration ttl = p.has_ttl() ? FromProto(p.ttl()) : limits_.default_ttl;
  const absl::Duration retention = p.has_retention() ? FromProto(p.retention()) : limits_.default_retention;
  if (ttl <= absl::ZeroDuration() || ttl > limits_.max_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy.ttl must be above 0 and at most ", absl::FormatDuration(limits_.max_ttl)));
  }
  if (retention < absl::ZeroDuration()) return absl::InvalidArgumentError("policy.retention must not be negative");
  CORRAL_RETURN_IF_ERROR(ValidateLabels("labels", request.labels()));
  absl::MutexLock lock(&mu_);
  if (auto it = sessions_.find(request.env_id()); it != sessions_.end()) {
    const Session& existing = *it->second;
    if (!existing.open()) {
      return absl::AlreadyExistsError(
          absl::StrCat("session '", request.env_id(), "' is closed; a retried attempt needs a new env_id"));
    }
    if (!google::protobuf::util::MessageDifferencer::Equals(existing.request(), request)) {
      return absl::AlreadyExistsError(absl::StrCat("session '", request.env_id(), "' is open with another policy"));
    }
    return Opened{it->second, it->second->env_token(), false};
  }
  if (open_count_ >= limits_.max_sessions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the proxy holds max_sessions=", limits_.max_sessions, " open sessions"));
  }
  auto session = std::make_shared<Session>(request, clock_->Now(), ttl, retention,
                                           signer_->Sign(kEnvTokenPurpose, request.env_id()));
  sessions_.emplace(request.env_id(), session);
  ++open_count_;
  return Opened{session, session->env_token(), true};
}

std::shared_ptr<Session> SessionStore::Restore(v1::OpenSessionRequest request, absl::Time open_time) {
  const v1::SessionPolicy& p = request.policy();
  const absl::Duration ttl = p.has_ttl() ? FromProto(p.ttl()) : limits_.default_ttl;
  const absl::Duration retention = p.has_retention() ? FromProto(p.retention()) : limits_.default_retention;
  auto session =
      std::make_shared<Session>(request, open_time, ttl, retention, signer_->Sign(kEnvTokenPurpose, request.env_id()));
  absl::MutexLock lock(&mu_);
  sessions_[request.env_id()] = session;
  ++open_count_;  // (a journaled close follows through Close)
  return session;
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Authenticate(absl::string_view token) const {
  // A token names its session: equal to the one the session was given (compared in constant time), it is
  // valid — no HMAC per call. Anything else takes the full check below, for its precise error.
  if (const size_t dot = token.rfind('.'); dot != absl::string_view::npos) {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(std::string(token.substr(0, dot)));
    if (it != sessions_.end() && it->second->open()) {
      const std::string& known = it->second->env_token();
      if (known.size() == token.size() && CRYPTO_memcmp(known.data(), token.data(), token.size()) == 0) {
        return it->second;
      }
    }
  }
  auto env_id = signer_->Verify(kEnvTokenPurpose, token);
  if (!env_id.ok()) return absl::UnauthenticatedError("invalid env token");
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(*env_id);
  if (it == sessions_.end()) return absl::UnauthenticatedError("no session for this env token");
  if (!it->second->open()) return absl::FailedPreconditionError(absl::StrCat("session '", *env_id, "' is closed"));
  return it->second;
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Find(const std::string& env_id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(env_id);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrCat("session '", env_id, "' not found"));
  return it->second;
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Close(const std::string& env_id, v1::CloseReason reason) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(env_id);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrCat("session '", env_id, "' not found"));
  if (it->second->open()) {
    it->second->Close(reason, clock_->Now());
    --open_count_;
  }
  return it->second;
}

std::vector<std::shared_ptr<Session>> SessionStore::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Session>> out;
  for (const auto& [id, s] : sessions_) out.push_back(s);
  return out;
}

void SessionStore::PostponeOpen(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return;
  absl::MutexLock lock(&mu_);
  for (auto& [id, s] : sessions_) s->Postpone(d);
}

SessionStore::Expired SessionStore::Expire() {
  Expired out;
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    Session& s = *it->second;
    if (now < s.expire_time()) {
      ++it;
    } else if (s.open()) {
      s.Close(v1::CLOSE_REASON_TTL_EXPIRED, now);
      --open_count_;
      out.closed.push_back(it->second);
      ++it;
    } else {
      out.dropped.push_back(it->first);
      it = sessions_.erase(it);
    }
  }
  return out;
}

absl::StatusOr<uint32_t> SessionStore::Ack(const std::vector<std::string>& env_ids) {
  if (env_ids.empty()) return absl::InvalidArgumentError("env_ids must not be empty");
  absl::MutexLock lock(&mu_);
  for (const auto& id : env_ids) {
    auto it = sessions_.find(id);
    if (it != sessions_.end() && it->second->open()) {
      return absl::FailedPreconditionError(absl::StrCat("session '", id, "' is still open; close it first"));
    }
  }
  uint32_t acked = 0;
  for (const auto& id : env_ids) acked += static_cast<uint32_t>(sessions_.erase(id));
  return acked;
}

size_t SessionStore::open_sessions() const {
  absl::MutexLock lock(&mu_);
  return static_cast<size_t>(open_count_);
}

}  // namespace corral::proxy
