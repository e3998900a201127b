#include "services/ratelimiter/session_reactor.h"

#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "libs/core/logging.h"
#include "libs/rpc/status_conversion.h"
#include "services/ratelimiter/convert.h"
#include "spdlog/spdlog.h"

namespace corral::ratelimiter {
namespace {

v1::SessionResponse Reply(uint64_t request_id) {
  v1::SessionResponse r;
  r.set_request_id(request_id);
  return r;
}

v1::SessionResponse ErrorReply(uint64_t request_id, const absl::Status& status) {
  v1::SessionResponse r = Reply(request_id);
  ToProto(status, r.mutable_error());
  return r;
}

// The final reply to an acquire: granted, denied (no permit: not an error in the request) or error.
v1::SessionResponse AcquireReply(uint64_t request_id, const absl::StatusOr<Grant>& result) {
  v1::SessionResponse r = Reply(request_id);
  if (result.ok()) {
    ToProto(*result, r.mutable_granted());
    return r;
  }
  switch (result.status().code()) {
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled: ToProto(result.status(), r.mutable_denied()); return r;
    default: ToProto(result.status(), r.mutable_error()); return r;
  }
}

}  // namespace

void SessionReactor::Outbox::Send(v1::SessionResponse message) {
  absl::MutexLock lock(&mu);
  SendLocked(std::move(message));
}

void SessionReactor::Outbox::SendLocked(v1::SessionResponse message) {
  if (reactor == nullptr || finished || finish_when_drained.has_value()) return;
  queue.push_back(std::move(message));
  if (writing) return;
  writing = true;
  reactor->StartWrite(&queue.front());  // deque::push_back keeps the front element where it is
}

void SessionReactor::Outbox::FinishLocked(grpc::Status status) {
  if (reactor == nullptr || finished) return;
  if (writing) {
    if (!finish_when_drained) finish_when_drained = std::move(status);
    return;
  }
  finished = true;
  reactor->Finish(std::move(status));
}

SessionReactor::SessionReactor(Limiter* limiter, absl::Status auth) : limiter_(limiter) {
  {
    absl::MutexLock lock(&outbox_->mu);
    outbox_->reactor = this;
  }
  if (!auth.ok()) {
    Fail(ToGrpcStatus(auth));
    return;
  }
  StartRead(&request_);
}

void SessionReactor::Fail(grpc::Status status) {
  absl::MutexLock lock(&outbox_->mu);
  // Unsent replies are dropped; the one being written must stay alive until OnWriteDone.
  auto& queue = outbox_->queue;
  queue.erase(outbox_->writing && !queue.empty() ? queue.begin() + 1 : queue.begin(), queue.end());
  outbox_->FinishLocked(std::move(status));
}

void SessionReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The client half-closed or the stream broke: the session ends now; replies already queued still go out.
    CloseSession();
    absl::MutexLock lock(&outbox_->mu);
    outbox_->FinishLocked(grpc::Status::OK);
    return;
  }
  Handle(request_);
  absl::MutexLock lock(&outbox_->mu);
  if (!outbox_->finished && !outbox_->finish_when_drained) StartRead(&request_);
}

void SessionReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&outbox_->mu);
  outbox_->writing = false;
  if (!ok) {
    // The client is gone; OnDone will follow. Nothing more can be written.
    outbox_->queue.clear();
    outbox_->FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
    return;
  }
  if (!outbox_->queue.empty()) outbox_->queue.pop_front();
  if (!outbox_->queue.empty()) {
    outbox_->writing = true;
    StartWrite(&outbox_->queue.front());
  } else if (outbox_->finish_when_drained) {
    outbox_->finished = true;
    Finish(*std::move(outbox_->finish_when_drained));
  }
}

void SessionReactor::OnDone() {
  {
    absl::MutexLock lock(&outbox_->mu);
    outbox_->reactor = nullptr;
  }
  CloseSession();
  delete this;
}

