// The policy (weights) version the proxy's upstreams serve now, as the trainer last said (Proxy.UpdatePolicy).
// Every call reads it when it arrives and between the chunks it relays, to record which version produced what.
// Thread-safe (one atomic).
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "libs/api/policy_version.h"

namespace corral::proxy {

class PolicyVersion {
 public:
  int64_t current() const { return version_.load(std::memory_order_acquire); }

  // Moves to `version`; returns the version before. The current version again is a no-op (a retried update);
  // a lower one is FAILED_PRECONDITION naming both, a negative one INVALID_ARGUMENT.
  absl::StatusOr<int64_t> Update(int64_t version) {
    int64_t now = version_.load(std::memory_order_acquire);
    do {
      if (absl::Status s = CheckPolicyVersion(version, now); !s.ok()) return s;
    } while (!version_.compare_exchange_weak(now, version, std::memory_order_acq_rel));
    return now;
  }

 private:
  std::atomic<int64_t> version_{0};
};

}  // namespace corral::proxy
