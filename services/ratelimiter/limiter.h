// The ratelimiter's core: named limits (concurrency semaphores and token buckets, possibly keyed templates),
// strict-FIFO waiters, leases with TTLs bound to client sessions, and restart learning mode. Plain C++: no
// gRPC; time and timers come from the injected Clock, so tests drive it with a FakeClock.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "libs/core/clock.h"
#include "libs/core/token.h"
#include "services/ratelimiter/limit_spec.h"
#include "services/ratelimiter/limiter_types.h"
#include "services/ratelimiter/metrics.h"

namespace corral::ratelimiter {

// The Limiter's private bookkeeping (limiter_internal.h).
namespace internal {
struct Waiter;
struct Instance;
struct Limit;
struct Lease;
class LeaseTable;
struct Session;
}  // namespace internal

// Thread-safe. Every method validates its input and changes nothing when it returns an error.
class Limiter {
 public:
  // `store` (optional, not owned) records held leases; see Restore.
  Limiter(Clock* clock, TokenSigner signer, LimiterOptions options, RateLimiterMetrics* metrics,
          LeaseStore* store = nullptr);
  ~Limiter();
  Limiter(const Limiter&) = delete;
  Limiter& operator=(const Limiter&) = delete;

  // ---- limits
  absl::Status CreateLimit(LimitSpec spec);
  absl::StatusOr<LimitSpec> UpdateLimit(LimitSpec spec);
  absl::Status DeleteLimit(const std::string& name, bool force);
  absl::StatusOr<LimitSpec> GetLimit(const std::string& name) const;
  std::vector<LimitSpec> ListLimits() const;

  // ---- permits
  // Errors (returned, callback dropped): NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION (unknown session),
  // ALREADY_EXISTS (request_id reused differently), RESOURCE_EXHAUSTED (try_only not grantable now; rate
  // reservation beyond wait_timeout). Otherwise `done` runs exactly once, possibly before Acquire returns.
  absl::StatusOr<AcquireTicket> Acquire(AcquireParams params, AcquireCallback done);
  // Withdraws a queued request; its callback gets `reason`. False if it is no longer queued.
  bool CancelWaiter(uint64_t waiter_id, const absl::Status& reason);
  // NOT_FOUND (unknown, released or expired — the message says which when known), PERMISSION_DENIED (bound
  // to another session). `session_id` is the caller's session, empty for none.
  absl::Status Release(const std::string& lease_id, const std::string& session_id);
  // Renews to now + ttl; all or nothing. Empty `lease_ids` with a session: every lease of that session.
  absl::StatusOr<std::vector<Grant>> KeepAlive(const std::vector<std::string>& lease_ids,
                                               const std::string& session_id);
  // Rate limits: debits, refunds or holds the bucket (AdjustParams), then serves its waiters. Returns the tokens
  // it holds afterwards (negative in debt). NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION (concurrency limit).
  absl::StatusOr<double> Adjust(const AdjustParams& params);

  // Leases held before a restart, as the LeaseStore kept them: they count against their limits at once,
  // unbound to any session until their holders re-claim them. Each expires one TTL from now unless re-claimed or
  // kept alive (the previous limiter's heartbeat, a reading of another process's wall clock, cannot say how long
  // ago it died). Leases of limits no longer declared, or whose signature does not verify, are dropped. Call
  // after declaring the limits; returns how many were restored.
  // Fencing tokens granted from now on are larger than `fencing_high_water` and than every restored lease's.
  // When a previous limiter ran (`last_alive` known), rate buckets start empty: it may have spent a whole burst
  // just before it died.
  int Restore(const std::vector<StoredLease>& leases, absl::Time last_alive, uint64_t fencing_high_water = 0);
  // The server is going away: sessions that end from now on leave their leases in the store (their holders
  // still hold them and re-claim them from the next limiter). Call before the server drains its streams.
  void PrepareShutdown();

  // ---- sessions
  std::string OpenSession(std::string client_id, LeaseLostCallback on_lease_lost);
  // Re-binds leases the client holds to `session_id` (after a reconnect or a restart). One outcome per lease.
  std::vector<ReclaimOutcome> Reclaim(const std::string& session_id, const std::vector<std::string>& lease_ids);
  // Releases every lease of the session and withdraws its waiters (their callbacks get CANCELLED).
  void CloseSession(const std::string& session_id);

  LimiterStatus Status(const std::string& limit_filter = "") const;
  bool learning_mode() const;
  absl::Time learning_mode_end() const { return learning_end_; }
  const LimiterOptions& options() const { return options_; }

 private:
  using Waiter = internal::Waiter;
  using Instance = internal::Instance;
  using Limit = internal::Limit;
  using Lease = internal::Lease;
  using LeaseTable = internal::LeaseTable;
  using Session = internal::Session;
  using Completions = std::vector<absl::AnyInvocable<void()>>;

