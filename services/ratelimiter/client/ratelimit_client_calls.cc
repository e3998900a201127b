// RateLimitClient's calls over its session (Acquire, TryAcquire, AcquireAsync, Adjust, releases) and
// ScopedPermit; the session itself (connecting, the stream, replies, reconnects) is ratelimit_client.cc.
#include <utility>

#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "libs/core/logging.h"
#include "services/ratelimiter/client/ratelimit_client.h"
#include "spdlog/spdlog.h"

namespace corral::ratelimiter {

namespace {

absl::Status FromCallStatus(const v1::CallStatus& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.code()), s.message());
}

}  // namespace

// ---------------------------------------------------------------------------------------------- ScopedPermit

ScopedPermit& ScopedPermit::operator=(ScopedPermit&& other) noexcept {
  if (this != &other) {
    (void)Release();
    client_ = other.client_;
    lease_ = std::move(other.lease_);
    unlimited_ = other.unlimited_;
    other.client_ = nullptr;
    other.lease_.Clear();
    other.unlimited_ = false;
  }
  return *this;
}

bool ScopedPermit::valid() const {
  if (unlimited_ || lease_.lease_id().empty()) return client_ != nullptr || unlimited_;
  return client_ != nullptr && client_->Holds(lease_.lease_id());
}

absl::Status ScopedPermit::Release() {
  RateLimitClient* client = client_;
  client_ = nullptr;
  unlimited_ = false;
  if (client == nullptr || lease_.lease_id().empty()) return absl::OkStatus();
  std::string id = lease_.lease_id();
  lease_.Clear();
  return client->ReleaseLease(id);
}
// ---------------------------------------------------------------------------------------------- calls

void RateLimitClient::Adjust(const std::string& limit, const std::string& key, int64_t tokens,
                             absl::Duration hold_for) {
  v1::SessionRequest message;
  v1::AdjustRequest* adjust = message.mutable_adjust();
  adjust->set_limit(limit);
  adjust->set_key(key);
  adjust->set_tokens(tokens);
  if (hold_for > absl::ZeroDuration()) ToProto(hold_for, adjust->mutable_hold_for());
  absl::MutexLock lock(&mu_);
  if (!SendLocked(std::move(message))) spdlog::debug("ratelimit client: not connected; adjust of '{}' dropped", limit);
}

absl::StatusOr<v1::SessionResponse> RateLimitClient::Call(v1::SessionRequest request, absl::Duration timeout,
                                                          uint64_t* id_out) {
  auto pending = std::make_shared<Pending>();
  uint64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = StartCallLocked(request, pending);
  }
  if (id == 0) return absl::UnavailableError(absl::StrCat("not connected to the ratelimiter at ", options_.address));
  if (id_out != nullptr) *id_out = id;
  if (!pending->done.WaitForNotificationWithTimeout(timeout)) {
    absl::MutexLock lock(&mu_);
    // Answered meanwhile (its reply is set, and its entry removed, under the lock): take it rather than drop a grant.
    if (pending_.erase(id) > 0) return absl::DeadlineExceededError("no reply from the ratelimiter in time");
  }
  return pending->reply;
}

absl::StatusOr<ScopedPermit> RateLimitClient::DoAcquire(const PermitRequest& request, bool try_only) {
  // The limiter enforces wait_timeout; the local wait only guards against a limiter that stops answering.
  const absl::Duration local_wait = request.wait_timeout == absl::InfiniteDuration()
                                        ? absl::InfiniteDuration()
                                        : request.wait_timeout + kUnansweredGrace;
  uint64_t id = 0;
  auto reply = Call(AcquireMessage(request, try_only), local_wait, &id);
  if (!reply.ok() && reply.status().code() == absl::StatusCode::kDeadlineExceeded) {
    absl::MutexLock lock(&mu_);
    SendCancelLocked(id);
  }
  return PermitFromReply(reply, request.limit);
}

absl::StatusOr<ScopedPermit> RateLimitClient::Acquire(const PermitRequest& request) {
  return DoAcquire(request, false);
}

v1::SessionRequest RateLimitClient::AcquireMessage(const PermitRequest& request, bool try_only) {
  v1::SessionRequest message;
  v1::AcquireRequest* acquire = try_only ? message.mutable_try_acquire() : message.mutable_acquire();
  acquire->set_limit(request.limit);
  acquire->set_key(request.key);
  acquire->set_permits(request.permits);
  acquire->set_allow_debt(request.allow_debt);
  if (request.wait_timeout != absl::InfiniteDuration()) ToProto(request.wait_timeout, acquire->mutable_wait_timeout());
  if (request.lease_ttl > absl::ZeroDuration()) ToProto(request.lease_ttl, acquire->mutable_lease_ttl());
  return message;
}

absl::StatusOr<ScopedPermit> RateLimitClient::PermitFromReply(const absl::StatusOr<v1::SessionResponse>& reply,
                                                              const std::string& limit) {
  if (!reply.ok()) {
    if (reply.status().code() == absl::StatusCode::kUnavailable && options_.fail_mode == FailMode::kOpen) {
      spdlog::warn("ratelimit client: {}; failing open for '{}'", reply.status().message(), limit);
      ScopedPermit permit;
      permit.unlimited_ = true;
      return permit;
    }
    return reply.status();
  }
  if (reply->has_denied()) return FromCallStatus(reply->denied());
  if (reply->has_error()) return FromCallStatus(reply->error());
  if (!reply->has_granted()) return absl::InternalError("unexpected reply to acquire");
  ScopedPermit permit;
  permit.client_ = this;
  if (reply->granted().has_lease()) permit.lease_ = reply->granted().lease();
  return permit;
}

uint64_t RateLimitClient::AcquireAsync(const PermitRequest& request,
                                       std::function<void(absl::StatusOr<ScopedPermit>)> done) {
  auto pending = std::make_shared<Pending>();
  pending->callback = [this, limit = request.limit, done](absl::StatusOr<v1::SessionResponse> reply) {
    done(PermitFromReply(reply, limit));
  };
  v1::SessionRequest message = AcquireMessage(request, false);
  uint64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = StartCallLocked(message, pending);
  }
  if (id == 0) {
    pending->callback(absl::UnavailableError(absl::StrCat("not connected to the ratelimiter at ", options_.address)));
  }
  return id;
}

void RateLimitClient::CancelAcquire(uint64_t id) {
  std::shared_ptr<Pending> pending;
  {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;  // already answered
    pending = it->second;
    pending_.erase(it);
    SendCancelLocked(id);
  }
  // A grant racing with the cancel finds no pending entry and is given back by OnReply.
  pending->callback(absl::CancelledError("the permit request was cancelled"));
}

absl::StatusOr<ScopedPermit> RateLimitClient::TryAcquire(const PermitRequest& request) {
  return DoAcquire(request, true);
}

absl::Status RateLimitClient::ReleaseLease(const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  held_.erase(lease_id);
  // Disconnected: the limiter released the session's leases when the stream broke — unless it crashed and
  // restored them from its lease snapshot, so the release is sent again once reconnected (a re-claim that
  // races with this release is given back by OnReady too).
  if (!connected_) {
    if (released_offline_.size() < kMaxReleasedOffline) released_offline_.push_back(lease_id);
    return absl::OkStatus();
  }
  // The release is not waited for: the stream is ordered, so the limiter applies it before anything this
  // client sends next, and its only failure (the lease already ended) needs no action.
  SendReleaseLocked(lease_id);
  return absl::OkStatus();
}
}  // namespace corral::ratelimiter
