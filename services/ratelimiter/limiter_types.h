// What the Limiter (limiter.h) takes and gives: its options, requests, grants, tickets and status, the callbacks
// it calls, and the store its held leases are recorded in. Apart from the Limiter, so that its private
// bookkeeping (limiter_internal.h) stands below it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/ratelimiter/limit_spec.h"

namespace corral::ratelimiter {

struct LimiterOptions {
  absl::Duration default_lease_ttl = absl::Seconds(30);
  absl::Duration max_lease_ttl = absl::Minutes(5);
  // Learning mode after a (re)start: until start + max_lease_ttl only re-claims are granted, so leases held
  // from before the restart are never over-granted. Needed only when no LeaseStore remembers them; off for a
  // brand-new cluster with nothing to re-claim.
  bool learning_mode = true;
};

// A held concurrency lease as a LeaseStore keeps it: the signed id carries limit, key and permits.
struct LeaseClaim;

struct StoredLease {
  std::string id;
  absl::Duration ttl;
};

// Where the limiter records held concurrency leases so that a restarted limiter knows them and needs no learning
// mode (lease_snapshot.h keeps them in SQLite). Called with the limiter's lock held, synchronously: a grant is
// stored before its holder hears of it, and a grant that cannot be stored is not made. Must not call back into
// the limiter.
class LeaseStore {
 public:
  virtual ~LeaseStore() = default;
  virtual absl::Status Held(const StoredLease& lease) = 0;  // granted or re-claimed
  virtual void Ended(const std::string& lease_id) = 0;
  // Every few seconds: the limiter was alive at `now`, which bounds how long a lease can outlive a crash.
  virtual void Alive(absl::Time now) = 0;
};

// A granted concurrency lease, or a rate grant (then lease_id is empty: tokens are spent).
struct Grant {
  std::string lease_id;
  std::string limit;
  std::string key;
  int64_t permits = 0;
  absl::Time grant_time;
  absl::Time expire_time;  // concurrency only
  absl::Duration ttl;      // concurrency only
  absl::Duration waited;
  std::string session_id;
  uint64_t fencing_token = 0;  // concurrency only: larger than every earlier grant's (Lease.fencing_token)
};

struct AcquireParams {
  std::string limit;
  std::string key;
  int64_t permits = 1;                                     // 0 → 1
  absl::Duration wait_timeout = absl::InfiniteDuration();  // how long to wait queued
  absl::Duration lease_ttl = absl::ZeroDuration();         // 0 → default_lease_ttl
  std::string session_id;                                  // bind the lease to this session
  std::string request_id;                                  // unary idempotency key (optional)
  bool try_only = false;                                   // TryAcquire: never wait
  bool allow_debt = false;  // rate limits: permits above the burst, granted on a full bucket, leaving debt
};

// A correction of a rate limit's bucket (Adjust).
struct AdjustParams {
  std::string limit;
  std::string key;
  int64_t tokens = 0;                              // > 0 debit, < 0 refund
  absl::Duration hold_for = absl::ZeroDuration();  // no tokens before now + hold_for
};

// Called exactly once for an accepted Acquire: the grant, or DEADLINE_EXCEEDED (wait_timeout), CANCELLED
// (CancelWaiter, or its session ended), NOT_FOUND (limit force-deleted), FAILED_PRECONDITION (the limit shrank
// below the request). Never called with the limiter's lock held.
using AcquireCallback = absl::AnyInvocable<void(absl::StatusOr<Grant>)>;
// Called when a session's lease ends without a Release: DEADLINE_EXCEEDED (TTL) or NOT_FOUND (limit deleted).
using LeaseLostCallback = std::function<void(const std::string& lease_id, const absl::Status& reason)>;

struct AcquireTicket {
  uint64_t waiter_id = 0;                        // for CancelWaiter
  bool queued = false;                           // false: already granted (the callback has run or is about to)
  uint32_t position = 0;                         // 1-based queue position when queued
  std::optional<absl::Duration> estimated_wait;  // rate limits: exact FIFO reservation time
};

struct ReclaimOutcome {
  std::string lease_id;
  absl::StatusOr<Grant> result;
};

struct InstanceStatus {
  std::string limit, key;
  LimitKind kind;
  int64_t capacity = 0, in_use = 0, leases = 0, waiters = 0, waiting_permits = 0, reclaimed = 0;
  absl::Duration oldest_waiter_age;
  double rate_per_s = 0;
};

struct LimiterStatus {
  bool learning_mode = false;
  bool durable_leases = false;  // held leases are kept in a LeaseStore
  absl::Time learning_mode_end, start_time;
  int64_t sessions = 0, leases = 0;
  std::vector<InstanceStatus> instances;  // ordered by (limit, key)
};

}  // namespace corral::ratelimiter
