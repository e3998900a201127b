// Lease ids are bearer credentials signed with the cluster secret. They carry what was granted (limit, key,
// permits, fencing token), so after a restart — when the limiter remembers nothing — a client's re-claim is checked by
// the signature alone and cannot inflate its permits or move them to another limit.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "libs/core/token.h"

namespace corral::ratelimiter {

struct LeaseClaim {
  std::string limit;
  std::string key;
  int64_t permits = 0;
  uint64_t fencing_token = 0;  // 0: an id minted before tokens existed
};

// A fresh, unique, signed lease id for `claim`.
std::string MintLeaseId(const TokenSigner& signer, const LeaseClaim& claim);
// The claim inside a lease id; PERMISSION_DENIED when the signature does not verify or the id is malformed.
absl::StatusOr<LeaseClaim> ParseLeaseId(const TokenSigner& signer, const std::string& lease_id);
// The claim inside a lease id whose signature is not checked: only for ids read back from the limiter's own
// lease snapshot, which may have been signed by a key that died with the previous process (--insecure).
// PERMISSION_DENIED when the id is malformed.
absl::StatusOr<LeaseClaim> ReadStoredLeaseId(const std::string& lease_id);

}  // namespace corral::ratelimiter
