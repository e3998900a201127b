#include "services/ratelimiter/client/ratelimit_client.h"

#include "absl/strings/str_cat.h"
#include "libs/core/logging.h"
#include "libs/rpc/auth.h"
#include "libs/api/proto_time.h"
#include "spdlog/spdlog.h"

namespace corral::ratelimiter {

struct RateLimitClient::Pending {
  absl::Notification done;
  absl::StatusOr<v1::SessionResponse> reply = absl::UnknownError("no reply");
  // Set for AcquireAsync: called (outside the client's lock) instead of notifying `done`.
  std::function<void(absl::StatusOr<v1::SessionResponse>)> callback;
};

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

// ---------------------------------------------------------------------------------------------- client

RateLimitClient::RateLimitClient(ClientOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<RateLimitClient>> RateLimitClient::Connect(ClientOptions options) {
  auto channel = MakeChannel(options.address, options.channel);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<RateLimitClient> client(new RateLimitClient(std::move(options)));
  client->stub_ = v1::RateLimiter::NewStub(*channel);
  client->reader_ = std::thread([c = client.get()] { c->ReaderLoop(); });
  client->first_attempt_done_.WaitForNotificationWithTimeout(client->options_.connect_timeout);
  if (!client->connected() && client->options_.fail_mode == FailMode::kClosed) {
    return absl::UnavailableError(absl::StrCat("cannot reach the ratelimiter at ", client->options_.address));
  }
  client->keepalive_ = std::thread([c = client.get()] { c->KeepAliveLoop(); });
  return client;
}

absl::StatusOr<std::unique_ptr<RateLimitClient>> RateLimitClient::ConnectService(const std::string& address,
                                                                                const std::string& token,
                                                                                const std::string& client_id,
                                                                                const ChannelOptions& channel,
                                                                                bool fail_open) {
  if (address.empty()) return std::unique_ptr<RateLimitClient>();
  ClientOptions options;
  options.address = address;
  options.token = token;
  options.client_id = client_id;
  options.channel = channel;
  options.fail_mode = fail_open ? FailMode::kOpen : FailMode::kClosed;
  auto client = Connect(std::move(options));
  if (!client.ok()) {
    return absl::UnavailableError(
        absl::StrCat(client.status().message(), " (start the ratelimiter first, or set limiter_fail_open)"));
  }
  return client;
}

RateLimitClient::~RateLimitClient() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    if (context_) context_->TryCancel();  // ends the session: the limiter releases our leases
    if (connecting_context_) connecting_context_->TryCancel();
  }
  if (reader_.joinable()) reader_.join();
  if (keepalive_.joinable()) keepalive_.join();
}

bool RateLimitClient::connected() const {
  absl::MutexLock lock(&mu_);
  return connected_;
}

std::string RateLimitClient::session_id() const {
  absl::MutexLock lock(&mu_);
  return session_id_;
}

int RateLimitClient::connections() const {
  absl::MutexLock lock(&mu_);
  return connections_;
}

bool RateLimitClient::Holds(const std::string& lease_id) const {
  absl::MutexLock lock(&mu_);
  return held_.count(lease_id) > 0;
}

absl::Status RateLimitClient::OpenStream() {
  auto context = std::make_unique<grpc::ClientContext>();
  AttachBearer(*context, options_.token);
  v1::SessionRequest hello;
  hello.mutable_hello()->set_client_id(options_.client_id);
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return absl::CancelledError("closing");
    // Published before the call starts, so the destructor can cancel a connect that hangs.
    connecting_context_ = context.get();
    for (const auto& [id, lease] : held_) *hello.mutable_hello()->add_reclaim() = lease;
  }
  auto stream = stub_->Session(context.get());
  v1::SessionResponse ready;
  const bool ok = stream->Write(hello) && stream->Read(&ready) && ready.has_ready();
  std::vector<std::string> released_meanwhile;
  {
    absl::MutexLock write_lock(&write_mu_);
    absl::MutexLock lock(&mu_);
    connecting_context_ = nullptr;
    if (!ok || closing_) {
      if (closing_) context->TryCancel();
      grpc::Status status = stream->Finish();
      return absl::UnavailableError(absl::StrCat("session to ", options_.address, " failed: ", status.error_message()));
    }
    for (const v1::ReclaimResult& r : ready.ready().reclaimed()) {
      if (r.has_error()) {
        spdlog::warn("ratelimit client: lease could not be re-claimed: {}", r.error().message());
        held_.erase(r.lease_id());
      } else if (held_.count(r.lease_id())) {
        held_[r.lease_id()] = r.lease();
      } else {
        released_meanwhile.push_back(r.lease_id());  // its permit was dropped while we were reconnecting
      }
    }
    released_meanwhile.insert(released_meanwhile.end(), released_offline_.begin(), released_offline_.end());
    released_offline_.clear();
    session_id_ = ready.ready().session_id();
    default_ttl_ = FromProto(ready.ready().default_lease_ttl());
    context_ = std::move(context);
    stream_ = std::move(stream);
    connected_ = true;
    ++connections_;
  }
  for (const std::string& id : released_meanwhile) SendReleaseNoReply(id);
  return absl::OkStatus();
}

