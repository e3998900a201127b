// Private to the Limiter's two .cc files: the bookkeeping structs behind Limiter's forward declarations.
#pragma once

#include <list>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "openssl/rand.h"
#include "services/ratelimiter/limiter.h"

namespace corral::ratelimiter {

namespace internal {

inline constexpr size_t kEndedMemory = 10000;            // recently ended leases remembered for precise errors
inline constexpr absl::Duration kSweepEvery = absl::Seconds(5);
inline constexpr double kTokenEpsilon = 1e-9;             // float slack when a rate timer fires exactly on time

inline std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(raw.size()));
  return absl::BytesToHexString(raw);
}

}  // namespace internal

struct Limiter::Waiter {
  uint64_t id = 0;
  int64_t permits = 0;
  absl::Time enqueued;
  absl::Duration ttl;
  std::string session_id;
  std::string request_id;
  Clock::TimerId timeout_timer = 0;
  AcquireCallback done;
};

struct Limiter::Instance {
  Limit* limit = nullptr;
  std::string key;
  int64_t in_use = 0;    // concurrency: permits held
  double tokens = 0;     // rate: tokens available at refilled_at
  absl::Time refilled_at;
  std::list<Waiter> queue;
  int64_t waiting_permits = 0;
  int64_t leases = 0;
  int64_t reclaimed = 0;
  Clock::TimerId rate_timer = 0;
  absl::Time last_active;
};

struct Limiter::Limit {
  LimitSpec spec;
  std::map<std::string, std::unique_ptr<Instance>> instances;
  LimitMetrics metrics;
};

struct Limiter::Lease {
  std::string id;
  Instance* instance = nullptr;
  int64_t permits = 0;
  absl::Time grant_time, expire_time;
  absl::Duration ttl;
  std::string session_id;
  std::string request_id;
  Clock::TimerId timer = 0;
};

struct Limiter::Session {
  std::string id;
  std::string client_id;
  LeaseLostCallback on_lost;
  absl::flat_hash_set<std::string> leases;
  absl::flat_hash_set<uint64_t> waiters;
};

}  // namespace corral::ratelimiter
