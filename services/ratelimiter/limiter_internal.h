// Private to the Limiter's .cc files: the bookkeeping behind the Limiter's forward declarations (limiter.h).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "libs/core/clock.h"
#include "openssl/rand.h"
#include "services/ratelimiter/counters.h"
#include "services/ratelimiter/limiter_types.h"
#include "services/ratelimiter/metrics.h"

namespace corral::ratelimiter {

namespace internal {

inline constexpr size_t kEndedMemory = 10000;  // recently ended leases remembered for precise errors
inline constexpr absl::Duration kSweepEvery = absl::Seconds(5);
inline constexpr int64_t kMaxAdjustTokens = 1'000'000'000'000;  // |AdjustParams.tokens|
inline constexpr absl::Duration kMaxDebt = absl::Hours(1);      // of refill: the deepest a bucket's debt goes

inline std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(raw.size()));
  return absl::BytesToHexString(raw);
}

// Tokens a rate request needs in the bucket before it is granted: its permits, or the whole burst for a request
// above it (allow_debt).
inline double Needed(const LimitSpec& spec, int64_t permits) {
  return static_cast<double>(std::min(permits, spec.kind == LimitKind::kRate ? spec.burst : permits));
}

struct Limit;

struct Waiter {
  uint64_t id = 0;
  int64_t permits = 0;
  absl::Time enqueued;
  absl::Duration ttl;
  std::string session_id;
  std::string request_id;
  bool allow_debt = false;
  Clock::TimerId timeout_timer = 0;
  AcquireCallback done;
};

// One instance of a limit (the only one of an unkeyed limit, one per key of a keyed one).
struct Instance {
  Instance(Limit* l, std::string k, double burst, absl::Time now)
      : limit(l), key(std::move(k)), bucket(burst, now), last_active(now) {}
  Limit* const limit;
  const std::string key;
  Semaphore held;      // concurrency limits
  TokenBucket bucket;  // rate limits
  std::list<Waiter> queue;
  int64_t waiting_permits = 0;
  int64_t leases = 0;
  int64_t reclaimed = 0;
  Clock::TimerId rate_timer = 0;
  absl::Time last_active;
  // What this instance adds to its limit's in_use and waiters gauges, as last counted (UpdateGauges).
  double counted_in_use = 0, counted_waiters = 0;
};

struct Limit {
  LimitSpec spec;
  std::map<std::string, std::unique_ptr<Instance>> instances;
  LimitMetrics metrics;
  // The sums of the instances' counted_* (the gauges' values): kept up to date one instance at a time, so a grant
  // costs the same however many keys the limit has.
  double in_use = 0, waiters = 0;
};

struct Lease {
  std::string id;
  Instance* instance = nullptr;
  int64_t permits = 0;
  absl::Time grant_time, expire_time;
  absl::Duration ttl;
  std::string session_id;
  std::string request_id;
  uint64_t fencing_token = 0;  // inside its id too
  Clock::TimerId timer = 0;
};

// Held concurrency leases by id, the request ids of unary acquires that got them (for idempotent retries),
// and why recently ended leases ended (bounded; so a second Release can say "already released").
class LeaseTable {
 public:
  Lease* Find(const std::string& id) const;
  bool contains(const std::string& id) const { return leases_.contains(id); }
  size_t size() const { return leases_.size(); }
  Lease& Add(std::unique_ptr<Lease> lease);
  // Takes the lease out of the table (and forgets its request id); null when it is not there.
  std::unique_ptr<Lease> Remove(const std::string& id);
  void BindRequest(const std::string& request_id, Lease& lease);
  const Lease* ForRequest(const std::string& request_id) const;
  void RememberEnded(const std::string& id, std::string why);
  // Why the lease ended, when it ended recently; null otherwise.
  const std::string* EndedWhy(const std::string& id) const;
  std::vector<std::string> IdsOf(const Limit& limit) const;
  template <class F>
  void ForEach(F&& f) {
    for (auto& [id, lease] : leases_) f(*lease);
  }

 private:
  absl::flat_hash_map<std::string, std::unique_ptr<Lease>> leases_;
  absl::flat_hash_map<std::string, std::string> request_ids_;
  absl::flat_hash_map<std::string, std::string> ended_;
  std::list<std::string> ended_order_;
};

struct Session {
  std::string id;
  std::string client_id;
  LeaseLostCallback on_lost;
  absl::flat_hash_set<std::string> leases;
  absl::flat_hash_set<uint64_t> waiters;
};

}  // namespace internal
}  // namespace corral::ratelimiter