void SessionReactor::CloseSession() {
  if (session_id_.empty() || session_closed_) return;
  session_closed_ = true;
  limiter_->CloseSession(session_id_);
}

void SessionReactor::Handle(const v1::SessionRequest& request) {
  if (request.has_hello()) {
    HandleHello(request);
    return;
  }
  if (session_id_.empty()) {
    Fail(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the first message of a session must be hello"));
    return;
  }
  const uint64_t id = request.request_id();
  if (request.has_cancel()) {
    HandleCancel(request.cancel());
    return;
  }
  if (id == 0 && request.has_release()) {
    // Fire-and-forget release: applied in order, no reply.
    absl::Status status = limiter_->Release(request.release().lease_id(), session_id_);
    if (!status.ok()) spdlog::debug("session {}: quiet release failed: {}", session_id_, status);
    return;
  }
  if (id == 0 && request.has_adjust()) {
    absl::StatusOr<double> tokens = limiter_->Adjust(FromProto(request.adjust()));
    if (!tokens.ok()) spdlog::debug("session {}: quiet adjust failed: {}", session_id_, tokens.status());
    return;
  }
  if (id == 0) {
    outbox_->Send(ErrorReply(0, absl::InvalidArgumentError("request_id must be non-zero")));
    return;
  }
  switch (request.request_case()) {
    case v1::SessionRequest::kAcquire: HandleAcquire(id, request.acquire(), false); break;
    case v1::SessionRequest::kTryAcquire: HandleAcquire(id, request.try_acquire(), true); break;
    case v1::SessionRequest::kRelease: HandleRelease(id, request.release()); break;
    case v1::SessionRequest::kKeepAlive: HandleKeepAlive(id, request.keep_alive()); break;
    case v1::SessionRequest::kAdjust: {
      absl::StatusOr<double> tokens = limiter_->Adjust(FromProto(request.adjust()));
      v1::SessionResponse r = tokens.ok() ? Reply(id) : ErrorReply(id, tokens.status());
      if (tokens.ok()) r.mutable_adjusted()->set_tokens(*tokens);
      outbox_->Send(std::move(r));
      break;
    }
    default: outbox_->Send(ErrorReply(id, absl::InvalidArgumentError("empty request: set one of its fields")));
  }
}

void SessionReactor::HandleHello(const v1::SessionRequest& request) {
  if (!session_id_.empty()) {
    Fail(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "hello may be sent only once per session"));
    return;
  }
  const v1::SessionHello& hello = request.hello();
  if (hello.client_id().empty() || hello.client_id().size() > 256) {
    Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "hello.client_id is required (1-256 characters)"));
    return;
  }
  omit_queued_ = hello.omit_queued();
  std::weak_ptr<Outbox> weak = outbox_;
  session_id_ = limiter_->OpenSession(hello.client_id(), [weak](const std::string& lease_id, const absl::Status& why) {
    if (auto outbox = weak.lock()) {
      v1::SessionResponse r = Reply(0);
      r.mutable_lease_lost()->set_lease_id(lease_id);
      ToProto(why, r.mutable_lease_lost()->mutable_reason());
      outbox->Send(std::move(r));
    }
  });
  std::vector<std::string> ids;
  for (const v1::Lease& lease : hello.reclaim()) ids.push_back(lease.lease_id());
  v1::SessionResponse r = Reply(request.request_id());
  v1::SessionReady* ready = r.mutable_ready();
  ready->set_session_id(session_id_);
  ready->set_learning_mode(limiter_->learning_mode());
  if (ready->learning_mode()) ToProto(limiter_->learning_mode_end(), ready->mutable_learning_mode_end());
  ToProto(limiter_->options().default_lease_ttl, ready->mutable_default_lease_ttl());
  ToProto(limiter_->options().max_lease_ttl, ready->mutable_max_lease_ttl());
  for (const ReclaimOutcome& outcome : limiter_->Reclaim(session_id_, ids)) {
    v1::ReclaimResult* result = ready->add_reclaimed();
    result->set_lease_id(outcome.lease_id);
    if (outcome.result.ok()) {
      ToProto(*outcome.result, result->mutable_lease());
    } else {
      ToProto(outcome.result.status(), result->mutable_error());
    }
  }
  spdlog::debug("session {} opened by '{}' ({} re-claims)", session_id_, hello.client_id(), ids.size());
  outbox_->Send(std::move(r));
}