void RateLimitClient::Send(v1::SessionRequest request) {
  if (!request.has_release() && !request.has_adjust()) {  // with request_id 0 these get no reply at all
    absl::MutexLock lock(&mu_);
    request.set_request_id(next_request_id_++);
  }
  (void)WriteOnStream(request);
}

bool RateLimitClient::WriteOnStream(const v1::SessionRequest& request) {
  absl::MutexLock write_lock(&write_mu_);
  grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>* stream;
  {
    absl::MutexLock lock(&mu_);
    stream = connected_ ? stream_.get() : nullptr;
  }
  return stream != nullptr && stream->Write(request);
}

void RateLimitClient::Adjust(const std::string& limit, const std::string& key, int64_t tokens, absl::Duration hold_for) {
  v1::SessionRequest message;
  v1::AdjustRequest* adjust = message.mutable_adjust();
  adjust->set_limit(limit);
  adjust->set_key(key);
  adjust->set_tokens(tokens);
  if (hold_for > absl::ZeroDuration()) ToProto(hold_for, adjust->mutable_hold_for());
  if (!WriteOnStream(message)) spdlog::debug("ratelimit client: not connected; adjust of '{}' dropped", limit);
}

void RateLimitClient::SendReleaseNoReply(const std::string& lease_id) {
  v1::SessionRequest message;
  message.mutable_release()->set_lease_id(lease_id);
  Send(std::move(message));
}

absl::Duration RateLimitClient::KeepAliveInterval() const {
  if (options_.keepalive_interval > absl::ZeroDuration()) return options_.keepalive_interval;
  // A third of the shortest TTL held, so one lost keepalive never expires a lease.
  absl::Duration ttl = default_ttl_;
  for (const auto& [id, lease] : held_) {
    if (lease.has_ttl()) ttl = std::min(ttl, FromProto(lease.ttl()));
  }
  return std::max(ttl / 3, absl::Milliseconds(50));
}

std::vector<std::shared_ptr<RateLimitClient::Pending>> RateLimitClient::FailPending(const absl::Status& status) {
  std::vector<std::shared_ptr<Pending>> callbacks;
  for (auto& [id, pending] : pending_) {
    pending->reply = status;
    if (pending->callback) {
      callbacks.push_back(pending);
    } else {
      pending->done.Notify();
    }
  }
  pending_.clear();
  return callbacks;
}

void RateLimitClient::ReaderLoop() {
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    absl::Status opened = OpenStream();
    if (!first_attempt_done_.HasBeenNotified()) first_attempt_done_.Notify();
    if (opened.ok()) {
      backoff = absl::Milliseconds(50);
      grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>* stream;
      {
        absl::MutexLock lock(&mu_);
        stream = stream_.get();
      }
      v1::SessionResponse reply;
      while (stream->Read(&reply)) {
        std::vector<std::string> orphans;  // grants nobody waits for any more: give them back
        std::shared_ptr<Pending> callback;
        {
          absl::MutexLock lock(&mu_);
          if (reply.has_lease_lost()) {
            held_.erase(reply.lease_lost().lease_id());
            continue;
          }
          if (reply.has_queued()) continue;
          if (reply.has_granted() && reply.granted().has_lease()) {
            held_[reply.granted().lease().lease_id()] = reply.granted().lease();
          }
          auto it = pending_.find(reply.request_id());
          if (it == pending_.end()) {
            if (reply.has_granted() && reply.granted().has_lease()) orphans.push_back(reply.granted().lease().lease_id());
          } else {
            it->second->reply = reply;
            if (it->second->callback) {
              callback = it->second;
            } else {
              it->second->done.Notify();
            }
            pending_.erase(it);
          }
        }
        if (callback) callback->callback(std::move(callback->reply));
        for (const auto& id : orphans) SendReleaseNoReply(id);
      }
      std::vector<std::shared_ptr<Pending>> failed;
      {
        absl::MutexLock write_lock(&write_mu_);
        absl::MutexLock lock(&mu_);
        connected_ = false;
        failed = FailPending(absl::UnavailableError("the session stream to the ratelimiter broke"));
        grpc::Status status = stream_->Finish();
        if (!closing_) spdlog::warn("ratelimit client: session lost ({}); reconnecting", status.error_message());
        stream_.reset();
        context_.reset();
      }
      for (auto& p : failed) p->callback(std::move(p->reply));
    }
    absl::MutexLock lock(&mu_);
    if (closing_) return;
    mu_.AwaitWithTimeout(absl::Condition(&closing_), backoff);
    if (closing_) return;
    backoff = std::min(backoff * 2, options_.max_reconnect_backoff);
  }
}

