#include "libs/rpc/auth.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace corral {
namespace {
constexpr char kClusterPurpose[] = "cluster";
constexpr char kClusterPayload[] = "corral";
}  // namespace

std::string MintClusterToken(const TokenSigner& signer) { return signer.Sign(kClusterPurpose, kClusterPayload); }

absl::StatusOr<std::string> CallAuthenticator::BearerToken(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ") || value.empty()) {
    return absl::UnauthenticatedError("authorization metadata must be 'Bearer <token>'");
  }
  return std::string(value);
}

absl::Status CallAuthenticator::CheckCluster(const grpc::ServerContextBase& context) const {
  if (!signer_) return absl::OkStatus();
  auto token = BearerToken(context);
  if (!token.ok()) return token.status();
  return CheckClusterToken(*token);
}

absl::Status CallAuthenticator::CheckClusterToken(absl::string_view token) const {
  if (!signer_) return absl::OkStatus();
  auto payload = signer_->Verify(kClusterPurpose, token);
  if (!payload.ok() || *payload != kClusterPayload) {
    return absl::UnauthenticatedError("invalid cluster token: mint it from the cluster's secret file");
  }
  return absl::OkStatus();
}

void AttachBearer(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
}

}  // namespace corral
