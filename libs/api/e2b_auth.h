// Who may use the E2B API: API keys issued by the cluster (`corral sandbox-api key NAME`), each a token signed
// with the cluster secret whose payload is the key's name — the owner of every sandbox made with it — and, per
// sandbox, the access token its in-sandbox calls present (the SDK's envdAccessToken). Both are checked with the
// secret alone, so any replica checks any key. Immutable, so thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "libs/core/token.h"

namespace corral::api {

class E2bAuth {
 public:
  explicit E2bAuth(TokenSigner signer) : signer_(std::move(signer)) {}

  // A key for `name` (1-128 of [A-Za-z0-9_:-]); INVALID_ARGUMENT otherwise.
  absl::StatusOr<std::string> MintApiKey(absl::string_view name) const;
  // The key's name; UNAUTHENTICATED for a missing, malformed or foreign key.
  absl::StatusOr<std::string> Owner(absl::string_view api_key) const;

  // The access token of `owner`'s sandbox `sandbox_id` (what its in-sandbox calls present as X-Access-Token).
  std::string AccessToken(absl::string_view owner, absl::string_view sandbox_id) const;
  // The sandbox's owner when `token` is `sandbox_id`'s access token; UNAUTHENTICATED otherwise.
  absl::StatusOr<std::string> CheckAccess(absl::string_view sandbox_id, absl::string_view token) const;

 private:
  const TokenSigner signer_;
};

}  // namespace corral::api