void SessionReactor::HandleAcquire(uint64_t request_id, const v1::AcquireRequest& acquire, bool try_only) {
  auto params = FromProto(acquire);
  if (!params.ok()) {
    outbox_->Send(ErrorReply(request_id, params.status()));
    return;
  }
  {
    absl::MutexLock lock(&outbox_->mu);
    if (!outbox_->outstanding.emplace(request_id, 0).second) {
      outbox_->SendLocked(ErrorReply(
          request_id, absl::AlreadyExistsError(absl::StrCat("request_id ", request_id, " is still outstanding"))));
      return;
    }
  }
  params->session_id = session_id_;
  params->request_id.clear();  // idempotency keys are for unary retries; a stream has request ids
  params->try_only = try_only;
  std::shared_ptr<Outbox> outbox = outbox_;
  auto ticket = limiter_->Acquire(*std::move(params), [outbox, request_id](absl::StatusOr<Grant> result) {
    absl::MutexLock lock(&outbox->mu);
    outbox->outstanding.erase(request_id);
    outbox->SendLocked(AcquireReply(request_id, result));
  });
  absl::MutexLock lock(&outbox_->mu);
  if (!ticket.ok()) {
    outbox_->outstanding.erase(request_id);
    outbox_->SendLocked(AcquireReply(request_id, ticket.status()));
    return;
  }
  auto it = outbox_->outstanding.find(request_id);
  if (!ticket->queued || it == outbox_->outstanding.end()) return;  // already answered
  it->second = ticket->waiter_id;                                   // for a cancel
  if (omit_queued_) return;
  v1::SessionResponse r = Reply(request_id);
  r.mutable_queued()->set_position(ticket->position);
  if (ticket->estimated_wait) ToProto(*ticket->estimated_wait, r.mutable_queued()->mutable_estimated_wait());
  outbox_->SendLocked(std::move(r));
}

void SessionReactor::HandleRelease(uint64_t request_id, const v1::ReleaseRequest& release) {
  absl::Status status = release.lease_id().empty() ? absl::InvalidArgumentError("release.lease_id is required")
                                                   : limiter_->Release(release.lease_id(), session_id_);
  if (!status.ok()) {
    outbox_->Send(ErrorReply(request_id, status));
    return;
  }
  v1::SessionResponse r = Reply(request_id);
  r.mutable_released()->set_lease_id(release.lease_id());
  outbox_->Send(std::move(r));
}

void SessionReactor::HandleKeepAlive(uint64_t request_id, const v1::KeepAliveRequest& keep_alive) {
  auto grants = limiter_->KeepAlive({keep_alive.lease_ids().begin(), keep_alive.lease_ids().end()}, session_id_);
  if (!grants.ok()) {
    outbox_->Send(ErrorReply(request_id, grants.status()));
    return;
  }
  v1::SessionResponse r = Reply(request_id);
  for (const Grant& g : *grants) ToProto(g, r.mutable_kept_alive()->add_leases());
  outbox_->Send(std::move(r));
}

void SessionReactor::HandleCancel(const v1::CancelAcquire& cancel) {
  uint64_t waiter = 0;
  {
    absl::MutexLock lock(&outbox_->mu);
    auto it = outbox_->outstanding.find(cancel.acquire_request_id());
    if (it != outbox_->outstanding.end()) waiter = it->second;
  }
  if (waiter != 0) limiter_->CancelWaiter(waiter, absl::CancelledError("withdrawn by cancel"));
}

}  // namespace corral::ratelimiter
