#include "services/ratelimiter/lease_id.h"

#include <array>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "openssl/rand.h"

namespace corral::ratelimiter {
namespace {
constexpr char kPurpose[] = "ratelimiter-lease";

// `n` random bytes from a buffer of the calling thread's, refilled 4 KiB at a time: RAND_bytes on every grant
// made a system call each time (OpenSSL checks for a fork with getpid), a quarter of the limiter's per grant.
// The limiter never forks (a forked copy would repeat what is left of the buffer): within a run an id is unique
// by its fencing token, across runs (a restart without a lease snapshot counts tokens anew) by the nonce, which a
// new process draws afresh.
void RandomBytes(unsigned char* out, size_t n) {
  thread_local std::array<unsigned char, 4096> pool;
  thread_local size_t used = pool.size();
  if (used + n > pool.size()) {
    RAND_bytes(pool.data(), static_cast<int>(pool.size()));
    used = 0;
  }
  std::memcpy(out, pool.data() + used, n);
  used += n;
}
}  // namespace

std::string MintLeaseId(const TokenSigner& signer, const LeaseClaim& claim) {
  unsigned char nonce[12];
  RandomBytes(nonce, sizeof(nonce));
  // t<token>-<nonce>:permits:limit:key — limit names never contain ':', keys may (the key is the remainder).
  return signer.Sign(
      kPurpose,
      absl::StrCat("t", claim.fencing_token, "-",
                   absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(nonce), sizeof(nonce))), ":",
                   claim.permits, ":", claim.limit, ":", claim.key));
}

namespace {
absl::StatusOr<LeaseClaim> ParsePayload(absl::string_view payload) {
  std::vector<std::string> parts = absl::StrSplit(payload, absl::MaxSplits(':', 3));
  LeaseClaim claim;
  if (parts.size() != 4 || !absl::SimpleAtoi(parts[1], &claim.permits) || claim.permits < 1) {
    return absl::PermissionDeniedError("lease id is malformed");
  }
  // An id minted before fencing tokens is a bare nonce (hex, no 't'): its token is 0.
  if (absl::StartsWith(parts[0], "t")) {
    const size_t dash = parts[0].find('-');
    if (dash == std::string::npos || !absl::SimpleAtoi(parts[0].substr(1, dash - 1), &claim.fencing_token)) {
      return absl::PermissionDeniedError("lease id is malformed");
    }
  }
  claim.limit = parts[2];
  claim.key = parts[3];
  return claim;
}
}  // namespace

absl::StatusOr<LeaseClaim> ParseLeaseId(const TokenSigner& signer, const std::string& lease_id) {
  auto payload = signer.Verify(kPurpose, lease_id);
  if (!payload.ok()) {
    return absl::PermissionDeniedError(absl::StrCat("lease id does not verify: ", payload.status().message()));
  }
  return ParsePayload(*payload);
}

absl::StatusOr<LeaseClaim> ReadStoredLeaseId(const std::string& lease_id) {
  const size_t dot = lease_id.rfind('.');
  if (dot == std::string::npos) return absl::PermissionDeniedError("lease id is malformed");
  return ParsePayload(absl::string_view(lease_id).substr(0, dot));
}

}  // namespace corral::ratelimiter
