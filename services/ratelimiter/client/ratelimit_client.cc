#include "services/ratelimiter/client/ratelimit_client.h"

#include <deque>
#include <optional>

#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "libs/core/clock.h"
#include "libs/core/logging.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/status_conversion.h"
#include "spdlog/spdlog.h"

namespace corral::ratelimiter {

// One Session stream: the hello it opens with, a read always outstanding, and a queue of requests with exactly
// one write in flight. Created and deleted by Run(); its state is guarded by the client's mu_. A hold keeps the
// call open while requests may still be queued from outside the reactions; it is removed when the stream
// breaks, after which nothing more is written.
class RateLimitClient::Stream final : public grpc::ClientBidiReactor<v1::SessionRequest, v1::SessionResponse> {
 public:
  // Starts the call with `hello` queued. Called with the client's mu_ held: no reaction runs inline.
  Stream(RateLimitClient* client, v1::SessionRequest hello) : client_(client) {
    AttachBearer(context_, client->options_.token);
    client->stub_->async()->Session(&context_, this);
    AddHold();
    StartRead(&in_);
    (void)WriteLocked(std::move(hello));
    StartCall();
  }

  // Queues `request`; false once the stream is broken.
  bool WriteLocked(v1::SessionRequest request) {
    if (broken_) return false;
    queue_.push_back(std::move(request));
    if (!writing_) {
      writing_ = true;
      StartWrite(&queue_.front());  // deque::push_back keeps the front element where it is
    }
    return true;
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&client_->mu_);
    queue_.pop_front();
    writing_ = ok && !broken_ && !queue_.empty();
    if (writing_) StartWrite(&queue_.front());
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      client_->OnBroken(this);
      return;
    }
    // Handled before the next read, so replies are seen in the order the limiter sent them.
    client_->OnReply(this, std::move(in_));
    in_.Clear();
    StartRead(&in_);
  }

  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&client_->mu_);
    status_ = status;
    done_ = true;
  }

  RateLimitClient* const client_;
  grpc::ClientContext context_;
  v1::SessionResponse in_;
  std::deque<v1::SessionRequest> queue_;
  bool writing_ = false;
  bool broken_ = false;  // the read failed: the hold is gone, nothing more is written
  bool done_ = false;    // OnDone ran: gRPC is finished with the stream
  grpc::Status status_;
};

// ---------------------------------------------------------------------------------------------- client

RateLimitClient::RateLimitClient(ClientOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<RateLimitClient>> RateLimitClient::Connect(ClientOptions options) {
  auto channel = MakeChannel(options.address, options.channel);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<RateLimitClient> client(new RateLimitClient(std::move(options)));
  client->stub_ = v1::RateLimiter::NewStub(*channel);
  client->thread_ = std::thread([c = client.get()] { c->Run(); });
  client->first_attempt_done_.WaitForNotificationWithTimeout(client->options_.connect_timeout);
  if (!client->connected() && client->options_.fail_mode == FailMode::kClosed) {
    // A limiter that answered and refused the credentials is not unreachable: say so, as it did.
    const absl::Status why = client->FirstFailure();
    if (absl::IsUnauthenticated(why) || absl::IsPermissionDenied(why)) return why;
    if (!client->options_.start_unreachable) {
      return absl::UnavailableError(absl::StrCat("cannot reach the ratelimiter at ", client->options_.address,
                                                 why.ok() ? "" : ": ", why.message()));
    }
    spdlog::warn(
        "ratelimit client: the ratelimiter at {} cannot be reached yet{}{}; connecting in the background, "
        "and what needs a permit waits for it",
        client->options_.address, why.ok() ? "" : ": ", why.message());
  }
  return client;
}

absl::Status RateLimitClient::FirstFailure() const {
  absl::MutexLock lock(&mu_);
  return first_failure_;
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
  options.start_unreachable = true;
  return Connect(std::move(options));
}

RateLimitClient::~RateLimitClient() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    if (stream_ != nullptr) stream_->context_.TryCancel();  // ends the session: the limiter releases our leases
  }
  if (thread_.joinable()) thread_.join();
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
  auto it = held_.find(lease_id);
  return it != held_.end() && std::chrono::steady_clock::now() < it->second.safe_until;
}

std::chrono::steady_clock::time_point RateLimitClient::SafeUntil(std::chrono::steady_clock::time_point sent,
                                                                 const v1::Lease& lease, absl::Duration waited) {
  return sent + absl::ToChronoNanoseconds(waited + FromProto(lease.ttl()));
}

