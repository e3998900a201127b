// corral::ratelimit_client — the C++ client of corral-ratelimiter. One Session stream per client object
// carries every acquire, release and keepalive (the fast path). Held leases are kept alive automatically and
// re-claimed after a reconnect or a limiter restart. When the limiter is unreachable the client either fails
// closed (UNAVAILABLE) or fails open (a permit that holds nothing), as configured.
//
//   auto client = RateLimitClient::Connect({.address = "127.0.0.1:7400", .client_id = "scheduler-0"});
//   auto permit = (*client)->Acquire({.limit = "code_exec", .key = "python"});
//   if (permit.ok()) RunTool();   // released when `permit` goes out of scope
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "corral/v1/ratelimit.grpc.pb.h"
#include "libs/rpc/channel.h"

namespace corral::ratelimiter {

enum class FailMode {
  kClosed,  // limiter unreachable → UNAVAILABLE: nothing runs without a permit
  kOpen,    // limiter unreachable → an empty permit: work proceeds unlimited (logged)
};

struct ClientOptions {
  std::string address;  // HOST:PORT of corral-ratelimiter
  std::string token;    // cluster bearer token; empty for an --insecure limiter
  std::string client_id = "corral-client";
  ChannelOptions channel;
  FailMode fail_mode = FailMode::kClosed;
  absl::Duration connect_timeout = absl::Seconds(5);
  // How often held leases are renewed; 0 → a third of the limiter's default lease TTL.
  absl::Duration keepalive_interval = absl::ZeroDuration();
  absl::Duration max_reconnect_backoff = absl::Seconds(2);
  // Failing closed, a blocking acquire made while the session is down (a limiter restart) waits for the
  // reconnect — within its own wait_timeout, and for at most this long disconnected — instead of failing at
  // once. 0: fail at once (UNAVAILABLE).
  absl::Duration max_disconnected_wait = absl::Minutes(2);
  // Failing closed, Connect fails when the first connection does not come within connect_timeout; with this set
  // it returns the client anyway (a service started while its limiter restarts), which keeps connecting, and its
  // acquires wait as above. Refused credentials fail either way.
  bool start_unreachable = false;
};

struct PermitRequest {
  std::string limit;
  std::string key;
  int64_t permits = 1;
  absl::Duration wait_timeout = absl::InfiniteDuration();
  absl::Duration lease_ttl = absl::ZeroDuration();  // 0 → the limiter's default
  bool allow_debt = false;  // rate limits: permits above the burst, granted on a full bucket (AcquireRequest)
};

class RateLimitClient;

// A held permit; released when destroyed (or by Release()). Move-only.
class ScopedPermit {
 public:
  ScopedPermit() = default;
  ScopedPermit(ScopedPermit&& other) noexcept { *this = std::move(other); }
  ScopedPermit& operator=(ScopedPermit&& other) noexcept;
  ~ScopedPermit() { (void)Release(); }

  // The lease (concurrency limits), empty for rate grants and fail-open permits.
  const v1::Lease& lease() const { return lease_; }
  // True when granted without the limiter because it was unreachable and the client fails open.
  bool unlimited() const { return unlimited_; }
  // False once the lease may be gone: the limiter said so (TTL passed while disconnected, limit deleted), or its
  // TTL has run out on this machine's monotonic clock since the last renewal the limiter confirmed (counted from
  // when that request was sent, so never later than the limiter's own expiry). A process paused past its TTL
  // (SIGSTOP, a frozen VM) sees false at once when it resumes, before any message from the limiter is read.
  // Check it right before acting on what the permit guards, and hand that resource lease().fencing_token().
  bool valid() const;
  // Gives the permit back. Returns once the release is queued on the session stream, which is ordered: the
  // limiter applies it before anything this client sends later. A permit must not outlive its client.
  absl::Status Release();

 private:
  friend class RateLimitClient;
  RateLimitClient* client_ = nullptr;
  v1::Lease lease_;
  bool unlimited_ = false;
};

// Thread-safe. The session stream uses gRPC's callback API: a reply is handled on one of gRPC's callback threads,
// which wakes the caller waiting for it (one hand-off), and a request is queued and written without waiting. One
// thread of the client's own connects, reconnects and sends keepalives.
class RateLimitClient {
 public:
  // Starts the session; the first connection is tried for `connect_timeout`. Fails (UNAVAILABLE) only when
  // failing closed and the limiter cannot be reached; failing open, it keeps retrying in the background.
  static absl::StatusOr<std::unique_ptr<RateLimitClient>> Connect(ClientOptions options);
  // A Corral service's client (the scheduler's, a proxy's, a sandbox-api replica's): null when `address` is empty
  // (no limiter configured). It starts whether or not the limiter can be reached yet (logged): a service
  // restarted while its limiter is down or restarting serves what needs no permit, and waits for the limiter
  // for what does. Refused credentials fail.
  static absl::StatusOr<std::unique_ptr<RateLimitClient>> ConnectService(const std::string& address,
                                                                         const std::string& token,
                                                                         const std::string& client_id,
                                                                         const ChannelOptions& channel, bool fail_open);
  ~RateLimitClient();  // ends the session: the limiter releases every lease it still holds

