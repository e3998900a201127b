// Signed bearer tokens: "<payload>.<mac>", mac = base64url(HMAC-SHA256(key, purpose || 0x00 || payload)).
// Used for sandbox capability tokens and proxy env tokens; the purpose string keeps a token minted for one
// use from being accepted for another.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace corral {

// Immutable after construction, so thread-safe.
class TokenSigner {
 public:
  static constexpr size_t kMinKeyBytes = 32;

  // Key material must be at least kMinKeyBytes. INVALID_ARGUMENT otherwise.
  static absl::StatusOr<TokenSigner> FromKey(std::string key);
  // Reads the key from `path` (trailing whitespace dropped). The file must be a regular file that neither
  // group nor others can read or write (chmod 600): FAILED_PRECONDITION otherwise, NOT_FOUND if missing.
  static absl::StatusOr<TokenSigner> FromKeyFile(const std::string& path);
  // A random key for --insecure playgrounds: tokens still work, but only within this process's lifetime.
  static TokenSigner Ephemeral();

  std::string Sign(absl::string_view purpose, absl::string_view payload) const;
  // Returns the payload of a token this key signed for `purpose`; UNAUTHENTICATED for anything else
  // (malformed, truncated, tampered, other key, other purpose). The MAC comparison is constant-time.
  absl::StatusOr<std::string> Verify(absl::string_view purpose, absl::string_view token) const;

 private:
  explicit TokenSigner(std::string key) : key_(std::move(key)) {}
  std::string Mac(absl::string_view purpose, absl::string_view payload) const;

  std::string key_;
};

}  // namespace corral