void RateLimitClient::Run() {
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    std::unique_ptr<Stream> stream;
    bool was_connected = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (closing_) break;
      v1::SessionRequest hello;
      hello.mutable_hello()->set_client_id(options_.client_id);
      hello.mutable_hello()->set_omit_queued(true);  // a waiting caller needs only the final reply
      for (const auto& [id, held] : held_) *hello.mutable_hello()->add_reclaim() = held.lease;
      hello_sent_ = std::chrono::steady_clock::now();
      stream = std::make_unique<Stream>(this, std::move(hello));
      stream_ = stream.get();
      const Stream* s = stream.get();
      auto settled = [this, s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return connected_ || s->broken_ || closing_; };
      AwaitExpiringKeptLocked(absl::Condition(&settled), absl::InfiniteFuture());
      was_connected = connected_;
      // A first attempt that failed is settled once its status is known (below), for Connect to report it.
      if (was_connected && !first_attempt_done_.HasBeenNotified()) first_attempt_done_.Notify();
      if (was_connected) backoff = absl::Milliseconds(50);
      // Connected: keep the held leases alive until the stream breaks or the client closes.
      auto over = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !connected_ || closing_; };
      while (!over()) {
        if (!mu_.AwaitWithTimeout(absl::Condition(&over), KeepAliveInterval()) && !held_.empty()) {
          SendKeepAliveLocked();
        }
        std::vector<std::shared_ptr<Pending>> unanswered = ExpireUnansweredLocked(ProcessNow());
        if (!unanswered.empty()) {
          mu_.Unlock();  // callbacks run outside the lock
          for (auto& p : unanswered) p->callback(std::move(p->reply));
          mu_.Lock();
        }
      }
      if (closing_) stream->context_.TryCancel();
      auto done = [s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return s->done_; };
      mu_.Await(absl::Condition(&done));
      stream_ = nullptr;
      status = stream->status_;
      if (!was_connected && first_failure_.ok()) first_failure_ = FromGrpcStatus(status);
    }
    stream.reset();
    if (!first_attempt_done_.HasBeenNotified()) first_attempt_done_.Notify();
    {
      absl::MutexLock lock(&mu_);
      if (closing_) break;
      if (was_connected) {
        spdlog::warn("ratelimit client: session lost ({}); reconnecting", status.error_message());
      } else {
        spdlog::debug("ratelimit client: session to {} failed: {}", options_.address, status.error_message());
      }
    }
    {
      absl::MutexLock lock(&mu_);
      AwaitExpiringKeptLocked(absl::Condition(&closing_), ProcessNow() + backoff);  // the next turn stops if closing
    }
    backoff = std::min(backoff * 2, options_.max_reconnect_backoff);
  }
  if (!first_attempt_done_.HasBeenNotified()) first_attempt_done_.Notify();
  // Closing: the acquires still waiting for a session get their answer now.
  std::vector<std::shared_ptr<Pending>> failed;
  {
    absl::MutexLock lock(&mu_);
    failed = FailPending(absl::UnavailableError("the ratelimit client is closing"));
  }
  for (auto& p : failed) p->callback(std::move(p->reply));
}

absl::Time RateLimitClient::EarliestGiveUpLocked() const {
  absl::Time earliest = absl::InfiniteFuture();
  for (const auto& [id, p] : pending_) {
    if (p->message.has_value() && !p->sent) earliest = std::min(earliest, p->give_up);
  }
  return earliest;
}

void RateLimitClient::AwaitExpiringKeptLocked(const absl::Condition& done, absl::Time until) {
  while (!done.Eval() && ProcessNow() < until) {
    const absl::Time wake = std::min(until, EarliestGiveUpLocked());
    // Woken too by an acquire kept meanwhile that must give up before `wake`.
    auto woken = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done.Eval() || EarliestGiveUpLocked() < wake; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), std::max(wake - ProcessNow(), absl::ZeroDuration()));
    std::vector<std::shared_ptr<Pending>> expired = ExpireKeptLocked(ProcessNow());
    if (expired.empty()) continue;
    mu_.Unlock();  // callbacks run outside the lock
    for (auto& p : expired) p->callback(std::move(p->reply));
    mu_.Lock();
  }
}

std::vector<std::shared_ptr<RateLimitClient::Pending>> RateLimitClient::ExpireKeptLocked(absl::Time now) {
  std::vector<std::shared_ptr<Pending>> callbacks;
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = *it->second;
    if (!p.message.has_value() || p.sent || now < p.give_up) {
      ++it;
      continue;
    }
    if (Settle(p, absl::UnavailableError(absl::StrCat("the ratelimiter at ", options_.address,
                                                      " stayed unreachable while the request waited")))) {
      callbacks.push_back(it->second);
    }
    it = pending_.erase(it);
  }
  return callbacks;
}