  // Waits in the limiter's FIFO queue. DEADLINE_EXCEEDED after wait_timeout; RESOURCE_EXHAUSTED, NOT_FOUND,
  // INVALID_ARGUMENT, … as the limiter says. While the session is down (failing closed) the request waits for the
  // reconnect and is then sent with what is left of its wait_timeout; UNAVAILABLE once it has waited
  // max_disconnected_wait for a limiter that stays unreachable.
  absl::StatusOr<ScopedPermit> Acquire(const PermitRequest& request);
  // Acquire without blocking the caller: `done` runs once, on a gRPC callback thread (or on the calling thread
  // when the limiter is unreachable), with the permit or the error Acquire would return. Returns an id for
  // CancelAcquire (0 when `done` already ran). `done` must not block.
  uint64_t AcquireAsync(const PermitRequest& request, std::function<void(absl::StatusOr<ScopedPermit>)> done);
  // Leaves the limiter's queue: `done` of that request runs with CANCELLED unless it already ran.
  void CancelAcquire(uint64_t id);
  // Never waits: RESOURCE_EXHAUSTED when the permits are not free right now.
  absl::StatusOr<ScopedPermit> TryAcquire(const PermitRequest& request);
  // Rate limits: corrects a bucket after the fact — `tokens` > 0 spends more, < 0 gives back — and holds it
  // empty for `hold_for` (the limiter's Adjust). Fire-and-forget on the session stream, ordered before anything
  // sent later; dropped (logged) while the limiter is unreachable. An invalid adjust is logged by the limiter.
  void Adjust(const std::string& limit, const std::string& key, int64_t tokens,
              absl::Duration hold_for = absl::ZeroDuration());

  bool connected() const;
  std::string session_id() const;
  // How many times the session was (re)established; 1 after the first connect.
  int connections() const;

 private:
  friend class ScopedPermit;
  // How long past its wait an acquire's reply may be missing before the client gives up on the limiter.
  static constexpr absl::Duration kUnansweredGrace = absl::Seconds(10);
  // A call awaiting its reply.
  struct Pending {
    absl::Notification done;
    absl::StatusOr<v1::SessionResponse> reply = absl::UnknownError("no reply");
    // Set for AcquireAsync: called (outside the client's lock) instead of notifying `done`.
    std::function<void(absl::StatusOr<v1::SessionResponse>)> callback;
    // A blocking acquire (failing closed) outlives a broken session: `message` is sent again on the next one, with
    // what is left of the wait before `deadline`. Unsent meanwhile, it fails at `give_up`.
    std::optional<v1::SessionRequest> message;
    absl::Time deadline = absl::InfiniteFuture();
    absl::Time give_up = absl::InfiniteFuture();
    bool sent = false;
    std::chrono::steady_clock::time_point sent_at;  // when last sent: a grant's lease lives at least its TTL from then
  };
  // A live lease, and until when it is surely live (the monotonic time its last confirmed renewal was sent, plus
  // its TTL).
  struct HeldLease {
    v1::Lease lease;
    std::chrono::steady_clock::time_point safe_until;
  };
  class Stream;