void RateLimitClient::KeepAliveLoop() {
  while (true) {
    bool renew = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&closing_), KeepAliveInterval());
      if (closing_) return;
      renew = connected_ && !held_.empty();
    }
    if (!renew) continue;
    v1::SessionRequest request;
    request.mutable_keep_alive();  // no ids: every lease of this session
    auto reply = Call(std::move(request), absl::Seconds(10), nullptr);
    if (!reply.ok()) continue;
    if (reply->has_error()) {
      spdlog::warn("ratelimit client: keepalive refused: {}", reply->error().message());
      continue;
    }
    // A lease the session still has but no permit owns (a release lost in a reconnect) is given back.
    std::vector<std::string> strays;
    {
      absl::MutexLock lock(&mu_);
      for (const v1::Lease& lease : reply->kept_alive().leases()) {
        if (!held_.count(lease.lease_id())) strays.push_back(lease.lease_id());
      }
    }
    for (const auto& id : strays) SendReleaseNoReply(id);
  }
}

absl::StatusOr<v1::SessionResponse> RateLimitClient::Call(v1::SessionRequest request, absl::Duration timeout,
                                                          uint64_t* id_out) {
  auto pending = std::make_shared<Pending>();
  uint64_t id;
  {
    absl::MutexLock lock(&mu_);
    if (!connected_) return absl::UnavailableError(absl::StrCat("not connected to the ratelimiter at ", options_.address));
    id = next_request_id_++;
    pending_[id] = pending;
  }
  if (id_out != nullptr) *id_out = id;
  request.set_request_id(id);
  const bool written = WriteOnStream(request);
  if (!written) {
    absl::MutexLock lock(&mu_);
    pending_.erase(id);
    return absl::UnavailableError("the session stream to the ratelimiter broke");
  }
  if (!pending->done.WaitForNotificationWithTimeout(timeout)) {
    absl::MutexLock lock(&mu_);
    pending_.erase(id);
    return absl::DeadlineExceededError("no reply from the ratelimiter in time");
  }
  return pending->reply;
}

absl::StatusOr<ScopedPermit> RateLimitClient::DoAcquire(const PermitRequest& request, bool try_only) {
  // The limiter enforces wait_timeout; the local wait only guards against a limiter that stops answering.
  const absl::Duration local_wait =
      request.wait_timeout == absl::InfiniteDuration() ? absl::InfiniteDuration() : request.wait_timeout + absl::Seconds(10);
  uint64_t id = 0;
  auto reply = Call(AcquireMessage(request, try_only), local_wait, &id);
  if (!reply.ok() && reply.status().code() == absl::StatusCode::kDeadlineExceeded) {
    v1::SessionRequest cancel;
    cancel.mutable_cancel()->set_acquire_request_id(id);
    Send(std::move(cancel));
  }
  return PermitFromReply(reply, request.limit);
}

absl::StatusOr<ScopedPermit> RateLimitClient::Acquire(const PermitRequest& request) { return DoAcquire(request, false); }

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
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (connected_) {
      id = next_request_id_++;
      pending_[id] = pending;
    }
  }
  if (id == 0) {
    pending->callback(absl::UnavailableError(absl::StrCat("not connected to the ratelimiter at ", options_.address)));
    return 0;
  }
  message.set_request_id(id);
  const bool written = WriteOnStream(message);
  if (!written) {
    bool mine = false;
    {
      absl::MutexLock lock(&mu_);
      mine = pending_.erase(id) > 0;  // else the reader already failed it
    }
    if (mine) pending->callback(absl::UnavailableError("the session stream to the ratelimiter broke"));
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
  }
  v1::SessionRequest cancel;
  cancel.mutable_cancel()->set_acquire_request_id(id);
  Send(std::move(cancel));
  // A grant racing with the cancel finds no pending entry and is released by the reader.
  pending->callback(absl::CancelledError("the permit request was cancelled"));
}

absl::StatusOr<ScopedPermit> RateLimitClient::TryAcquire(const PermitRequest& request) {
  return DoAcquire(request, true);
}

absl::Status RateLimitClient::ReleaseLease(const std::string& lease_id) {
  {
    absl::MutexLock lock(&mu_);
    held_.erase(lease_id);
    // Disconnected: the limiter released the session's leases when the stream broke — unless it crashed and
    // restored them from its lease snapshot, so the release is sent again once reconnected (a re-claim that
    // races with this release is given back by OpenStream too).
    if (!connected_) {
      if (released_offline_.size() < kMaxReleasedOffline) released_offline_.push_back(lease_id);
      return absl::OkStatus();
    }
  }
  // The release is not waited for: the stream is ordered, so the limiter applies it before anything this
  // client sends next, and its only failure (the lease already ended) needs no action.
  SendReleaseNoReply(lease_id);
  return absl::OkStatus();
}

}  // namespace corral::ratelimiter