std::vector<std::shared_ptr<RateLimitClient::Pending>> RateLimitClient::ExpireUnansweredLocked(absl::Time now) {
  std::vector<std::shared_ptr<Pending>> callbacks;
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = *it->second;
    if (!p.sent || p.deadline == absl::InfiniteFuture() || now < p.deadline + kUnansweredGrace) {
      ++it;
      continue;
    }
    SendCancelLocked(it->first);
    if (Settle(p, absl::DeadlineExceededError("no reply from the ratelimiter in time")))
      callbacks.push_back(it->second);
    it = pending_.erase(it);
  }
  return callbacks;
}

bool RateLimitClient::Settle(Pending& pending, absl::StatusOr<v1::SessionResponse> reply) {
  pending.reply = std::move(reply);
  if (pending.callback) return true;
  pending.done.Notify();
  return false;
}

void RateLimitClient::OnReady(const v1::SessionReady& ready) {
  std::vector<std::string> released_meanwhile;
  for (const v1::ReclaimResult& r : ready.reclaimed()) {
    if (r.has_error()) {
      spdlog::warn("ratelimit client: lease could not be re-claimed: {}", r.error().message());
      held_.erase(r.lease_id());
    } else if (auto held = held_.find(r.lease_id()); held != held_.end()) {
      held->second = {r.lease(), SafeUntil(hello_sent_, r.lease())};
    } else {
      released_meanwhile.push_back(r.lease_id());  // its permit was dropped while we were reconnecting
    }
  }
  released_meanwhile.insert(released_meanwhile.end(), released_offline_.begin(), released_offline_.end());
  released_offline_.clear();
  session_id_ = ready.session_id();
  default_ttl_ = FromProto(ready.default_lease_ttl());
  connected_ = true;
  ++connections_;
  for (const std::string& id : released_meanwhile) SendReleaseLocked(id);
  // Acquires made or broken off while the session was down go out now, with what is left of their wait (at
  // least a moment, so the limiter answers one whose wait ran out with its own DEADLINE_EXCEEDED or a grant).
  const absl::Time now = ProcessNow();
  for (auto& [id, p] : pending_) {
    if (!p->message.has_value() || p->sent) continue;
    v1::SessionRequest again = *p->message;
    if (p->deadline != absl::InfiniteFuture()) {
      ToProto(std::max(p->deadline - now, absl::Milliseconds(1)), again.mutable_acquire()->mutable_wait_timeout());
    }
    p->sent_at = std::chrono::steady_clock::now();  // before: the limiter cannot receive it earlier
    p->sent = SendLocked(std::move(again));
  }
}

void RateLimitClient::OnReply(Stream* stream, v1::SessionResponse reply) {
  std::shared_ptr<Pending> answered;  // its waiter is woken, or its callback run, once the lock is released
  {
    absl::MutexLock lock(&mu_);
    if (stream != stream_) return;
    if (!connected_) {  // the answer to hello
      if (reply.has_ready()) {
        OnReady(reply.ready());
      } else {
        spdlog::warn("ratelimit client: the limiter did not answer hello with ready; reconnecting");
        stream->context_.TryCancel();
      }
      return;
    }
    if (reply.has_lease_lost()) {
      held_.erase(reply.lease_lost().lease_id());
      return;
    }
    if (reply.has_queued()) return;
    const bool lease = reply.has_granted() && reply.granted().has_lease();
    auto it = pending_.find(reply.request_id());
    if (it == pending_.end()) {
      // nobody waits for it any more (timed out, cancelled): give it back, keep nothing of it
      if (lease) SendReleaseLocked(reply.granted().lease().lease_id());
      return;
    }
    if (lease) {
      // Granted `waited` after the limiter received the acquire, which it did no earlier than it was sent.
      const v1::Lease& granted = reply.granted().lease();
      held_[granted.lease_id()] = {granted,
                                   SafeUntil(it->second->sent_at, granted, FromProto(reply.granted().waited()))};
    }
    // Set under the lock, so a waiter that gave up meanwhile (Call) finds it answered; woken after it, so the
    // waiter does not run only to block on the lock this thread still holds (its next call takes it at once).
    it->second->reply = std::move(reply);
    answered = std::move(it->second);
    pending_.erase(it);
  }
  if (answered == nullptr) return;
  if (answered->callback) {
    answered->callback(std::move(answered->reply));
  } else {
    answered->done.Notify();
  }
}

void RateLimitClient::OnBroken(Stream* stream) {
  std::vector<std::shared_ptr<Pending>> failed;
  {
    absl::MutexLock lock(&mu_);
    stream->broken_ = true;
    if (stream == stream_ && connected_) {
      connected_ = false;
      keepalive_id_ = 0;
      failed = FailPending(absl::UnavailableError("the session stream to the ratelimiter broke"),
                           /*keep_acquires=*/true);
    }
  }
  // broken_ is set: nothing more is written. OnDone follows once the outstanding operations end.
  stream->RemoveHold();
  for (auto& p : failed) p->callback(std::move(p->reply));
}

