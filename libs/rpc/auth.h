// Call authentication shared by every service: `authorization: Bearer <token>` metadata, where the cluster
// token is minted from the shared secret (anyone holding the secret file can mint it; services and trusted
// clients such as the scheduler and the CLI do). Services started with --insecure accept any call.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server_context.h"
#include "libs/core/token.h"

namespace corral {

// "corral.<mac>": the bearer token that authenticates cluster-internal callers.
std::string MintClusterToken(const TokenSigner& signer);

// Immutable, thread-safe.
class CallAuthenticator {
 public:
  // nullopt: insecure mode, every call is accepted.
  explicit CallAuthenticator(std::optional<TokenSigner> signer) : signer_(std::move(signer)) {}

  // OK for a valid cluster token (or in insecure mode); UNAUTHENTICATED naming what was wrong otherwise.
  absl::Status CheckCluster(const grpc::ServerContextBase& context) const;
  // The same check for a bearer token that came another way (an HTTP header).
  absl::Status CheckClusterToken(absl::string_view token) const;
  // The raw bearer token of the call, or UNAUTHENTICATED if there is none.
  static absl::StatusOr<std::string> BearerToken(const grpc::ServerContextBase& context);

  bool insecure() const { return !signer_.has_value(); }
  const TokenSigner* signer() const { return signer_ ? &*signer_ : nullptr; }

 private:
  std::optional<TokenSigner> signer_;
};

// Adds `authorization: Bearer <token>` to a client call (nothing if `token` is empty).
void AttachBearer(grpc::ClientContext& context, const std::string& token);

}  // namespace corral