  Limit* FindLimit(const std::string& name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Acquire, in steps: the request checked (defaults filled in), an idempotent retry answered, then granted at
  // once, refused, or queued.
  absl::StatusOr<AcquireTicket> AcquireLocked(AcquireParams& p, AcquireCallback& done, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Limit*> CheckAcquire(AcquireParams& p) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::optional<Grant>> RetriedGrant(const AcquireParams& p, const Limit& limit) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED saying why a try-only request cannot be granted now.
  absl::Status NotGrantableNow(const Instance& instance, const AcquireParams& p) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NOT_FOUND naming the declared limits, so the caller can act on it.
  absl::Status LimitNotFound(const std::string& name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Instance*> ResolveInstance(const std::string& limit, const std::string& key, bool create)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Refill(Instance& instance) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Grantable(Instance& instance, int64_t permits) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a concurrency lease (no metrics, no checks): for grants, re-claims and restores. A grant or re-claim
  // goes to the store first (`record`); RESOURCE_EXHAUSTED, changing nothing, when the store cannot keep it.
  absl::StatusOr<Lease*> AddLease(Instance& instance, int64_t permits, absl::Duration ttl,
                                  const std::string& session_id, const std::string& lease_id, uint64_t fencing_token,
                                  bool record = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a live lease answers: its grant as it stands.
  static Grant GrantOf(const Lease& lease);
  // Time left in learning mode, as words for an error message ("" when not learning).
  std::string LearningNote() const;
  // A new grant; a re-claim passes the lease's own id and fencing token (`reuse`) instead of minting them.
  struct LeaseIdentity {
    std::string id;
    uint64_t fencing_token = 0;
  };
  absl::StatusOr<Grant> Take(Instance& instance, int64_t permits, absl::Duration ttl, const std::string& session_id,
                             absl::Duration waited, const LeaseIdentity* reuse = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Pump(Instance& instance, Completions& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndLease(const std::string& lease_id, const absl::Status& lost_reason, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveWaiter(Instance& instance, std::list<Waiter>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ArmLeaseTimer(Lease& lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnLeaseExpired(const std::string& lease_id);
  void OnWaitTimeout(uint64_t waiter_id);
  void OnRateTimer(const std::string& limit, const std::string& key);
  void OnLearningEnd();
  void SweepIdleInstances();
  // The one re-claim path, for leases this limiter does not hold (Reclaim and KeepAlive in learning mode,
  // Restore): where a validly signed lease id counts — PERMISSION_DENIED for a bad signature, NOT_FOUND when
  // its limit is gone — then the lease granted again under its own id. Restore reads its ids from the
  // limiter's own snapshot and trusts them whatever key signed them (TargetOf), so that a restart never
  // forgets a held lease because the key changed (--insecure draws a new one every start).
  struct ReclaimTarget {
    Instance* instance = nullptr;
    int64_t permits = 0;
    uint64_t fencing_token = 0;
  };
  absl::StatusOr<ReclaimTarget> FindReclaimTarget(const std::string& lease_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<ReclaimTarget> TargetOf(const LeaseClaim& claim) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Grant> ReclaimLease(const ReclaimTarget& target, const std::string& lease_id,
                                     const std::string& session_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rate instance's bucket holds at most what it earned since rate_earned_since_ (a new one starts full).
  void CapToEarned(Instance& inst) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts `inst` again in its limit's in_use and waiters gauges (O(1)).
  void UpdateGauges(Instance& inst) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts every instance of `limit` again (after a restore, and at each idle sweep, which also refills buckets).
  void UpdateGauges(Limit& limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(Completions& completions);

  Clock* const clock_;
  const TokenSigner signer_;
  const LimiterOptions options_;
  RateLimiterMetrics* const metrics_;
  LeaseStore* const store_;
  const absl::Time start_time_;
  const absl::Time learning_end_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Limit>> limits_ ABSL_GUARDED_BY(mu_);
  const std::unique_ptr<LeaseTable> leases_ ABSL_PT_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  // Where each queued waiter is, for CancelWaiter and timeouts.
  absl::flat_hash_map<uint64_t, Instance*> waiter_index_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
  // The last fencing token granted (or known from before a restart); starts at the wall clock's microseconds, so
  // that tokens grow across a restart that has no snapshot to remember them (Restore raises it from one).
  uint64_t last_fencing_token_ ABSL_GUARDED_BY(mu_);
  // Since when rate buckets earned tokens: since the start without a snapshot (learning mode: the previous
  // process's spending is unknown) or after a Restore that found a previous limiter, and InfinitePast (full
  // buckets) for a first start.
  absl::Time rate_earned_since_ ABSL_GUARDED_BY(mu_);
  Clock::TimerId learning_timer_ = 0;
  Clock::TimerId sweep_timer_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool keep_leases_of_ended_sessions_ ABSL_GUARDED_BY(mu_) = false;  // PrepareShutdown
};

}  // namespace corral::ratelimiter