bool RateLimitClient::SendLocked(v1::SessionRequest request) {
  return connected_ && stream_ != nullptr && stream_->WriteLocked(std::move(request));
}

void RateLimitClient::SendCancelLocked(uint64_t acquire_id) {
  v1::SessionRequest cancel;  // request_id 0: a cancel has no reply of its own
  cancel.mutable_cancel()->set_acquire_request_id(acquire_id);
  (void)SendLocked(std::move(cancel));
}

uint64_t RateLimitClient::StartCallLocked(v1::SessionRequest& request, std::shared_ptr<Pending> pending) {
  const bool keep = request.has_acquire() && options_.fail_mode == FailMode::kClosed && !closing_ &&
                    options_.max_disconnected_wait > absl::ZeroDuration();
  if (!connected_ && !keep) return 0;
  const uint64_t id = next_request_id_++;
  request.set_request_id(id);
  pending->sent_at = std::chrono::steady_clock::now();  // before: the limiter cannot receive it earlier
  pending->sent = SendLocked(request);
  if (!pending->sent && !keep) return 0;
  const absl::Time now = ProcessNow();
  if (request.has_acquire() && request.acquire().has_wait_timeout()) {
    pending->deadline = now + FromProto(request.acquire().wait_timeout());
  }
  if (keep) {
    pending->message = request;
    if (!pending->sent) pending->give_up = std::min(pending->deadline, now + options_.max_disconnected_wait);
  }
  pending_[id] = std::move(pending);
  return id;
}

void RateLimitClient::SendReleaseLocked(const std::string& lease_id) {
  v1::SessionRequest message;
  message.mutable_release()->set_lease_id(lease_id);
  (void)SendLocked(std::move(message));
}

void RateLimitClient::SendKeepAliveLocked() {
  if (keepalive_id_ != 0) {
    if (ProcessNow() - keepalive_sent_ < kKeepAliveTimeout) return;  // the last one is not answered yet
    pending_.erase(keepalive_id_);                                   // never answered: give up on it and send another
  }
  keepalive_sent_ = ProcessNow();
  auto pending = std::make_shared<Pending>();
  pending->callback = [this, sent = std::chrono::steady_clock::now()](absl::StatusOr<v1::SessionResponse> reply) {
    if (!reply.ok()) return;  // the stream broke; the next session re-claims what is held
    if (reply->has_error()) spdlog::warn("ratelimit client: keepalive refused: {}", reply->error().message());
    absl::MutexLock lock(&mu_);
    keepalive_id_ = 0;
    for (const v1::Lease& lease : reply->kept_alive().leases()) {
      auto held = held_.find(lease.lease_id());
      if (held == held_.end()) {
        // The session has it but no permit owns it (a release lost in a reconnect): given back.
        SendReleaseLocked(lease.lease_id());
      } else {
        held->second.lease = lease;
        held->second.safe_until = std::max(held->second.safe_until, SafeUntil(sent, lease));
      }
    }
  };
  v1::SessionRequest request;
  request.mutable_keep_alive();  // no ids: every lease of this session
  keepalive_id_ = StartCallLocked(request, std::move(pending));
}

absl::Duration RateLimitClient::KeepAliveInterval() const {
  if (options_.keepalive_interval > absl::ZeroDuration()) return options_.keepalive_interval;
  // A third of the shortest TTL held, so one lost keepalive never expires a lease.
  absl::Duration ttl = default_ttl_;
  for (const auto& [id, held] : held_) {
    if (held.lease.has_ttl()) ttl = std::min(ttl, FromProto(held.lease.ttl()));
  }
  return std::max(ttl / 3, absl::Milliseconds(50));
}

std::vector<std::shared_ptr<RateLimitClient::Pending>> RateLimitClient::FailPending(const absl::Status& status,
                                                                                    bool keep_acquires) {
  std::vector<std::shared_ptr<Pending>> callbacks;
  const absl::Time now = ProcessNow();
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = *it->second;
    if (keep_acquires && p.message.has_value()) {
      // A grant the broken session made and never delivered ends with that session (or by its TTL after a
      // limiter crash); the request is asked again of the next session.
      if (p.sent) p.give_up = std::min(p.deadline, now + options_.max_disconnected_wait);
      p.sent = false;
      ++it;
      continue;
    }
    if (Settle(p, status)) callbacks.push_back(it->second);
    it = pending_.erase(it);
  }
  return callbacks;
}

}  // namespace corral::ratelimiter