  explicit RateLimitClient(ClientOptions options);
  // Why the first session attempt failed (OK while none did).
  absl::Status FirstFailure() const;
  absl::StatusOr<ScopedPermit> DoAcquire(const PermitRequest& request, bool try_only);
  absl::Status ReleaseLease(const std::string& lease_id);
  // Held, and surely still live (HeldLease.safe_until not passed).
  bool Holds(const std::string& lease_id) const;
  static std::chrono::steady_clock::time_point SafeUntil(std::chrono::steady_clock::time_point sent,
                                                         const v1::Lease& lease,
                                                         absl::Duration waited = absl::ZeroDuration());
  // Sends one request and waits for its final reply; UNAVAILABLE if the stream breaks meanwhile.
  absl::StatusOr<v1::SessionResponse> Call(v1::SessionRequest request, absl::Duration timeout, uint64_t* id_out);
  // Registers `pending` under a new request id and queues `request` with it. Not connected: a blocking acquire
  // (failing closed) is kept to be sent on reconnect; anything else gets 0 (nothing registered).
  uint64_t StartCallLocked(v1::SessionRequest& request, std::shared_ptr<Pending> pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `request` on the connected session stream; false when not connected.
  bool SendLocked(v1::SessionRequest request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Withdraws a queued acquire (no reply); dropped when not connected.
  void SendCancelLocked(uint64_t acquire_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendReleaseLocked(const std::string& lease_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendKeepAliveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration KeepAliveInterval() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The stream's reactions, on gRPC's callback threads.
  void OnReply(Stream* stream, v1::SessionResponse reply);
  void OnReady(const v1::SessionReady& ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnBroken(Stream* stream);
  // The client's thread: connects, waits, sends keepalives, reconnects with backoff until closing.
  void Run();
  // Waits until `done` holds or `until` (process time), failing the kept acquires whose time runs out meanwhile:
  // between sessions (the backoff) and while a new one waits for the limiter's hello, which a limiter that
  // accepted the connection and then stopped answering may never send. Each wait is a timeout, never a wall-clock
  // deadline: a step of the wall clock lengthens none (process time is not the wall clock after a step).
  void AwaitExpiringKeptLocked(const absl::Condition& done, absl::Time until) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When the first kept acquire gives up (InfiniteFuture: none is kept).
  absl::Time EarliestGiveUpLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails every pending request but, with `keep_acquires`, the blocking acquires kept for the reconnect.
  // Returns those with callbacks, to be called once the lock is released.
  std::vector<std::shared_ptr<Pending>> FailPending(const absl::Status& status, bool keep_acquires = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the kept acquires that have waited as long as they may (`now` past their give_up time).
  std::vector<std::shared_ptr<Pending>> ExpireKeptLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails (DEADLINE_EXCEEDED, with a cancel sent) the acquires sent on a live session that are still unanswered
  // kUnansweredGrace past their wait: the limiter enforces the wait, this guards against one that stops answering
  // (Acquire's own wait does the same; AcquireAsync had no such guard).
  std::vector<std::shared_ptr<Pending>> ExpireUnansweredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Notifies `pending`'s waiter or returns it when its callback must run (outside the lock).
  static bool Settle(Pending& pending, absl::StatusOr<v1::SessionResponse> reply);
  static v1::SessionRequest AcquireMessage(const PermitRequest& request, bool try_only);
  absl::StatusOr<ScopedPermit> PermitFromReply(const absl::StatusOr<v1::SessionResponse>& reply,
                                               const std::string& limit);

  const ClientOptions options_;
  std::unique_ptr<v1::RateLimiter::Stub> stub_;

  mutable absl::Mutex mu_;
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;  // the current stream, owned by Run()
  bool connected_ ABSL_GUARDED_BY(mu_) = false;    // stream_ got its `ready` and has not broken
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  int connections_ ABSL_GUARDED_BY(mu_) = 0;
  std::string session_id_ ABSL_GUARDED_BY(mu_);
  absl::Duration default_ttl_ ABSL_GUARDED_BY(mu_) = absl::Seconds(30);
  uint64_t next_request_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t keepalive_id_ ABSL_GUARDED_BY(mu_) = 0;  // the keepalive still unanswered, if any
  absl::Time keepalive_sent_ ABSL_GUARDED_BY(mu_);
  static constexpr absl::Duration kKeepAliveTimeout = absl::Seconds(10);  // then the next one is sent anyway
  std::map<uint64_t, std::shared_ptr<Pending>> pending_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, HeldLease> held_ ABSL_GUARDED_BY(mu_);             // live leases, re-claimed on reconnect
  std::chrono::steady_clock::time_point hello_sent_ ABSL_GUARDED_BY(mu_);  // the current session's hello
  // Released while disconnected: released again on reconnect, for a limiter that restored them from its
  // lease snapshot (bounded; beyond it, such leases end by their TTL).
  static constexpr size_t kMaxReleasedOffline = 10000;
  std::vector<std::string> released_offline_ ABSL_GUARDED_BY(mu_);
  absl::Status first_failure_ ABSL_GUARDED_BY(mu_);  // why the first session that failed did (Connect says)
  absl::Notification first_attempt_done_;
  std::thread thread_;
};

}  // namespace corral::ratelimiter
