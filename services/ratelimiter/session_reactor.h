// SessionReactor: one client's RateLimiter.Session bidi stream. Requests are handled in arrival order;
// replies (including grants that arrive later from the limiter, on other threads) go through a small outbox
// so exactly one write is in flight. When the stream ends for any reason the session is closed: its leases
// are released at once and its waiters leave their queues.
#pragma once

#include <deque>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "corral/v1/ratelimit.grpc.pb.h"
#include "services/ratelimiter/limiter.h"

namespace corral::ratelimiter {

class SessionReactor final : public grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse> {
 public:
  // `auth` is the call's authentication result; a failure ends the stream with it at once.
  SessionReactor(Limiter* limiter, absl::Status auth);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  // Shared with limiter callbacks, which may outlive the reactor: they find it gone and drop their reply.
  struct Outbox {
    absl::Mutex mu;
    SessionReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
    std::deque<v1::SessionResponse> queue ABSL_GUARDED_BY(mu);
    bool writing ABSL_GUARDED_BY(mu) = false;
    bool finished ABSL_GUARDED_BY(mu) = false;  // Finish has been called
    std::optional<grpc::Status> finish_when_drained ABSL_GUARDED_BY(mu);
    // Acquires not yet answered: request_id → waiter id (0 until queued).
    absl::flat_hash_map<uint64_t, uint64_t> outstanding ABSL_GUARDED_BY(mu);

    void Send(v1::SessionResponse message);
    void SendLocked(v1::SessionResponse message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
    void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  };

  void Handle(const v1::SessionRequest& request);
  void HandleHello(const v1::SessionRequest& request);
  void HandleAcquire(uint64_t request_id, const v1::AcquireRequest& acquire, bool try_only);
  void HandleRelease(uint64_t request_id, const v1::ReleaseRequest& release);
  void HandleKeepAlive(uint64_t request_id, const v1::KeepAliveRequest& keep_alive);
  void HandleCancel(const v1::CancelAcquire& cancel);
  void Fail(grpc::Status status);
  void CloseSession();

  Limiter* const limiter_;
  const std::shared_ptr<Outbox> outbox_ = std::make_shared<Outbox>();
  v1::SessionRequest request_;
  std::string session_id_;    // touched only from OnReadDone/OnDone, which never run concurrently
  bool omit_queued_ = false;  // the hello's omit_queued; set in OnReadDone, read there
  bool session_closed_ = false;
};

}  // namespace corral::ratelimiter
